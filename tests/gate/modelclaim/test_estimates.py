"""The first wake's estimate: from a declared duration where there is one, else hints that
re-estimate at every retry; sans-I/O, virtual time."""

from __future__ import annotations

import math

import pytest

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.calibration import WakeCalibration
from restorelens.gate.modelclaim.config import build_core
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.estimates import SLEEP, START, WAKE, DeclaredDurations, WakeEstimates
from restorelens.gate.modelclaim.hints import ATTEMPTS_TO_TABLE, HINT_MARGIN_S, RetryHints
from restorelens.gate.modelclaim.phases import AnswerTable
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.virtual import VirtualLifecycle
from restorelens.gate.routing import NotReady, Routed

GIB = 2**30


def test_a_path_s_prior_is_the_sum_of_its_steps_and_unknown_when_a_step_is() -> None:
    calibration = WakeCalibration()
    declared = DeclaredDurations({"m": {START: 45.0, WAKE: 4.0}, "n": {SLEEP: 0.4}, "k": {WAKE: 1.0}})
    estimates = WakeEstimates(calibration, (declared,))
    assert estimates.for_path("m", "cold-start") == estimates.for_path("m", "move")
    assert (estimates.for_path("m", "move").duration_s, estimates.for_path("m", "move").source) == (45.0, "declared")
    assert estimates.for_path("m", "in-place").duration_s == 4.0
    assert estimates.for_path("m", "make-room", ["n"]).duration_s == pytest.approx(4.4)  # n sleeps, then m wakes
    assert estimates.for_path("m", "make-room", ["n", "k"]) is None  # k's sleep is not known
    assert estimates.for_path("k", "cold-start") is None
    # learnt beats declared, per path; a call's estimate is its own path's
    calibration.observe("m", "in-place", 5.0)
    assert (estimates.for_path("m", "in-place").duration_s, estimates.for_path("m", "in-place").source) == (
        5.0, "calibrated")
    assert (estimates.for_call("m", WAKE), estimates.for_call("m", START)) == (5.0, 45.0)
    calibration.observe("m", "move", 46.0)
    calibration.observe("m", "cold-start", 45.5)
    assert estimates.for_call("m", START) == 46.0  # a start is either path's: the longer
    assert estimates.for_call("nobody", START) is None


class _EngineStartupHistory:
    """Another prior source, as the engine's own startup phases would feed one."""

    def expected_s(self, model: str, step: str) -> float | None:
        return 30.0 if step == START else None


def test_prior_sources_plug_in_and_the_first_that_knows_wins() -> None:
    estimates = WakeEstimates(WakeCalibration(), (DeclaredDurations({"m": {WAKE: 4.0}}), _EngineStartupHistory()))
    assert estimates.for_path("m", "in-place").duration_s == 4.0
    assert estimates.for_path("m", "cold-start").duration_s == 30.0


def lifecycle(*, declared: dict[str, dict[str, float]] | None = None, hold_s: float | None = None,
              cold_start_s: float = 45.0, wake_s: float = 4.0, sleep_s: float = 0.4,
              no_reserve: bool = False) -> VirtualLifecycle:
    """m (and, on the same 24-GiB GPU, n) with in-process engines of the given durations."""
    claims = [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB, sleeping_footprint_bytes=GIB)]
    if no_reserve:
        claims.append(ClaimSpec("n", 10 * GIB, 4 * GIB, weight_bytes=GIB, sleeping_footprint_bytes=GIB))
    policy = PoolPolicy(sleep_after_s=3600, no_wake_reserve_while_asleep=no_reserve, sleep_to_make_room_after_s=5)
    hints = RetryHints(AnswerTable(), "calibrated", hold_s, priors=(DeclaredDurations(declared or {}),))
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], claims, policy, hints=hints)
    backend = InProcessBackend(lambda model, pod: FixedLatencyEngine(cold_start_s, wake_s, sleep_s))
    return VirtualLifecycle(core, backend, poll_interval_s=0.5)


def follow(life: VirtualLifecycle, model: str, at_s: float) -> tuple[list[NotReady], float]:
    """A client honouring each precise hint from ``at_s`` until routed: the answers and the success."""
    answers: list[NotReady] = []
    t = at_s
    while not isinstance(answer := life.route(model, t), Routed):
        assert isinstance(answer, NotReady) and answer.retry_after_ms is not None, answer
        answers.append(answer)
        t += answer.retry_after_ms / 1000
        assert len(answers) < 50
    return answers, t


def test_the_first_cold_start_is_hinted_from_the_declared_start_and_observed_on_it() -> None:
    life = lifecycle(declared={"m": {START: 45.0}}, cold_start_s=45.2)  # a little slower than declared
    life.start(0.0)
    answers, served_s = follow(life, "m", 1.0)
    first = answers[0]
    assert (first.hint_source, first.predicted_ready_in_s) == ("declared", 44.0)
    assert first.retry_after_ms == (44.0 + HINT_MARGIN_S) * 1000
    # back at 45.05, the start not seen yet: a short wait; seen by the fine polls at 45.2 (on their grid)
    assert len(answers) == 2 and served_s == pytest.approx(45.3)


def test_the_first_make_room_wake_is_hinted_from_the_neighbour_s_sleep_and_the_wake() -> None:
    life = lifecycle(declared={"m": {WAKE: 4.0}, "n": {SLEEP: 0.4}}, no_reserve=True, cold_start_s=1.0)
    life.start(0.0)
    life.advance_to(10.0)
    life.sleep("m", 10.0)  # n is placed in the room m leaves, and starts
    life.advance_to(20.0)
    assert isinstance(life.route("n", 20.0), Routed)  # idle from then on: slept to make room at 100
    answers, served_s = follow(life, "m", 100.0)
    assert answers[0].hint_source == "declared"
    assert answers[0].retry_after_ms == pytest.approx((0.4 + 4.0 + HINT_MARGIN_S) * 1000, abs=1)
    assert (len(answers), served_s) == (1, pytest.approx(100.0 + 4.4 + HINT_MARGIN_S, abs=0.001))


@pytest.mark.parametrize("wake_s", [0.3, 1.0, 2.6, 4.0, 9.9, 10.0, 17.0, 45.0])
def test_with_nothing_known_hints_re_estimate_and_never_bring_a_client_later_than_the_table(wake_s: float) -> None:
    life = lifecycle(wake_s=wake_s)
    life.start(0.0)
    life.advance_to(50.0)
    life.sleep("m", 50.0)
    answers, served_s = follow(life, "m", 100.0)
    assert {a.hint_source for a in answers} == {"elapsed"}
    table_s = 10.0
    # where a client honouring the table would be served: the first multiple of 10 s at or past the wake
    fixed_s = 100.0 + table_s * math.ceil(wake_s / table_s)
    assert served_s <= fixed_s + 1e-9
    # the table's instant within ATTEMPTS_TO_TABLE answers, then every table step as fixed does
    assert len(answers) <= ATTEMPTS_TO_TABLE + max(0, math.ceil(wake_s / table_s) - 1)
    if wake_s < table_s:  # within the table: overshoot at most as long as the wake had run, not the table's rest
        assert served_s - (100.0 + wake_s) <= max(wake_s, table_s / 2 ** (ATTEMPTS_TO_TABLE - 1))
    # what the wake took is learnt: the next one is hinted from it
    life.advance_to(served_s + 10.0)
    life.sleep("m", served_s + 10.0)
    again, _ = follow(life, "m", served_s + 100.0)
    assert again[0].hint_source == "calibrated" and len(again) == 1


def test_the_claim_s_expected_setting_is_the_declared_prior_and_is_checked() -> None:
    table = {"retry_after_mode": "calibrated", "policy": {"sleepAfterSeconds": 60},
             "pods": [{"name": "p1", "gpus": ["24Gi"]}],
             "claims": [{"model": "m", "perGPU": {"maximumFootprint": "10Gi", "kvFloor": "4Gi"},
                         "engine_url": "http://127.0.0.1:9", "expected": {"start_s": 45, "wake_s": 4.5}}]}
    core, _ = build_core(table)
    estimates = core.hints.estimates(core.calibration)
    assert (estimates.for_call("m", START), estimates.for_call("m", WAKE)) == (45.0, 4.5)
    for expected, where in (({"start": 45}, r"claims\[0\]\.expected\.start"), ({"wake_s": -1}, r"expected\.wake_s"),
                            ({"sleep_s": "fast"}, r"expected\.sleep_s"), ({"wake_s": True}, r"expected\.wake_s"),
                            ("45", r"claims\[0\]\.expected")):
        table["claims"][0]["expected"] = expected
        with pytest.raises(SettingError, match=where):
            build_core(table)


def test_under_hold_with_nothing_known_the_client_comes_back_at_once_to_be_held_again() -> None:
    life = lifecycle(hold_s=30.0)  # a 45-s start, nothing declared
    life.start(0.0)
    first = life.route("m", 1.0)
    assert isinstance(first, NotReady)
    assert (first.hint_source, first.retry_after_ms, first.hold_until_s) == ("elapsed", 250, 31.0)
    # the hold ends at 31 s with the start still running: back in 0.25 s, and held to its end then
    after_hold = life.route("m", 31.0)
    assert isinstance(after_hold, NotReady) and after_hold.retry_after_ms == 250
    assert after_hold.hold_until_s == 61.0 > 45.0
