"""The layout the code promises: which package may import which, and one place for the gate's answers."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VIRTUAL_RUNNERS = ("experiments/moflux/virtual.py", "experiments/modelclaim/virtual.py")
GATE_ANSWER_STRINGS = {"retry-after", "x-restorelens-retry-after-ms"}


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports, relative imports resolved against its package."""
    package = "restorelens." + ".".join(path.relative_to(ROOT).parent.parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.append(base)
    return found


def test_the_client_side_imports_nothing_of_the_gate_or_the_engine() -> None:
    offending = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in (ROOT / "loadgen").rglob("*.py")
        for module in _imports(path)
        if module.startswith(("restorelens.gate", "restorelens.sim"))
    }
    assert not offending


def test_the_lifecycle_is_a_package_without_prefixed_modules() -> None:
    assert not list((ROOT / "gate").glob("modelclaim_*.py"))
    assert (ROOT / "gate" / "modelclaim" / "__init__.py").exists()


@pytest.mark.parametrize("runner", VIRTUAL_RUNNERS)
def test_the_virtual_runners_take_the_gates_answers_from_decide(runner: str) -> None:
    path = ROOT / runner
    assert "restorelens.gate.decide" in _imports(path)
    constants = [node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)]
    statuses = [value for value in constants if type(value) is int and 100 <= value <= 599]
    headers = [value for value in constants if isinstance(value, str) and value.lower() in GATE_ANSWER_STRINGS]
    assert statuses == [] and headers == []


def test_the_wire_answers_only_for_the_engine() -> None:
    # The virtual wire plays the engine's acceptance; every answer of the gate's comes from decide.
    path = ROOT / "experiments" / "wire.py"
    constants = [node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)]
    assert [v for v in constants if type(v) is int and 100 <= v <= 599] == []
    assert [v for v in constants if isinstance(v, str) and v.lower() in GATE_ANSWER_STRINGS] == []


def test_the_repository_stands_alone() -> None:
    # Users clone the repository alone: nothing it ships may send them to files outside it.
    tracked = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.toml", "*.sql", "Makefile", ".ci/*"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    outside = re.compile(r"DESIGN\.md|\.\./shared|shared/reference|\breference/[\w-]+\.md")
    this_test = Path(__file__).relative_to(ROOT).as_posix()
    offending = [name for name in tracked
                 if name != this_test and outside.search((ROOT / name).read_text(errors="replace"))]
    assert offending == []
