"""``restorelens report`` and ``restorelens check`` through the real CLI on a real DuckDB file."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import duckdb
import pytest
from builders import Traces
from click.testing import CliRunner

import restorelens.cli


def build_store(path: Path) -> None:
    """Two wake episodes (overshoot 6.0625 s and 1.0 s) and one lending episode (drain 4.5 s)."""
    traces = Traces()
    for ready, retry in ((4.0625, 10.125), (9.0, 10.0)):
        trace = traces.new_trace()
        client = traces.client_request(trace, 0.0, 12.0, first_chunk_s=11.0)
        first = traces.attempt(trace, client, 0.0, 0.125, status=503, retry_after_header="10", retry_after_s=10.0)
        gate = traces.gate_request(trace, first, 0.03125, 0.09375, status=503, decision="not_ready", retry_after_s=10.0)
        attempt = traces.attempt(trace, client, retry, 12.0, status=200, resend_count=1)
        traces.served_via_gate(trace, attempt, retry + 0.03125, 11.9, upstream_s=retry + 0.0625,
                               engine_arrival_s=retry + 0.125, time_in_queue_s=0.125, ttft_s=0.5, e2e_s=1.0)
        traces.model_wake(0.0625, ready + 0.5, link=(trace, gate), ready_s=ready, observed_s=ready + 0.5)
    trace = traces.new_trace()
    client = traces.client_request(trace, 60.0, 70.0, first_chunk_s=65.0)
    attempt = traces.attempt(trace, client, 60.0, 70.0, status=200)
    gate = traces.served_via_gate(trace, attempt, 60.0, 69.0, upstream_s=61.0, engine_arrival_s=61.0,
                                  time_in_queue_s=3.5, ttft_s=4.0, e2e_s=6.0, grant_s=61.0)
    traces.gate_restore(60.0, 64.5, link=(trace, gate), grant_restored_s=61.0, drained_s=64.5)
    con = duckdb.connect(str(path))
    traces.store(con)
    con.close()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "spans.duckdb"
    build_store(path)
    return path


def invoke(*args: str):
    return CliRunner().invoke(restorelens.cli.cli, list(args))


def test_check_passes_when_every_limit_holds(store: Path) -> None:
    result = invoke("check", "--db", str(store), "--max", "overshoot_s.max=7", "--max", "drain_s.max=5")
    assert result.exit_code == 0, result.output
    assert "all 2 limits hold" in result.output


def test_check_fails_listing_each_violation(store: Path) -> None:
    result = invoke("check", "--db", str(store), "--max", "overshoot_s.p95=1.0", "--max", "drain_s.max=4",
                    "--max", "wake.engine_schedule_s.max=1")
    assert result.exit_code == 1
    # overshoot values 1.0 and 6.0625: p95 = 1.0 + 0.95 * 5.0625
    assert "2 of 3 limits exceeded" in result.output
    assert "wake.overshoot_s.p95 = 5.80938 > 1 (n=2)" in result.output
    assert "lending.drain_s.max = 4.5 > 4 (n=1)" in result.output
    assert "engine_schedule_s" not in result.output.split("exceeded:")[1]


def test_check_names_the_valid_metrics_for_an_unknown_one(store: Path) -> None:
    result = invoke("check", "--db", str(store), "--max", "overshot_s.p95=1")
    assert result.exit_code == 2
    assert "unknown metric 'overshot_s'" in result.output
    assert "overshoot_s" in result.output and "drain_s" in result.output
    assert "Traceback" not in result.output


def test_check_asks_to_qualify_a_metric_present_in_several_views(store: Path) -> None:
    result = invoke("check", "--db", str(store), "--max", "engine_schedule_s.p95=1")
    assert result.exit_code == 2
    assert "lending.engine_schedule_s" in result.output and "wake.engine_schedule_s" in result.output


@pytest.mark.parametrize("text", ["overshoot_s.p95", "overshoot_s=1", "overshoot_s.p95=fast", "overshoot_s.p42=1",
                                  "drain_s.p95=nan", "drain_s.p95=inf", "drain_s.max=-inf"])
def test_a_malformed_max_names_the_option(store: Path, text: str) -> None:
    result = invoke("check", "--db", str(store), "--max", text)
    assert result.exit_code == 2
    assert "--max" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_report_json_holds_every_section_with_the_episode_numbers(store: Path) -> None:
    result = invoke("report", "--db", str(store), "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert set(report) == {"episode_counts", "lending_episodes", "wake_episodes", "requests", "engine",
                           "policy_summary", "paired_differences"}
    drain = [row for row in report["lending_episodes"] if row["metric"] == "drain_s"]
    assert drain == [{"policy": "lend", "metric": "drain_s", "count": 1, "p50": 4.5, "p90": 4.5, "p95": 4.5,
                      "p99": 4.5, "max": 4.5}]
    overshoot = next(row for row in report["wake_episodes"] if row["metric"] == "overshoot_s")
    assert (overshoot["count"], overshoot["p50"], overshoot["max"]) == (2, 3.53125, 6.0625)


def test_report_and_check_read_percentiles_by_nearest_rank_when_asked(store: Path) -> None:
    result = invoke("report", "--db", str(store), "--format", "json", "--percentile", "nearest-rank")
    assert result.exit_code == 0, result.output
    overshoot = next(row for row in json.loads(result.output)["wake_episodes"] if row["metric"] == "overshoot_s")
    assert (overshoot["p50"], overshoot["p95"]) == (1.0, 6.0625)  # ranks 1 and 2 of the two values
    holds = invoke("check", "--db", str(store), "--max", "overshoot_s.p50=1.0", "--percentile", "nearest-rank")
    assert holds.exit_code == 0, holds.output
    linear = invoke("check", "--db", str(store), "--max", "overshoot_s.p50=1.0")
    assert linear.exit_code == 1 and "wake.overshoot_s.p50 = 3.53125 > 1" in linear.output
    bad = invoke("report", "--db", str(store), "--percentile", "median")
    assert bad.exit_code == 2 and "'median' is not one of 'linear', 'nearest-rank'" in bad.output


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv"])
def test_report_text_formats_show_the_sections(store: Path, fmt: str) -> None:
    result = invoke("report", "--db", str(store), "--format", fmt, "--section", "wake_episodes")
    assert result.exit_code == 0, result.output
    assert "overshoot_s" in result.output and "6.06" in result.output
    assert "drain_s" not in result.output


@pytest.mark.parametrize(("option", "value"), [("--slo-ttft-s", "nan"), ("--slo-ttft-s", "-5"),
                                             ("--slo-ttft-s", "inf"), ("--slo-e2e-s", "nan"), ("--slo-e2e-s", "-0.5")])
def test_report_rejects_an_slo_that_is_not_a_duration(store: Path, option: str, value: str) -> None:
    result = invoke("report", "--db", str(store), option, value)
    assert result.exit_code == 1
    assert result.output.strip() == f"Error: setting {option}: must be a finite number of seconds >= 0, got {value}"


def test_report_on_a_missing_store_is_one_line(tmp_path: Path) -> None:
    result = invoke("report", "--db", str(tmp_path / "nope.duckdb"))
    assert result.exit_code == 2
    assert result.output.strip().startswith("Error:") and len(result.output.strip().splitlines()) == 1


_READERS = (["report"], ["check", "--max", "drain_s.max=1"], ["dashboard"])


@pytest.mark.parametrize(("command", "where"), [
    *((command, "--db") for command in _READERS), *((command, "--source chdb:") for command in _READERS),
    (["export", "--format", "parquet", "out.parquet"], "--db"),
])
def test_a_missing_store_exits_2_from_every_command(tmp_path: Path, command: list[str], where: str) -> None:
    """A usage error, as click's own: a script tells a wrong path from a store found wanting (1)."""
    option, _, prefix = where.partition(" ")
    result = invoke(*command, option, f"{prefix}{tmp_path / 'absent'}")
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error:") and ("no such span store" in line or "no such chDB data folder" in line)
    assert not (tmp_path / "absent").exists()


def test_report_and_check_on_an_empty_store_say_so_in_one_line(tmp_path: Path) -> None:
    store = empty_store(tmp_path)
    result = invoke("report", "--db", str(store), "--format", "json")
    assert result.exit_code == 0, result.output
    note = (f"note: {store} holds no spans: every figure is empty (record some with `restorelens collect` or "
            "`restorelens load`)")
    assert result.output.splitlines()[0] == note
    assert invoke("check", "--db", str(store), "--max", "drain_s.max=1").output.splitlines()[0] == note
    full = tmp_path / "spans.duckdb"
    build_store(full)
    assert "holds no spans" not in invoke("report", "--db", str(full), "--format", "json").output
    outside = invoke("report", "--db", str(full), "--format", "json", "--since", "2030-01-01T00:00:00Z")
    assert outside.output.splitlines()[0] == (f"note: {full} holds no spans in the window (spans from "
                                              "2030-01-01T00:00:00Z on): every figure is empty")


def test_report_and_check_on_a_file_that_is_not_a_store_is_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.duckdb"
    junk.write_text("not a database")
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    for path in (junk, other):
        for args, exit_code in ((["report"], 1), (["check", "--max", "drain_s.max=1"], 2)):
            result = invoke(*args, "--db", str(path))
            assert result.exit_code == exit_code
            assert "Error:" in result.output and len(result.output.strip().splitlines()) == 1


def test_report_on_a_sqlite_file_or_a_foreign_otel_traces_names_the_file_and_the_problem(foreign_stores: dict[Path, str]) -> None:
    for path, reason in foreign_stores.items():
        result = invoke("report", "--db", str(path))
        assert (result.exit_code, result.output) == (1, f"Error: {path}: {reason}\n")


def empty_store(tmp_path: Path) -> Path:
    path = tmp_path / "empty.duckdb"
    con = duckdb.connect(str(path))
    Traces().store(con)
    con.close()
    return path


def test_check_fails_on_an_empty_store_naming_each_limit_it_could_not_check(tmp_path: Path) -> None:
    result = invoke("check", "--db", str(empty_store(tmp_path)), "--max", "overshoot_s.p95=1",
                    "--max", "wake.censored.count=0")
    assert result.exit_code == 1
    assert "2 of 2 limits had nothing to check (--allow-empty accepts that):" in result.output
    assert "wake.overshoot_s.p95: no values in 0 wake episodes" in result.output
    assert "wake.censored.count: no values in 0 wake episodes" in result.output
    assert "hold" not in result.output.replace("holds no spans", "")


def test_check_fails_when_the_episodes_hold_no_value_of_the_metric(tmp_path: Path) -> None:
    """One wake episode, never ready (censored): overshoot has no value, the censored count has one."""
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 30.0, outcome="gave_up")
    first = traces.attempt(trace, client, 0.0, 0.125, status=503, retry_after_header="10", retry_after_s=10.0)
    gate = traces.gate_request(trace, first, 0.03125, 0.09375, status=503, decision="not_ready", retry_after_s=10.0)
    traces.model_wake(0.0625, 30.0, link=(trace, gate))
    path = tmp_path / "censored.duckdb"
    con = duckdb.connect(str(path))
    traces.store(con)
    con.close()

    result = invoke("check", "--db", str(path), "--max", "overshoot_s.p95=1", "--max", "wake.censored.count=1",
                    "--max", "drain_s.max=1")
    assert result.exit_code == 1
    assert "2 of 3 limits had nothing to check" in result.output
    assert "wake.overshoot_s.p95: no values in 1 wake episode\n" in result.output
    assert "lending.drain_s.max: no values in 0 lending episodes" in result.output
    assert "censored" not in result.output.replace("(--allow-empty", "")


def test_limits_with_values_are_not_reported_as_unchecked(tmp_path: Path) -> None:
    path = tmp_path / "spans.duckdb"
    build_store(path)
    result = invoke("check", "--db", str(path), "--max", "drain_s.max=4", "--max", "requests.e2e_s.max=100")
    # drain 4.5 s > 4; e2e has three values, all within the limit
    assert result.exit_code == 1
    assert "1 of 2 limits exceeded:" in result.output
    assert "nothing to check" not in result.output


def test_allow_empty_notes_a_metric_without_values_and_passes(tmp_path: Path) -> None:
    result = invoke("check", "--db", str(empty_store(tmp_path)), "--allow-empty", "--max", "overshoot_s.p95=1",
                    "--max", "wake.censored.count=0")
    assert result.exit_code == 0, result.output
    assert "note: wake.overshoot_s.p95 has no values in 0 wake episodes; the limit holds (--allow-empty)" \
        in result.output
    assert "all 2 limits hold" in result.output


def test_check_exit_codes_tell_a_breached_limit_from_a_check_that_could_not_run(tmp_path: Path) -> None:
    """0: every limit holds; 1: a limit exceeded or with nothing to check; 2: usage or configuration."""
    store = tmp_path / "spans.duckdb"
    build_store(store)
    sqlite_file = tmp_path / "x.db"
    with sqlite3.connect(sqlite_file) as con:
        con.execute("create table t (a integer)")
    cases = {
        ("--max", "overshoot_s.max=7"): 0,
        ("--max", "drain_s.max=4"): 1,
        ("--max", "overshoot_s.max=7", "--max", "drain_s.max=4"): 1,
        ("--db", str(empty_store(tmp_path)), "--max", "overshoot_s.p95=1"): 1,  # nothing to check
        ("--max", "overshot_s.p95=1"): 2,  # unknown metric
        ("--max", "engine_schedule_s.p95=1"): 2,  # in two views
        ("--max", "overshoot_s.p42=1"): 2,  # unknown statistic
        ("--max", "overshoot_s.p95"): 2,  # not METRIC.STAT=NUMBER
        ("--max", "drain_s.max=nan"): 2,
        ("--max", "drain_s.max=1", "--percentile", "median"): 2,  # a bad option value (click's)
        (): 2,  # no --max
        ("--db", str(tmp_path / "absent.duckdb"), "--max", "drain_s.max=1"): 2,
        ("--db", str(sqlite_file), "--max", "drain_s.max=1"): 2,
    }
    for args, exit_code in cases.items():
        db = [] if "--db" in args else ["--db", str(store)]
        result = invoke("check", *db, *args)
        assert result.exit_code == exit_code, (args, result.output)
        assert "Traceback" not in result.output


def test_check_help_and_the_docs_state_the_exit_codes() -> None:
    result = invoke("check", "--help")
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "Exit codes: 0 every limit holds; 1 a limit is exceeded or has nothing to check" in text
    assert "2 the check could not run" in text
    docs = " ".join((Path(__file__).parents[2] / "docs" / "analysis.md").read_text().split())
    assert "| 2 | the check could not run:" in docs


def test_report_and_check_read_only_the_window(store: Path) -> None:
    """The wakes' traces start at 00:00:00, the lending one at 00:01:00 (builders.BASE_S is 2026-01-01)."""
    def counts(*window: str) -> tuple[int, int]:
        result = invoke("report", "--db", str(store), "--format", "json", "--section", "episode_counts", *window)
        assert result.exit_code == 0, result.output
        rows = {row["episodes"]: row["count"] for row in json.loads(result.output)["episode_counts"]}
        return rows["lending"], rows["wake"]

    assert counts() == (1, 2)
    assert counts("--since", "2026-01-01T00:00:30Z") == (1, 0)
    assert counts("--until", "2026-01-01T00:00:30Z") == (0, 2)
    drained = invoke("check", "--db", str(store), "--max", "drain_s.max=5")
    assert drained.exit_code == 0, drained.output
    outside = invoke("check", "--db", str(store), "--max", "drain_s.max=5", "--until", "2026-01-01T00:00:30Z")
    assert outside.exit_code == 1 and "drain_s.max" in outside.output and "nothing to check" in outside.output


@pytest.mark.parametrize(("window", "message"), [
    (["--since", "yesterday"], "setting --since: 'yesterday' is not an ISO 8601 time"),
    (["--since", "2026-01-02", "--until", "2026-01-01"], "setting --until: must be after --since"),
    (["--run", "a", "--run", ""], "setting --run: needs a run id"),
])
def test_a_bad_window_is_one_line_for_report_and_check(store: Path, window: list[str], message: str) -> None:
    for args, exit_code in ((["report"], 1), (["check", "--max", "drain_s.max=1"], 2)):
        result = invoke(*args, "--db", str(store), *window)
        assert result.exit_code == exit_code
        (line,) = result.output.strip().splitlines()
        assert line.startswith(f"Error: {message}")


@pytest.mark.parametrize("url", ["clickhouse://u@[::1:1/db", "clickhouse://u@[not-an-address]:1/db"])
def test_a_malformed_clickhouse_url_is_one_line_naming_the_option_for_report_and_export(store: Path,
                                                                                       url: str) -> None:
    for args, option in ((["report", "--source", url], "--source"), (["export", "--db", str(store), "--to", url], "--to")):
        result = invoke(*args)
        assert result.exit_code == 1, result.output
        (line,) = result.output.strip().splitlines()
        assert line.startswith(f"Error: setting {option}: is not a URL"), line
