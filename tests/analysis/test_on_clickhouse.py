"""The analysis read from chDB (the embedded ClickHouse engine) where the OpenTelemetry Collector's
ClickHouse exporter schema holds the spans: the same report, the same window, nothing written."""

from __future__ import annotations

import io
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from restorelens.analysis.sources import Window, open_analysis
from restorelens.cli import cli as main
from restorelens.collector import load_paths
from restorelens.sources import parse_source
from restorelens.spans import ATTR_SCENARIO

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The sample traces in a DuckDB store, and copied by ``restorelens export --to`` into chDB."""
    folder = tmp_path_factory.mktemp("on-clickhouse")
    duck = folder / "spans.duckdb"
    load_paths(sorted(SAMPLES.glob("*.jsonl")), duck)
    chdb = f"chdb:{folder / 'chdb'}"
    result = CliRunner().invoke(main, ["export", "--db", str(duck), "--to", chdb])
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith(f"spans written to {chdb}")
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


@pytest.mark.parametrize("window", [
    Window(runs=("sample-modelclaim-move", "sample-moflux-balanced-lend")),
    Window(since_ns=0, until_ns=1),
])
def test_a_window_reads_the_same_spans_on_both_engines(stores: tuple[Path, str], window: Window) -> None:
    duck, chdb = stores
    frames = []
    for text in (str(duck), chdb):
        with open_analysis(parse_source(text), window=window) as analysis:
            frames.append((analysis.requests().select("request_id", "run_id", "e2e_s").sort("request_id"),
                           analysis.wake_episodes().height, analysis.lifecycle_intervals().height))
    assert frames[0][1:] == frames[1][1:]
    assert frames[0][0].equals(frames[1][0])
    if window.runs:
        assert set(frames[0][0]["run_id"]) == set(window.runs) and frames[0][2] > 0
    else:
        assert frames[0][0].is_empty()


def test_reading_creates_nothing_on_the_server(stores: tuple[Path, str]) -> None:
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


def test_a_store_without_otel_traces_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", "--source", f"chdb:{tmp_path / 'empty'}"])
    assert result.exit_code != 0
    message = result.output.strip()
    assert message.startswith(f"Error: chdb:{tmp_path / 'empty'}") and "\n" not in message and "otel_traces" in message
