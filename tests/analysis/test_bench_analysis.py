"""benchmarks/bench_analysis.py: its generated store decomposes the same in SQL and polars, and it
names spans, attributes and events only through ``restorelens.spans``."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import duckdb
import pytest

from restorelens import spans
from restorelens.analysis.layers import DERIVED_LAYERS, SHARED_LAYERS
from restorelens.analysis import derived

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_analysis.py"
CONTRACT = {*spans.span_names().values(), *spans.attribute_keys().values(), *spans.event_names().values()}


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    # loaded from its file: `benchmarks` is a folder run with `python -m benchmarks`, not an installed package
    spec = importlib.util.spec_from_file_location("bench_analysis_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # registered while it runs: dataclasses look their module up by name
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


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
    twin = bench.polars_decompose(con.sql("select * from otel_traces").pl())
    assert bench._agree(bench.totals(sql), bench.totals(twin)) == []


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


@pytest.fixture
def store(bench: ModuleType, tmp_path: Path) -> Path:
    """A small store file with its derived tables built, as the benchmark makes one."""
    db = tmp_path / "bench.duckdb"
    with duckdb.connect(str(db)) as writer:
        bench.generate(writer, 20 * bench.SPANS_PER_UNIT)
    bench.build_derived(db)
    return db


def test_every_side_decomposes_the_store_file_alike(bench: ModuleType, store: Path) -> None:
    raw, _ = bench.sql_from_file(store, use_derived=False)
    on_derived, _ = bench.sql_from_file(store, use_derived=True)
    anchor, _ = bench.polars_from_file(store)
    common = bench.common_columns(bench.totals(raw), bench.totals(anchor))
    narrow, _ = bench.sql_from_file(store, use_derived=False, columns=common)
    assert raw["wake_episodes"].height == 20
    for side in (raw, on_derived, narrow):
        assert bench._agree(bench.totals(side), bench.totals(anchor)) == []
    assert {name: frame.columns for name, frame in narrow.items() if name in common} == common


def test_a_changed_metric_is_a_disagreement(bench: ModuleType, store: Path) -> None:
    raw, _ = bench.sql_from_file(store, use_derived=False)
    anchor, _ = bench.polars_from_file(store)
    anchor["wake_episodes"] = anchor["wake_episodes"].with_columns(overshoot_s=anchor["wake_episodes"]["overshoot_s"] + 1)
    problems = bench._agree(bench.totals(raw), bench.totals(anchor))
    assert [problem.split(":")[0] for problem in problems] == ["wake_episodes.overshoot_s"]


def test_from_raw_spans_the_sql_computes_the_kept_layers_and_on_derived_tables_it_reads_them(
        bench: ModuleType, store: Path) -> None:
    _, raw = bench.sql_from_file(store, use_derived=False)
    _, on_derived = bench.sql_from_file(store, use_derived=True)
    kept_and_shared = {name for name in DERIVED_LAYERS if name in SHARED_LAYERS}
    assert kept_and_shared <= raw.parts.keys()
    assert not set(DERIVED_LAYERS) & on_derived.parts.keys()


def test_every_part_the_breakdown_names_is_one_the_sides_time(bench: ModuleType, store: Path) -> None:
    # a renamed layer or polars step would otherwise print as a silent zero in its row
    _, raw = bench.sql_from_file(store, use_derived=False)
    _, anchor = bench.polars_from_file(store)
    sql_parts = {part for parts, _ in bench.STAGES.values() for part in parts}
    polars_parts = {part for _, parts in bench.STAGES.values() for part in parts}
    assert sql_parts <= raw.parts.keys()
    assert polars_parts == anchor.parts.keys()


def test_every_side_runs_the_same_number_of_times(bench: ModuleType, store: Path) -> None:
    best, widths, problems = bench.measure(store, 2)
    assert problems == []
    assert all(sql >= twin for sql, twin in widths.values())
    assert best.keys() == bench.SIDES.keys()
    assert {side.runs for side in best.values()} == {2}


def test_the_best_run_is_the_fastest_by_wall(bench: ModuleType) -> None:
    laps = [bench.Laps() for _ in range(3)]
    best = bench.Measured.best([(2.0, 1.0, laps[0]), (1.5, 3.0, laps[1]), (1.7, 0.5, laps[2])])
    assert (best.wall_s, best.cpu_s, best.laps, best.runs) == (1.5, 3.0, laps[1], 3)


def test_a_size_prints_both_comparisons_with_the_summary_line(bench: ModuleType, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    bench.run(20 * bench.SPANS_PER_UNIT, tmp_path, 2)
    out = capsys.readouterr().out
    assert re.search(r"^    restorelens vs anchor: \d+\.\d\dx (faster|slower) wall, \d+\.\d\dx (less|more) CPU", out,
                     re.MULTILINE)
    assert re.search(r"build \+ query .* vs anchor .*: \d+\.\d\dx (faster|slower) wall", out)
    assert "best of 2 runs" in out
    assert "DISAGREE" not in out and " agree " in out
    assert all(f"    {stage}" in out for stage in bench.STAGES)
    assert list(tmp_path.iterdir()) == []  # the store file is removed


def test_plain_views_are_left_out_above_their_size(bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    label = bench.SIDES["sql_views"][1]
    bench.run(20 * bench.SPANS_PER_UNIT, tmp_path, 1)
    assert label in capsys.readouterr().out
    monkeypatch.setattr(bench, "PLAIN_VIEWS_UP_TO", 10 * bench.SPANS_PER_UNIT)
    bench.run(20 * bench.SPANS_PER_UNIT, tmp_path, 1)
    assert label not in capsys.readouterr().out
