"""The analysis read from chDB (the embedded ClickHouse engine) where the OpenTelemetry Collector's
ClickHouse exporter schema holds the spans: the same report, the same window, nothing written."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from restorelens.analysis.sources import open_analysis
from restorelens.analysis.window import Window
from restorelens.cli import cli as main
from restorelens.collector import load_paths
from restorelens.sources import parse_source
from restorelens.spans import ATTR_SCENARIO

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The sample traces in a DuckDB store, and copied by ``restorelens export --to`` into chDB."""
    folder = tmp_path_factory.mktemp("on-clickhouse")
    duck = folder / "spans.duckdb"
    load_paths(sorted(SAMPLES.glob("*.jsonl")), duck)
    chdb = f"chdb:{folder / 'chdb'}"
    result = CliRunner().invoke(main, ["export", "--db", str(duck), "--to", chdb])
    assert result.exit_code == 0, result.output
    assert f"spans written to {chdb} (engine scrapes stay in the store)" in result.output
    return duck, chdb


def _csv(*source: str) -> str:
    result = CliRunner().invoke(main, ["report", *source, "--format", "csv"])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_report_on_chdb_is_the_report_on_duckdb(stores: tuple[Path, str]) -> None:
    duck, chdb = stores
    on_duckdb = _csv("--db", str(duck))
    assert "wake_episodes" in on_duckdb and "lending_episodes" in on_duckdb
    assert _csv("--source", chdb) == on_duckdb


def test_the_table_has_the_exporters_schema(stores: tuple[Path, str]) -> None:
    from chdb import session

    _, chdb = stores
    con = session.Session(chdb.removeprefix("chdb:"))
    try:
        answer = con.query("select name, type from system.columns where table = 'otel_traces' order by position",
                           "CSV").bytes().decode()
    finally:
        con.close()
    columns = dict(line.replace('"', "").split(",", 1) for line in answer.strip().splitlines())
    assert columns["Timestamp"] == "DateTime64(9)" and columns["Duration"] == "UInt64"
    assert columns["SpanAttributes"] == "Map(LowCardinality(String), String)"
    assert columns["Events.Timestamp"] == "Array(DateTime64(9))" and columns["Links.TraceId"] == "Array(String)"


def _middle_ns(duck: Path) -> int:
    """An instant inside the sample traces' busiest minute: a window ending there cuts traces."""
    import duckdb

    con = duckdb.connect(str(duck), read_only=True)
    try:
        return int(con.execute('select quantile_disc(epoch_ns("Timestamp"), 0.5) from otel_traces').fetchone()[0])
    finally:
        con.close()


@pytest.mark.parametrize("window", [
    Window(runs=("sample-modelclaim-move", "sample-moflux-balanced-lend")),
    Window(since_ns=0, until_ns=1),
    "cut",
])
def test_a_window_reads_the_same_spans_on_both_engines(stores: tuple[Path, str], window: Window | str) -> None:
    duck, chdb = stores
    if window == "cut":  # up to the median span's start: traces cut in two, their later spans gone
        window = Window(until_ns=_middle_ns(duck))
    assert isinstance(window, Window)
    frames = []
    for text in (str(duck), chdb):
        with open_analysis(parse_source(text), window=window) as analysis:
            frames.append((analysis.requests().select("request_id", "run_id", "e2e_s").sort("request_id"),
                           analysis.wake_episodes().height, analysis.lifecycle_intervals().height))
    assert frames[0][1:] == frames[1][1:]
    assert frames[0][0].equals(frames[1][0])
    if window.runs:
        assert set(frames[0][0]["run_id"]) == set(window.runs) and frames[0][2] > 0
    elif window.since_ns == 0:
        assert frames[0][0].is_empty()
    else:
        assert 0 < frames[0][0].height < 206 and frames[0][1] > 0  # some requests and wakes, not all


def test_reading_leaves_nothing_behind(stores: tuple[Path, str]) -> None:
    from chdb import session

    _, chdb = stores
    folder = chdb.removeprefix("chdb:")

    def objects() -> str:
        con = session.Session(folder)
        try:
            return con.query("select name from system.tables where database not in ('system', "
                             "'INFORMATION_SCHEMA', 'information_schema') union all select name from "
                             "system.functions where origin = 'SQLUserDefined' order by 1", "CSV").bytes().decode()
        finally:
            con.close()

    before = objects()
    with open_analysis(parse_source(chdb), labels={"run_id": ATTR_SCENARIO}) as analysis:
        assert analysis.lending_episodes().height > 0
    assert objects() == before


def _listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def test_a_report_leaves_the_chdb_folder_as_it_found_it(stores: tuple[Path, str], tmp_path: Path) -> None:
    """chDB makes PATH/tmp and PATH/data/_temporary_and_external_tables whatever it reads; a folder
    that holds neither (the export made them: chDB too) holds neither after a report."""
    folder = tmp_path / "spans"
    shutil.copytree(stores[1].removeprefix("chdb:"), folder, symlinks=True)
    for scratch in (folder / "tmp", folder / "data" / "_temporary_and_external_tables"):
        if scratch.exists():
            scratch.rmdir()
    before = _listing(folder)
    result = CliRunner().invoke(main, ["report", "--source", f"chdb:{folder}", "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert _listing(folder) == before


def test_a_store_without_otel_traces_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["report", "--source", f"chdb:{tmp_path / 'empty'}"])
    assert result.exit_code != 0
    message = result.output.strip()
    assert message.startswith(f"Error: chdb:{tmp_path / 'empty'}") and "\n" not in message and "otel_traces" in message
    assert _listing(tmp_path / "empty") == []  # nothing made, not even chDB's temporary folder


def test_a_missing_chdb_folder_is_refused_not_made(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", "--source", f"chdb:{tmp_path / 'nosuch' / 'deep'}"])
    assert result.exit_code != 0 and "no such chDB data folder" in result.output
    assert not (tmp_path / "nosuch").exists()  # reading creates nothing


def test_exporting_into_a_table_that_holds_spans_is_refused(stores: tuple[Path, str]) -> None:
    duck, chdb = stores
    result = CliRunner().invoke(main, ["export", "--db", str(duck), "--to", chdb])
    assert result.exit_code != 0 and "holds 955 spans already" in result.output


def test_spans_the_collector_delivered_twice_count_once(stores: tuple[Path, str], tmp_path: Path) -> None:
    from chdb import session

    duck, _ = stores
    twice = tmp_path / "twice"
    assert CliRunner().invoke(main, ["export", "--db", str(duck), "--to", f"chdb:{twice}"]).exit_code == 0
    con = session.Session(str(twice))
    try:  # the Collector delivers at least once: a retried batch lands again
        con.query("insert into otel_traces select * from otel_traces where SpanName != 'llm_request'")
    finally:
        con.close()
    assert _csv("--source", f"chdb:{twice}") == _csv("--db", str(duck))


def test_a_run_keeps_the_engine_spans_of_its_traces(stores: tuple[Path, str], tmp_path: Path) -> None:
    """vLLM's spans carry no run id: a run keeps every span of the traces it holds."""
    import duckdb

    duck, _ = stores
    bare = tmp_path / "bare.duckdb"
    from restorelens.store import create_schema

    con = duckdb.connect(str(bare))
    create_schema(con)
    con.execute(f"attach '{duck}' as original (read_only)")
    con.execute("insert into otel_traces select * from original.otel_traces")
    con.execute("""update otel_traces set "ResourceAttributes" = map() where "SpanName" = 'llm_request'""")
    con.close()
    run = "sample-moflux-balanced-lend"
    chdb = f"chdb:{tmp_path / 'bare-ch'}"
    assert CliRunner().invoke(main, ["export", "--db", str(bare), "--to", chdb]).exit_code == 0
    whole = open_analysis(parse_source(str(bare)))
    expected = whole.lending_episodes().filter(pl.col("run_id") == run).select("span_id", "engine_schedule_s", "ttft_s")
    whole.close()
    assert expected.height and expected["engine_schedule_s"].null_count() == 0
    for text in (str(bare), chdb):
        with open_analysis(parse_source(text), window=Window(runs=(run,))) as analysis:
            got = analysis.lending_episodes().select("span_id", "engine_schedule_s", "ttft_s")
        assert got.sort("span_id").equals(expected.sort("span_id")), text


def test_each_shared_layer_is_computed_once_per_analysis(stores: tuple[Path, str]) -> None:
    """ClickHouse computes a CTE at every reference: the layers several others read are kept in
    session temporary tables, each made once, in dependency order, when a query first needs it."""
    from restorelens.analysis.clickhouse.analysis import KEPT_LAYERS
    from restorelens.analysis.queries import load_query
    from restorelens.analysis.report import build_report

    _, chdb = stores
    with open_analysis(parse_source(chdb)) as analysis:
        assert analysis.kept == []
        analysis.lending_episodes()
        lending = list(analysis.kept)
        assert "typed_gate_restores" in lending and "typed_model_wakes" not in lending
        first = build_report(analysis)
        kept = list(analysis.kept)
        assert kept[:len(lending)] == lending
        assert kept == list(dict.fromkeys(kept)) and set(kept) <= set(KEPT_LAYERS)
        for index, name in enumerate(kept):  # each made after the kept layers it reads
            read = set(re.findall(r"\b(?:from|join)\s+(\w+)", load_query(name).sql))
            reads = {other for other in KEPT_LAYERS if other in read}
            assert reads <= set(kept[:index]), name
        assert {"typed_model_wakes", "request_attempts", "requests"} <= set(kept)
        again = build_report(analysis)
        assert analysis.kept == kept  # nothing made twice (ClickHouse refuses an existing name anyway)
    for name, frame in first.items():
        assert frame.equals(again[name]), name


def _temporary_tables(analysis: object) -> list[str]:
    answer = analysis.client._session.query(  # type: ignore[attr-defined]
        "select name from system.tables where is_temporary order by name", "CSV")
    return [line.strip('"') for line in answer.bytes().decode().split()]


def test_kept_layers_are_temporary_tables_dropped_on_close(stores: tuple[Path, str]) -> None:
    _, chdb = stores
    folder = Path(chdb.removeprefix("chdb:"))
    with open_analysis(parse_source(chdb)) as analysis:
        analysis.requests()
        assert _temporary_tables(analysis) == sorted(f"rl_kept_{name}" for name in analysis.kept)
        assert "rl_kept_requests" in _temporary_tables(analysis)
    leftovers = folder / "data" / "_temporary_and_external_tables"
    assert not leftovers.exists() or not any(leftovers.iterdir())


def test_a_kept_layer_the_session_lost_is_made_again(stores: tuple[Path, str]) -> None:
    """A server ends an idle session and its temporary tables with it: the next query makes the
    layers again instead of failing (or reading a user's table of that name)."""
    duck, chdb = stores
    with open_analysis(parse_source(str(duck))) as analysis:
        expected = analysis.wake_episodes()
    with open_analysis(parse_source(chdb)) as analysis:
        analysis.requests()
        for name in reversed(analysis.kept):
            analysis.client._session.query(f"drop temporary table rl_kept_{name}")
        assert analysis.wake_episodes().equals(expected)
        assert "typed_model_wakes" in analysis.kept
        assert _temporary_tables(analysis) == sorted(f"rl_kept_{name}" for name in analysis.kept)


@pytest.mark.parametrize("engines", [("NoSuchEngine", "Memory"), ("NoSuchEngine",)])
def test_a_user_who_may_not_make_a_kept_table_gets_the_same_report(
        stores: tuple[Path, str], engines: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine the server refuses (ClickHouse's own error, as for a user without the grant) is
    skipped: the next one keeps the layers, and with none left every layer is a CTE."""
    from restorelens.analysis.clickhouse import analysis as on_clickhouse

    duck, chdb = stores
    monkeypatch.setattr(on_clickhouse, "KEPT_ENGINES", engines)
    with open_analysis(parse_source(chdb)) as analysis:
        analysis.requests()
        assert bool(analysis.kept) == (len(engines) > 1)
    assert _csv("--source", chdb) == _csv("--db", str(duck))


def test_the_report_with_a_label_mapping_is_the_same_on_both_engines(stores: tuple[Path, str]) -> None:
    duck, chdb = stores
    label = ["--label", f"run_id={ATTR_SCENARIO}", "--label", f"workload={ATTR_SCENARIO}"]
    on_duckdb = _csv("--db", str(duck), *label)
    assert on_duckdb != _csv("--db", str(duck))  # the mapping changes the report
    assert _csv("--source", chdb, *label) == on_duckdb
