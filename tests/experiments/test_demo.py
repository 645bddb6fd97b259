"""``restorelens demo`` end to end through the CLI: real servers on loopback, a real collector and store."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from restorelens.analysis import Analysis
from restorelens.cli import cli
from restorelens.spans import WAKE_PATHS

# About 920 protocol seconds in ~37 s. Not faster: real delays are magnified by the scale, and the
# move scenario's path needs its neighbour to have been idle under 30 s at the first request (it
# is set up idle 5 s), so a stall of 25/X real seconds on a busy machine would turn it into a
# make-room wake: 1 s at x25.
TIME_SCALE = "25"


def test_demo_records_lending_and_every_wake_path_and_prints_the_report(tmp_path: Path) -> None:
    db = tmp_path / "demo.duckdb"
    result = CliRunner().invoke(cli, ["demo", "--no-dashboard", "--time-scale", TIME_SCALE, "--db", str(db)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "9 scenarios played" in out and "Lending episodes" in out and "Wake episodes" in out
    assert "Paired differences" in out and "no data" not in out
    for path in WAKE_PATHS:
        assert path in out
    with Analysis.open(db) as analysis:
        lending = analysis.lending_episodes()
        wakes = analysis.wake_episodes()
        requests = analysis.requests()
        summary = analysis.policy_summary()
        paired = analysis.paired_differences()
    assert set(lending["workload"].to_list()) == {"balanced", "long-context", "fixed-burst"}
    assert set(lending["policy"].to_list()) == {"lend"}
    # both arms of both workloads, paired; goodputs over the protocol's windows in protocol
    # seconds, as the client labelled them, although the run took 25x less
    moflux = summary.filter(summary["workload"].is_in(["balanced", "long-context"]))
    assert sorted(moflux.select("workload", "policy").rows()) == [
        ("balanced", "lend"), ("balanced", "static"), ("long-context", "lend"), ("long-context", "static")]
    assert set(moflux["contention_window_s"].to_list()) == {25.0}
    assert {("balanced", "lend", "static"), ("long-context", "lend", "static")} <= set(
        paired.select("workload", "policy", "baseline").rows())
    assert sorted(wakes["wake_path"].to_list()) == sorted(WAKE_PATHS)
    assert all(wakes["served"].to_list()) and not any(wakes["censored"].to_list())
    # every request of every scenario reached the store with its client, gate and engine spans
    assert requests.height > 50 and requests.filter(requests["reached_engine"]).height > 50


def test_an_existing_store_is_refused_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "old.duckdb"
    db.write_bytes(b"")
    result = CliRunner().invoke(cli, ["demo", "--no-dashboard", "--db", str(db)])
    assert result.exit_code != 0
    assert "--db" in result.output and "exists already" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
