"""The hint a waking model's 503 carries, and whether the request may be held: sans-I/O, virtual time."""

from __future__ import annotations

import pytest

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.actions import WakeRecord
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.calibration import WakeCalibration
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.estimates import START, WAKE, DeclaredDurations
from restorelens.gate.modelclaim.hints import HINT_MARGIN_S, MIN_HINT_S, RetryHints
from restorelens.gate.modelclaim.phases import AnswerTable
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.virtual import VirtualLifecycle
from restorelens.gate.routing import NotReady, Routed

GIB = 2**30
WAKE_S = 4.1424  # the engine's wake, as the llama-8b-h20 preset models it


def lifecycle(mode: str = "calibrated", hold_s: float | None = None,
              calibration: WakeCalibration | None = None, declared: dict[str, float] | None = None) -> VirtualLifecycle:
    """``declared``: what the claim declares its engine takes (``expected``), step -> seconds."""
    priors = (DeclaredDurations({"m": declared}),) if declared else ()
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB)],
                          PoolPolicy(sleep_after_s=3600), hints=RetryHints(AnswerTable(), mode, hold_s, priors=priors),
                          calibration=calibration)
    backend = InProcessBackend(lambda model, pod: FixedLatencyEngine(cold_start_s=30.0, wake_s=WAKE_S, sleep_s=0.5))
    life = VirtualLifecycle(core, backend)
    life.start(0.0)
    life.advance_to(30.0)
    return life


def sleep_then_ask(life: VirtualLifecycle, at_s: float) -> NotReady:
    """Put the model to sleep well before ``at_s`` and ask for it at ``at_s``: the wake's first answer."""
    life.sleep("m", at_s - 100.0)
    life.advance_to(at_s - 50.0)
    answer = life.route("m", at_s)
    assert isinstance(answer, NotReady)
    return answer


def served_at(life: VirtualLifecycle, after_s: float, model: str = "m") -> float:
    """When the wake in progress lets requests through (the lifecycle observes the ready engine)."""
    t = after_s
    for _ in range(100):
        if isinstance(life.route(model, t), Routed):
            return t
        t = life.next_event_s() or t + 1.0
        life.advance_to(t)
    raise AssertionError(f"{model} never served after {after_s}")


def test_fixed_mode_answers_the_table_and_says_so() -> None:
    answer = sleep_then_ask(lifecycle("fixed"), 200.0)
    assert (answer.retry_after_s, answer.retry_after_ms, answer.hint_source, answer.hint_mode) == (10, None, "fixed", "fixed")
    assert answer.hold_until_s is None


def test_calibrated_hints_start_from_a_re_estimate_and_converge_on_the_observed_wake() -> None:
    life = lifecycle()
    first = sleep_then_ask(life, 200.0)  # nothing declared, nothing seen: an eighth of the table's 10 s
    assert (first.retry_after_s, first.retry_after_ms, first.hint_source) == (2, 1250, "elapsed")
    took_s = served_at(life, 200.0) - 200.0
    for cycle in range(1, 4):
        at_s = 200.0 + 300.0 * cycle
        answer = sleep_then_ask(life, at_s)
        assert answer.hint_source == "calibrated"
        # What the earlier wakes took, plus the margin, in ms; Retry-After rounded up to whole seconds.
        assert answer.retry_after_ms == pytest.approx((took_s + HINT_MARGIN_S) * 1000, abs=1)
        assert answer.retry_after_s == 5
        assert answer.predicted_ready_in_s == pytest.approx(took_s)
        assert served_at(life, at_s) - at_s == pytest.approx(took_s)
    assert took_s == pytest.approx(WAKE_S)


def test_a_later_request_is_told_only_what_remains_and_an_overdue_wake_a_short_wait() -> None:
    life = lifecycle()
    sleep_then_ask(life, 200.0)
    served_at(life, 200.0)
    sleep_then_ask(life, 500.0)
    second = life.route("m", 502.0)
    assert isinstance(second, NotReady)
    assert second.retry_after_ms == pytest.approx((WAKE_S - 2.0 + HINT_MARGIN_S) * 1000, abs=1)
    assert second.retry_after_s == 3
    # A wake running past its prediction: come back soon, not at once.
    calibration = WakeCalibration()
    calibration.observe("m", "in-place", 1.0)  # as if past wakes took 1 s: this one, 4 s in, is late
    late = life.core.hints.answer(life.core.claims_view()["m"], 504.0, calibration)
    assert (late.retry_after_ms, late.retry_after_s) == (MIN_HINT_S * 1000, 1)


def test_a_wake_is_held_only_when_predicted_within_hold_s() -> None:
    life = lifecycle(hold_s=30.0)
    first = sleep_then_ask(life, 200.0)
    assert first.hold_until_s == 230.0 and first.hint_mode == "hold"  # nothing known: come back at once (0.25 s), held
    short = lifecycle(hold_s=3.0, declared={WAKE: 8.0})  # declared longer than it takes
    answer = sleep_then_ask(short, 200.0)
    # 8 s > 3 s: no hold now, but back 1.5 s (half the hold) before the predicted end, to be held then
    assert (answer.hold_until_s, answer.retry_after_ms, answer.hint_source) == (None, 6_500, "declared")
    assert answer.predicted_ready_in_s == 8.0
    served_at(short, 200.0)
    calibrated = sleep_then_ask(short, 500.0)
    assert calibrated.hold_until_s is None  # 4.19 s > 3 s: back at 2.69 s, while it wakes
    assert calibrated.retry_after_ms == pytest.approx((WAKE_S - 1.5) * 1000, abs=1)
    again = short.route("m", 500.0 + calibrated.retry_after_ms / 1000)
    assert isinstance(again, NotReady) and again.hold_until_s is not None  # 1.5 s to go: held to the end


def test_no_hint_and_no_hold_for_a_model_only_an_operator_can_bring_back() -> None:
    life = lifecycle(hold_s=30.0)
    life.fail("m", 40.0)
    for t in (42.0, 46.0, 54.0, 70.0, 102.0, 166.0):
        life.advance_to(t)
        life.fail("m", t + 0.5)
    answer = life.route("m", 300.0)
    assert isinstance(answer, NotReady) and answer.phase == "Failed"
    assert (answer.retry_after_s, answer.retry_after_ms, answer.hold_until_s) == (None, None, None)


def test_settings_are_checked() -> None:
    with pytest.raises(SettingError, match="retry_after_mode"):
        RetryHints(AnswerTable(), "clever")
    with pytest.raises(SettingError, match="hold_s"):
        RetryHints(AnswerTable(), "fixed", 0.0)
    for bad in (0, 120.5, True):
        with pytest.raises(SettingError, match="max_hint_s"):
            RetryHints(AnswerTable(), "fixed", max_hint_s=bad)  # type: ignore[arg-type]


def test_a_wait_longer_than_max_hint_s_is_hinted_at_it_and_re_estimated_at_the_retry() -> None:
    life = lifecycle(declared={WAKE: 300.0})
    first = sleep_then_ask(life, 200.0)
    # 300 s to go; the OpenAI SDK does not retry at all past 120 s: both headers say 120 s.
    assert (first.retry_after_ms, first.retry_after_s, first.hint_capped) == (120_000, 120, True)
    assert first.predicted_ready_in_s == 300.0
    # back when told (the engine here is faster than declared: asked before the lifecycle sees it),
    # and answered again: 100 s to go is within the limit
    later = life.core.hints.answer(life.core.claims_view()["m"], 400.0, life.core.calibration)
    assert not later.hint_capped
    assert later.retry_after_ms == pytest.approx((100.0 + HINT_MARGIN_S) * 1000, abs=1)
    tight = RetryHints(AnswerTable(), "calibrated", priors=(DeclaredDurations({"m": {WAKE: 300.0}}),), max_hint_s=7)
    capped = tight.answer(life.core.claims_view()["m"], 400.0, life.core.calibration)
    assert (capped.retry_after_ms, capped.retry_after_s, capped.hint_capped) == (7_000, 7, True)


def test_a_fixed_table_longer_than_max_hint_s_is_cut_to_it() -> None:
    life = lifecycle("fixed")
    long_table = RetryHints(AnswerTable(not_ready_s=300), "fixed")
    sleep_then_ask(life, 200.0)
    answer = long_table.answer(life.core.claims_view()["m"], 200.0, life.core.calibration)
    assert (answer.retry_after_s, answer.retry_after_ms, answer.hint_capped) == (120, None, True)


def test_a_client_with_a_retry_budget_is_not_sent_back_before_a_long_wake_can_end() -> None:
    life = lifecycle()
    sleep_then_ask(life, 200.0)
    claim, calibration = life.core.claims_view()["m"], life.core.calibration
    hints = life.core.hints
    # Nothing known: our own client re-estimates from an eighth of the table; a client that counts
    # its retries (the OpenAI SDK: 2) gets the table's value, then the longest hint it follows.
    assert hints.answer(claim, 200.0, calibration).retry_after_ms == 1_250
    assert hints.answer(claim, 200.0, calibration, retries_taken=0).retry_after_ms == 10_000
    answer = hints.answer(claim, 210.0, calibration, retries_taken=1)
    assert (answer.retry_after_ms, answer.hint_capped) == (120_000, False)
    # Past its prediction (past wakes took 1 s, this one is 3 s over): not 250 ms but the overrun.
    learnt = WakeCalibration()
    learnt.observe("m", "in-place", 1.0)
    assert hints.answer(claim, 204.0, learnt).retry_after_ms == MIN_HINT_S * 1000
    assert hints.answer(claim, 204.0, learnt, retries_taken=1).retry_after_ms == pytest.approx(3_000, abs=60)
    # Predicted: the prediction, whoever asks.
    assert hints.answer(claim, 200.5, learnt, retries_taken=0).retry_after_ms == 550


def test_the_calibration_learns_from_ready_wakes_only_and_round_trips_through_json() -> None:
    calibration = WakeCalibration(quantile=0.9, window=3)
    for duration_s, outcome in ((4.0, "ready"), (9.0, "failed"), (5.0, "ready"), (6.0, "ready"), (7.0, "ready")):
        calibration.on_wake_finished(WakeRecord("m", "in-place", "p1", 90.0, 100.0 + duration_s, outcome,
                                                path_started_s=100.0,
                                                observed_s=100.0 + duration_s if outcome == "ready" else None))
    # The window keeps the last three ready wakes, each from its path's start (not the 10 s before it).
    assert calibration.seen("m", "in-place") == 3
    assert calibration.predict_s("m", "in-place") == 7.0
    assert calibration.predict_s("m", "move") is None
    restored = WakeCalibration(window=3)
    restored.load_json(calibration.to_json(), "wakes.json")
    assert restored.predict_s("m", "in-place") == 7.0 and restored.seen("m", "in-place") == 3


@pytest.mark.parametrize(("text", "where"), [
    ("{not json", "wakes.json:1"),
    ('{"version": 2, "wakes": {}}', "version-1"),
    ('{"version": 1, "wakes": {"m": {"in-place": [1, -2]}}}', "wakes.m.in-place"),
    ('{"version": 1, "wakes": []}', "wakes"),
    ("[" * 100_000, "nested too deep"),
])
def test_a_file_that_is_no_calibration_is_refused_naming_where(text: str, where: str) -> None:
    calibration = WakeCalibration()
    calibration.observe("m", "in-place", 4.0)
    with pytest.raises(SettingError, match=where):
        calibration.load_json(text, "wakes.json")
    assert calibration.predict_s("m", "in-place") == 4.0  # nothing already learnt is lost


def test_time_before_the_path_began_is_neither_learnt_nor_subtracted() -> None:
    """A wake that first waited for room (its neighbour busy, then idle-slept) is an in-place wake
    of its own 4 s: the 140 s of waiting are not learnt, and the hint given once it wakes is the
    4 s still to go, not the 250-ms floor of a wake long overdue."""
    from opentelemetry.trace import SpanContext

    trigger = SpanContext(1, 2, False)
    core = ModelClaimCore(
        [Pod("p1", (24 * GIB,))],
        [ClaimSpec("a", 10 * GIB, 4 * GIB, weight_bytes=GIB, sleeping_footprint_bytes=GIB),
         ClaimSpec("b", 10 * GIB, 4 * GIB, weight_bytes=GIB, sleeping_footprint_bytes=GIB)],
        PoolPolicy(sleep_after_s=100, no_wake_reserve_while_asleep=True, sleep_to_make_room_after_s=1000),
        hints=RetryHints(AnswerTable(), "calibrated"))
    core.calibration.observe("a", "in-place", 4.0)
    life = VirtualLifecycle(core, InProcessBackend(lambda m, p: FixedLatencyEngine(cold_start_s=0.0, wake_s=4.0,
                                                                                   sleep_s=0.0)))
    life.start(0.0)
    life.advance_to(100.0)  # a idles to sleep at 100
    assert isinstance(life.route("b", 101.0, trigger), Routed)  # b takes the GPU
    life.request_started("b", 101.5)  # busy: no neighbour to sleep for room
    waiting = life.route("a", 110.0, trigger)
    assert isinstance(waiting, NotReady) and waiting.reason == "WaitingForRoom"
    assert waiting.hint_source == "prior"  # no path under way yet: nothing to predict from
    life.request_finished("b", 150.0)  # b idle from 150, idle-sleeps at 250: room for a
    life.advance_to(250.0)
    woken = life.route("a", 250.0)
    assert isinstance(woken, NotReady) and woken.hint_source == "calibrated"
    assert woken.retry_after_ms == (4.0 + HINT_MARGIN_S) * 1000
    assert served_at(life, 250.0, "a") == 254.0
    assert core.calibration.predict_s("a", "in-place") == 4.0 and core.calibration.seen("a", "in-place") == 2


def test_a_restart_s_backoff_is_no_part_of_the_cold_start_learnt() -> None:
    life = lifecycle()
    life.fail("m", 40.0)  # restarts after 2 s: a 30-s cold start from 42 s
    assert isinstance(life.route("m", 41.0), NotReady)
    assert served_at(life, 41.0) == 72.0
    assert life.core.calibration.predict_s("m", "cold-start") == 30.0  # not 31 (from the request) or 32
