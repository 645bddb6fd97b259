"""benchmarks/bench_analysis.py: its generated store decomposes the same in SQL and polars, and it
names spans, attributes and events only through ``restorelens.spans``."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import duckdb
import pytest

from restorelens import spans
from restorelens.analysis.layers import DERIVED_LAYERS
from restorelens.collector import derived

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_analysis.py"
CONTRACT = {*spans.span_names().values(), *spans.attribute_keys().values(), *spans.event_names().values()}


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    # loaded from its file: `benchmarks` is a folder run with `python -m benchmarks`, not an installed package
    spec = importlib.util.spec_from_file_location("bench_analysis_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_span_contract_name_is_written_as_a_literal() -> None:
    found = set()
    for node in ast.walk(ast.parse(BENCH.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            # a whole Python string, and every '...' literal inside SQL text
            found |= {node.value, *re.findall(r"'([^']*)'", node.value)}
    assert sorted(found & CONTRACT) == []


def test_the_generated_store_decomposes_alike_in_sql_and_polars(bench: ModuleType) -> None:
    con = duckdb.connect()
    generated = bench.generate(con, 20 * bench.SPANS_PER_UNIT)

    names = {row[0] for row in con.execute('select distinct "SpanName" from otel_traces').fetchall()}
    assert generated == 20 * bench.SPANS_PER_UNIT
    assert names <= set(spans.span_names().values())
    sql = bench.sql_decompose(con, materialize=True)
    assert (sql["lending_episodes"].height, sql["wake_episodes"].height) == (20, 20)
    assert bench._agree(sql, bench.polars_decompose(con.sql("select * from otel_traces").pl())) == []


def test_the_derived_tables_of_the_generated_store_give_the_same_decomposition(bench: ModuleType) -> None:
    con = duckdb.connect()
    bench.generate(con, 20 * bench.SPANS_PER_UNIT)
    computed = bench.sql_decompose(con, materialize=True)
    derived.rebuild(con)
    assert derived.fresh_layers(con) == frozenset(DERIVED_LAYERS)
    stored = bench.sql_decompose(con, materialize=True)
    assert computed.keys() == stored.keys()
    for name, frame in computed.items():
        # views come in no particular order: compare them sorted on every plain column
        order = [column for column, dtype in frame.schema.items() if not dtype.is_nested()]
        assert stored[name].sort(order).equals(frame.sort(order)), name
