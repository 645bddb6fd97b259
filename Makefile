# restorelens: `make demo` runs the embedded default, `make test` runs the suite.
# Both create .venv and install the project (pinned by constraints.txt) on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install test bench demo lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# Regenerate the pinned constraints from the current environment (after changing dependencies).
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^restorelens' > constraints.txt

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
