"""Names defined elsewhere are used through their constants, so renaming one breaks the collector's
code and tests instead of silently no longer matching.

- The collector reads the resource's ``service.name`` through OpenTelemetry's ``SERVICE_NAME``.
- ``benchmarks/bench_collector.py`` names them the same way, in Python and inside its SQL.
- The collector's tests write span names, attribute keys and event names of the span contract only
  through ``restorelens.spans`` (and ``service.name`` through ``SERVICE_NAME``). Names that are not in
  the contract (``root``, ``tags``, ...) are arbitrary format-test data and may stay literals.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import SERVICE_NAME

import restorelens.collector
from restorelens import spans

COLLECTOR_MODULES = sorted(Path(restorelens.collector.__file__).parent.glob("*.py"))
COLLECTOR_TESTS = sorted(Path(__file__).resolve().parent.glob("*.py"))
BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_collector.py"
CONTRACT = {*spans.span_names().values(), *spans.attribute_keys().values(), *spans.event_names().values()}


def _string_literals(path: Path, wanted: set[str]) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in wanted
    ]


@pytest.mark.parametrize("path", COLLECTOR_MODULES, ids=lambda path: path.name)
def test_collector_modules_name_the_service_attribute_through_the_sdk_constant(path: Path) -> None:
    assert _string_literals(path, {SERVICE_NAME}) == [], f"{path.name}: use opentelemetry.sdk.resources.SERVICE_NAME"


@pytest.mark.parametrize("path", COLLECTOR_TESTS, ids=lambda path: path.name)
def test_collector_tests_write_contract_names_through_the_constants(path: Path) -> None:
    assert _string_literals(path, CONTRACT | {SERVICE_NAME}) == [], f"{path.name}: use restorelens.spans / SERVICE_NAME"


def test_the_collector_benchmark_names_spans_attributes_and_events_through_the_constants() -> None:
    wanted = CONTRACT | {SERVICE_NAME}
    tree = ast.parse(BENCH.read_text(encoding="utf-8"))
    texts = [(node.lineno, node.value) for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    whole = [(line, text) for line, text in texts if text in wanted]
    in_sql = [(line, quoted) for line, text in texts for quoted in re.findall(r"'([^']*)'", text) if quoted in wanted]
    assert (whole, in_sql) == ([], []), "bench_collector.py: use restorelens.spans / SERVICE_NAME"
