"""The ModelClaim scenarios' arms in virtual time (issue #20): fixed, calibrated and hold.

Every wake of a run must decompose as ``expected_wake`` derives it from the presets and the arm
(not read back from the run): the first from the durations the deployment declares (nothing
learnt yet), the later ones from what the previous cycles' lifecycles learnt, carried across each
cycle's restart. Then ``restorelens experiment`` over the four scenarios and the three arms scores
the goal's shape: fixed overshoots by seconds, calibrated by its margin, hold by no more, first
wakes included, and neither is slower to the first token than fixed.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from restorelens.analysis import Analysis
from restorelens.cli import cli
from restorelens.collector import load_paths
from restorelens.errors import SettingError
from restorelens.experiments.catalog import get_scenario
from restorelens.experiments.matrix import Matrix, default_arms, parse_arms
from restorelens.experiments.modelclaim.scenarios import (
    CALIBRATED,
    FIXED,
    HOLD,
    MODELCLAIM_ARMS,
    MODELCLAIM_SCENARIOS,
    ModelClaimScenario,
    expected_wake,
)
from restorelens.experiments.run_telemetry import RunTelemetry
from restorelens.experiments.runner import run_virtual
from restorelens.spans import HINT_MODES

EXACT = 1e-6  # virtual time: exact up to the nanosecond timestamps at an epoch-sized float


def play(tmp_path: Path, scenario: ModelClaimScenario) -> tuple[list[dict[str, Any]], Any]:
    """The run's wake episodes in time order, and its attempts."""
    out = tmp_path / f"{scenario.name}-{scenario.arm}.jsonl"
    with RunTelemetry("file", path=out) as telemetry:
        run_virtual(scenario, 1, telemetry.providers, "r1")
    db = tmp_path / f"{out.stem}.duckdb"
    assert load_paths([out], db).rejected == 0
    with Analysis.open(db) as analysis:
        wakes = list(analysis.wake_episodes().sort("t0").iter_rows(named=True))
        attempts = analysis.attempts()
    return wakes, attempts


def cycles(name: str, arm: str, count: int = 3, **changes: Any) -> ModelClaimScenario:
    return dataclasses.replace(MODELCLAIM_SCENARIOS[name].with_arm(arm), cycles=count, **changes)


def test_the_arms_are_named_as_the_hint_modes_and_fixed_is_the_default() -> None:
    assert MODELCLAIM_ARMS == HINT_MODES == (FIXED, CALIBRATED, HOLD)
    scenario = get_scenario("modelclaim-move")
    assert (scenario.arm, scenario.retry_policy, scenario.hint_settings()) == (
        "fixed", "honour-retry-after", {"retry_after_mode": "fixed"})
    assert get_scenario("modelclaim-move", "calibrated").hint_settings() == {"retry_after_mode": "calibrated"}
    held = get_scenario("modelclaim-move", "hold")
    assert (held.retry_policy, held.hint_settings()) == ("honour-hint-ms", {"retry_after_mode": "calibrated",
                                                                           "hold_s": 30.0})
    assert default_arms(Matrix(("modelclaim-move",)).kind) == ("fixed",)


def test_an_unknown_arm_is_one_line_listing_the_valid_ones() -> None:
    with pytest.raises(SettingError, match=r"--arm.*'lend'.*fixed, calibrated, hold"):
        get_scenario("modelclaim-in-place", "lend")
    with pytest.raises(SettingError, match=r"--arms.*greedy.*choose from fixed, calibrated, hold"):
        parse_arms("fixed,greedy", "modelclaim")
    result = CliRunner().invoke(cli, ["experiment", "modelclaim-in-place", "--arms", "fixed,nope", "--out", "x"])
    assert result.exit_code != 0
    assert "nope" in result.output and "fixed, calibrated, hold" in result.output
    with pytest.raises(SettingError, match="separate experiments"):
        Matrix(("modelclaim-in-place", "moflux-balanced"))
    with pytest.raises(SettingError, match="--cycles"):
        Matrix(("moflux-balanced",), cycles=2)
    with pytest.raises(SettingError, match="--cycles"):
        cycles("modelclaim-in-place", FIXED, 0)


@pytest.mark.parametrize("arm", MODELCLAIM_ARMS)
@pytest.mark.parametrize("name", list(MODELCLAIM_SCENARIOS))
def test_every_wake_of_every_arm_decomposes_as_expected_first_from_the_declared_then_learnt(
        tmp_path: Path, name: str, arm: str) -> None:
    scenario = cycles(name, arm)
    wakes, _ = play(tmp_path, scenario)
    assert len(wakes) == scenario.cycles
    for index, wake in enumerate(wakes):
        expected = expected_wake(scenario, seen=index > 0)
        where = (index, wake)
        assert wake["hint_mode"] == arm, where
        assert wake["hint_source"] == (FIXED if arm == FIXED else "calibrated" if index else "declared"), where
        assert (wake["wake_path"], wake["attempts"], wake["served"], wake["clock_skew"]) == (
            scenario.wake_path, expected.attempts, True, False), where
        for column in ("hint_s", "ready_s", "observed_s", "overshoot_s"):
            assert wake[column] == pytest.approx(getattr(expected, column), abs=EXACT), (column, where)
        if expected.held_s is None:
            assert wake["hold_s"] is None, where
        else:
            assert wake["hold_s"] == pytest.approx(expected.held_s, abs=EXACT), where


def test_the_calibrated_hint_converges_on_the_observed_wake_across_restarts(tmp_path: Path) -> None:
    # Each cycle restarts the gate and its lifecycle; only the calibration is carried over. The
    # hint after the first wake is what that wake took, plus the margin, rounded up to the ms.
    scenario = cycles("modelclaim-make-room", CALIBRATED, 4)
    wakes, _ = play(tmp_path, scenario)
    observed_s = expected_wake(scenario).observed_s
    # nothing learnt yet: the neighbour's declared sleep and the model's declared wake, plus the margin
    assert wakes[0]["hint_source"] == "declared"
    assert wakes[0]["hint_s"] == pytest.approx(expected_wake(scenario).hint_s, abs=EXACT)
    assert wakes[0]["hint_s"] < scenario.expected_retry_after_s
    for wake in wakes[1:]:
        assert wake["hint_source"] == "calibrated"
        assert observed_s + 0.05 <= wake["hint_s"] < observed_s + 0.05 + 0.001
        assert wake["overshoot_s"] < 0.06 < expected_wake(dataclasses.replace(scenario, arm=FIXED)).overshoot_s


def test_a_held_request_is_forwarded_at_readiness_in_one_attempt(tmp_path: Path) -> None:
    scenario = cycles("modelclaim-in-place", HOLD, 2)
    wakes, attempts = play(tmp_path, scenario)
    for wake in wakes:
        assert (wake["first_status"], wake["attempts"]) == (200, 1)
        # the first request came at t0: held from its arrival to the engine's readiness
        assert wake["hold_s"] == pytest.approx(wake["ready_s"], abs=EXACT)
        assert wake["overshoot_s"] == pytest.approx(0.0, abs=EXACT)
        assert not wake["clock_skew"]
    # every request, the second client's too (arrived 2 s into the wake), went through at once
    assert attempts.height == 4 and set(attempts["status_code"]) == {200}
    second = attempts.filter(attempts["request_id"] == "modelclaim-in-place-second").row(0, named=True)
    assert second["gate_hold_s"] == pytest.approx(wakes[0]["ready_s"] - 2.0, abs=EXACT)
    # each held gate.request says when the gate let it through, as the proxy's does
    assert (tmp_path / "modelclaim-in-place-hold.jsonl").read_text().count('"hold.released"') == 4


def test_a_wake_predicted_longer_than_the_hold_is_answered_at_once_and_the_retry_held_to_its_end(
        tmp_path: Path) -> None:
    scenario = cycles("modelclaim-in-place", HOLD, 2, hold_s=3.0)  # the wake takes 4.14 s
    wakes, attempts = play(tmp_path, scenario)
    for wake, source in zip(wakes, ("declared", "calibrated"), strict=True):
        expected = expected_wake(scenario, seen=source == "calibrated")
        # back half the hold (1.5 s) before the predicted end: held there until the wake ends
        assert (wake["first_status"], wake["hint_source"], wake["attempts"]) == (503, source, 2)
        assert wake["hint_s"] == pytest.approx(expected.ready_s - 1.5, abs=0.001)
        assert wake["hint_s"] == pytest.approx(expected.hint_s, abs=EXACT) and expected.hint_s < scenario.hold_s
        assert wake["overshoot_s"] == pytest.approx(0.0, abs=EXACT)
    refused, held = attempts.filter(attempts["request_id"] == "modelclaim-in-place-first-c2").sort(
        "attempt_index").iter_rows(named=True)
    assert refused["status_code"] == 503 and refused["gate_hold_s"] is None
    assert refused["duration_s"] == pytest.approx(0.0, abs=EXACT)  # answered at once, not held
    assert held["status_code"] == 200 and held["gate_hold_s"] == pytest.approx(1.5, abs=0.001)


def test_the_experiment_scores_the_goals_shape_over_every_scenario_and_arm(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, ["experiment", *MODELCLAIM_SCENARIOS, "--arms", "fixed,calibrated,hold",
                                      "--seeds", "1", "--cycles", "3", "--workers", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cycles"] == 3
    rows = {(r["scenario"], r["arm"], r["wakes"]): r for r in summary["wakes"]}
    assert len(rows) == len(MODELCLAIM_SCENARIOS) * 3 * 3
    for name in MODELCLAIM_SCENARIOS:
        fixed, calibrated, hold = (rows[(name, arm, "after first")] for arm in MODELCLAIM_ARMS)
        assert (fixed["n"], fixed["hint_modes"], hold["hint_modes"]) == (2, ["fixed"], ["hold"])
        assert fixed["overshoot_p95_s"] > 1.0 > 0.5 >= calibrated["overshoot_p95_s"] >= hold["overshoot_p95_s"], name
        assert calibrated["attempts_max"] <= 2 and hold["attempts_max"] <= 2
        assert calibrated["ttft_p50_vs_fixed_s"] < 0 and hold["ttft_p50_vs_fixed_s"] < 0
        # the first wake, with nothing learnt, is hinted from the declared durations: no fixed-arm wake
        for arm in (CALIBRATED, HOLD):
            first = rows[(name, arm, "first")]
            assert first["overshoot_p95_s"] <= 0.5 < rows[(name, FIXED, "first")]["overshoot_p50_s"], (name, arm)
            assert first["ttft_p50_vs_fixed_s"] < 0, (name, arm)
    goals = {(g["arm"], g["goal"].split(" ")[0]): g for g in summary["goals"]}
    assert all(g["after_first_holds"] and g["all_holds"] for g in goals.values()), summary["goals"]
    assert "| modelclaim-move | hold | first |" in result.output


@pytest.mark.parametrize("name", list(MODELCLAIM_SCENARIOS))
def test_with_nothing_declared_no_arm_is_slower_to_first_token_than_fixed(tmp_path: Path, name: str) -> None:
    """No durations declared: the first wake's hints re-estimate (calibrated) or bring the client
    back at once to be held (hold); neither gets the first token later than the fixed table's
    client, in at most 4 attempts under calibrated, and hold overshoots by nothing."""
    served = {}
    for arm in MODELCLAIM_ARMS:
        wakes, _ = play(tmp_path, cycles(name, arm, 2, declare_durations=False))
        first = wakes[0]
        assert first["hint_source"] == ("fixed" if arm == FIXED else "elapsed"), first
        served[arm] = [w["total_s"] for w in wakes]
        if arm == CALIBRATED:
            assert first["attempts"] <= 4 or first["attempts"] <= 3 + expected_wake(
                cycles(name, FIXED, 1)).attempts, first
        if arm == HOLD:
            assert first["overshoot_s"] == pytest.approx(0.0, abs=EXACT), first
    for arm in (CALIBRATED, HOLD):
        assert all(t <= f + EXACT for t, f in zip(served[arm], served[FIXED], strict=True)), (arm, served)
