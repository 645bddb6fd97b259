"""ModelClaim scenarios live: gate + lifecycle router + simulator servers on loopback, time-scaled.

The same scenario run live (x10) and virtually gives the same attempts and statuses, and the live
spans (client, gate, lifecycle and engine, on one protocol timeline) decompose within the
scenario's live tolerance: the real HTTP round trips, magnified ten times, are the difference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from restorelens.analysis import Analysis
from restorelens.cli import cli
from restorelens.collector import load_paths
from restorelens.loadgen.modelclaim_scenarios import MODELCLAIM_SCENARIOS, expected_wake

TIME_SCALE = "10"


def run(tmp_path: Path, name: str, *mode: str) -> tuple[dict, dict]:
    out = tmp_path / f"{name}{'-virtual' if '--virtual' in mode else '-live'}.jsonl"
    result = CliRunner().invoke(cli, ["run", name, "--out", str(out), "--json", *mode])
    assert result.exit_code == 0, result.output
    db = tmp_path / f"{out.stem}.duckdb"
    assert load_paths([out], db).rejected == 0
    with Analysis.open(db) as analysis:
        wakes = analysis.wake_episodes()
    assert wakes.height == 1, wakes.select("wake_path", "t0", "attempts", "outcome", "request_id", "censored_reason").rows()
    return json.loads(result.output), wakes.row(0, named=True)


@pytest.mark.parametrize("name", ["modelclaim-in-place", "modelclaim-cold-start"])
def test_live_run_matches_virtual_and_decomposes_within_tolerance(tmp_path: Path, name: str) -> None:
    scenario = MODELCLAIM_SCENARIOS[name]
    expected = expected_wake(scenario)
    live, live_wake = run(tmp_path, name, "--time-scale", TIME_SCALE)
    virtual, virtual_wake = run(tmp_path, name, "--virtual")
    assert live["first_request_statuses"] == virtual["first_request_statuses"]
    assert live["outcomes"] == virtual["outcomes"] == {"interactive:ok": 2}
    assert live["mode"] == f"live (x{TIME_SCALE})"
    assert (live_wake["wake_path"], live_wake["first_status"], live_wake["attempts"]) == (
        scenario.wake_path, 503, expected.attempts)
    assert live_wake["retry_after_s"] == expected.retry_after_s
    assert not live_wake["clock_skew"] and live_wake["served"]
    tolerance = expected.live_tolerance_s(float(TIME_SCALE))
    for column in ("ready_s", "observed_s", "overshoot_s", "hint_error_s"):
        assert live_wake[column] == pytest.approx(getattr(expected, column), abs=tolerance), column
        assert virtual_wake[column] == pytest.approx(getattr(expected, column), abs=1e-6), column
    assert 0 <= live_wake["engine_schedule_s"] < tolerance
