"""ModelClaim scenarios live: gate + lifecycle router + simulator servers on loopback, time-scaled.

The same scenario run live (x5) and virtually gives the same attempts and statuses, and the live
spans (client, gate, lifecycle and engine, on one protocol timeline) decompose within the
scenario's live tolerance: the real HTTP round trips, magnified five times, are the difference.
The tolerance grows with the loopback round trip measured around the live run, so a busy machine
widens it; the statuses and attempt counts are compared exactly (each scenario's retries are at
least 5 protocol seconds, 1 real second at x5, from the ready instant, so they cannot flip).
Those runs play one sleep -> wake cycle. A calibrated run of two cycles (two gates, one after the
other) shows the first gate hinting from the declared durations and the second from what the first
learnt, through the run's calibration file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from restorelens.analysis import Analysis
from restorelens.collector import load_paths
from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_SCENARIOS, ModelClaimScenario, expected_wake
from restorelens.experiments.run_telemetry import RunTelemetry
from restorelens.experiments.runner import run_live, run_virtual

TIME_SCALE = 5.0


def shortened(name: str, cycles: int = 1) -> ModelClaimScenario:
    """The scenario with its setup's idle stretch cut to 2 s (the wake does not depend on how long
    the model slept), so the run stays short at a low scale, and ``cycles`` sleep -> wake cycles."""
    scenario = MODELCLAIM_SCENARIOS[name]
    return dataclasses.replace(scenario, setup=dataclasses.replace(scenario.setup, asleep_for_s=2.0), cycles=cycles)


def run(tmp_path: Path, scenario: ModelClaimScenario, live: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    out = tmp_path / f"{scenario.name}-{'live' if live else 'virtual'}.jsonl"
    with RunTelemetry("file", path=out) as telemetry:
        if live:
            report = run_live(scenario, 0, telemetry.providers, "live", time_scale=TIME_SCALE)
        else:
            report = run_virtual(scenario, 0, telemetry.providers, "virtual")
    db = tmp_path / f"{out.stem}.duckdb"
    assert load_paths([out], db).rejected == 0
    with Analysis.open(db) as analysis:
        wakes = analysis.wake_episodes()
    assert wakes.height == 1, wakes.select("wake_path", "t0", "attempts", "outcome", "request_id", "censored_reason").rows()
    return report.summary(), wakes.row(0, named=True)


@pytest.mark.parametrize("name", ["modelclaim-in-place", "modelclaim-cold-start"])
def test_live_run_matches_virtual_and_decomposes_within_tolerance(
        tmp_path: Path, name: str, loopback_round_trip_s: Callable[[], float]) -> None:
    scenario = shortened(name)
    expected = expected_wake(scenario)
    before_s = loopback_round_trip_s()
    live, live_wake = run(tmp_path, scenario, live=True)
    tolerance = expected.live_tolerance_s(TIME_SCALE, max(before_s, loopback_round_trip_s()))
    virtual, virtual_wake = run(tmp_path, scenario, live=False)
    assert live["first_request_statuses"] == virtual["first_request_statuses"] == [503] * (expected.attempts - 1) + [200], live
    assert live["outcomes"] == virtual["outcomes"] == {"interactive:ok": 2}
    assert live["mode"] == f"live (x{TIME_SCALE:g})"
    assert (live_wake["wake_path"], live_wake["first_status"], live_wake["attempts"]) == (
        scenario.wake_path, 503, expected.attempts)
    assert live_wake["retry_after_s"] == expected.retry_after_s
    assert not live_wake["clock_skew"] and live_wake["served"]
    for column in ("ready_s", "observed_s", "overshoot_s", "hint_error_s"):
        assert live_wake[column] == pytest.approx(getattr(expected, column), abs=tolerance), (column, tolerance, live_wake)
        assert virtual_wake[column] == pytest.approx(getattr(expected, column), abs=1e-6), column
    assert 0 <= live_wake["engine_schedule_s"] < tolerance, (tolerance, live_wake)
    # the tolerance still tells protocol seconds from wall seconds: a 5x-compressed ready would be off
    assert expected.ready_s * (1 - 1 / TIME_SCALE) > tolerance


def test_live_calibrated_hints_carry_over_a_restart_through_the_calibration_file(tmp_path: Path) -> None:
    # Two cycles: the second gate and lifecycle start afresh and read what the first learnt from
    # the run's calibration_path. x20 keeps it to a few seconds; the bound below is 0.15 real
    # seconds, many loopback round trips, and the fixed table's overshoot is twice it.
    scenario = shortened("modelclaim-in-place", cycles=2).with_arm("calibrated")
    out = tmp_path / "calibrated.jsonl"
    with RunTelemetry("file", path=out) as telemetry:
        run_live(scenario, 0, telemetry.providers, "live", time_scale=20.0)
    db = tmp_path / "calibrated.duckdb"
    assert load_paths([out], db).rejected == 0
    with Analysis.open(db) as analysis:
        first, second = analysis.wake_episodes().sort("t0").iter_rows(named=True)
    declared = expected_wake(scenario)  # nothing learnt yet: the first wake's hint is the declared wake's
    fixed = expected_wake(scenario.with_arm("fixed"))
    assert (first["hint_mode"], first["hint_source"]) == ("calibrated", "declared")
    assert first["hint_s"] == pytest.approx(declared.hint_s, abs=1e-6) and first["served"]
    # live, the wake ends a few round trips (x20) after the declared instant: at worst one more retry
    assert first["attempts"] <= declared.attempts + 1 and first["overshoot_s"] < 0.5 * fixed.overshoot_s, first
    assert (second["hint_mode"], second["hint_source"]) == ("calibrated", "calibrated")
    assert second["hint_s"] < 0.5 * fixed.hint_s and second["attempts"] <= 3 and second["served"]
    assert second["overshoot_s"] < 0.5 * fixed.overshoot_s, second
