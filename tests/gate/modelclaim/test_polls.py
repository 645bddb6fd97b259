"""Readiness polled coarsely until near the expected ready time and finely around it: the
schedule itself, the virtual shell's observation of a start, and the live backend polling a real
loopback server whose /health turns 200 at a known time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from restorelens.clock import WallClock
from restorelens.gate.modelclaim.actions import StartEngine
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.estimates import START, DeclaredDurations
from restorelens.gate.modelclaim.hints import HINT_MARGIN_S, RetryHints
from restorelens.gate.modelclaim.phases import AnswerTable
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.polls import FINE_POLL_S, PollSchedule
from restorelens.gate.modelclaim.vllm_backend import VllmSleepBackend
from restorelens.gate.modelclaim.virtual import VirtualLifecycle
from restorelens.serving import ServerThread

GIB = 2**30


def test_polls_are_coarse_until_a_coarse_step_before_the_expected_time_fine_around_it_then_coarse() -> None:
    schedule = PollSchedule(0.5, expected_s=45.0)
    polls = schedule.polls_until(100.0, 150.0)
    gaps = [round(b - a, 9) for a, b in zip(polls, polls[1:])]
    lo, hi = 144.5, 145.5
    assert polls[0] == 100.0 and lo in polls and hi in polls
    assert all(g == 0.5 for a, g in zip(polls, gaps) if a < lo or a >= hi)
    assert all(g == pytest.approx(FINE_POLL_S) for a, g in zip(polls, gaps) if lo <= a < hi)
    # bounded: the fine polls of one call are the window over the fine step, whatever the start takes
    assert sum(lo <= p < hi for p in polls) == round(2 * 0.5 / FINE_POLL_S)
    # nothing expected: the coarse grid alone, as before
    assert PollSchedule(0.5).polls_until(0.0, 2.0) == [0.0, 0.5, 1.0, 1.5, 2.0]
    # expected sooner than one coarse step: fine from the call
    assert PollSchedule(0.5, expected_s=0.2).polls_until(0.0, 0.1) == pytest.approx([0.0, 0.025, 0.05, 0.075, 0.1])


@pytest.mark.parametrize(("ready_s", "observed_s"), [
    (145.0, 145.0), (145.01, 145.025), (144.6, 144.6), (144.61, 144.625),  # in the window: the fine grid
    (120.2, 120.5), (144.4, 144.5),  # early: the coarse grid, or the window's first poll
    (145.6, 146.0), (150.0, 150.0), (100.0, 100.0), (90.0, 100.0),  # late: coarse again; ready before the call
])
def test_a_start_is_observed_at_the_first_scheduled_poll_at_or_after_ready(ready_s: float, observed_s: float) -> None:
    schedule = PollSchedule(0.5, expected_s=45.0)
    assert schedule.observed_s(100.0, ready_s) == pytest.approx(observed_s)
    polls = schedule.polls_until(100.0, 160.0)
    assert schedule.observed_s(100.0, ready_s) == pytest.approx(min(p for p in polls if p >= ready_s - 1e-9))


def virtual(cold_start_s: float, declared_s: float | None) -> VirtualLifecycle:
    priors = () if declared_s is None else (DeclaredDurations({"m": {START: declared_s}}),)
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB)],
                          PoolPolicy(sleep_after_s=3600), hints=RetryHints(AnswerTable(), "calibrated", priors=priors))
    backend = InProcessBackend(lambda model, pod: FixedLatencyEngine(cold_start_s=cold_start_s))
    return VirtualLifecycle(core, backend, poll_interval_s=0.5)


def test_the_virtual_shell_observes_a_start_on_the_schedule_of_its_estimate() -> None:
    # a 30.31-s start: on the 0.5-s grid alone seen at 30.5; expected (declared 30 s), at the next
    # fine poll, 30.325. What the lifecycle learns is that observed duration.
    coarse, fine = virtual(30.31, None), virtual(30.31, 30.0)
    for life in (coarse, fine):
        life.start(0.0)
        life.advance_to(200.0)
    assert coarse.core.calibration.predict_s("m", "cold-start") == pytest.approx(30.5)
    assert fine.core.calibration.predict_s("m", "cold-start") == pytest.approx(30.325)
    # the next start of the model is expected from what the first took: polled finely around it
    assert coarse.core.hints.estimates(coarse.core.calibration).for_call("m", START) == pytest.approx(30.5)
    coarse.fail("m", 300.0)  # restarted after 2 s: a second 30.31-s start, now expected at 30.5
    coarse.advance_to(500.0)
    assert coarse.core.calibration.observed_wakes()["m"]["cold-start"] == pytest.approx([30.5, 30.325])


def health_server(ready_at_s: Callable[[], float | None], clock: WallClock, stamps: list[float]) -> Starlette:
    """An engine whose /health says 503 until ``ready_at_s()`` (clock seconds), recording every poll."""

    async def health(request: Request) -> JSONResponse:
        now_s = clock.now_s()
        stamps.append(now_s)
        ready_s = ready_at_s()
        return JSONResponse({}, status_code=200 if ready_s is not None and now_s >= ready_s else 503)

    async def is_sleeping(request: Request) -> JSONResponse:
        return JSONResponse({"is_sleeping": False})

    return Starlette(routes=[Route("/health", health), Route("/is_sleeping", is_sleeping)])


def test_live_the_backend_polls_finely_around_the_start_it_expects(serve_asgi: Callable[..., ServerThread]) -> None:
    """The backend is told (``use_estimates``) that a start takes 0.6 s; the engine is ready 0.6 s
    after the call. Read from the server's own stamps: a coarse poll (0.2 s) until the window, fine
    polls in it, and the poll before readiness was one after which the schedule meant to poll again
    within the fine step, where the coarse grid alone would have waited up to 0.2 s."""
    clock = WallClock()
    stamps: list[float] = []
    ready: dict[str, float] = {}
    server = serve_asgi(health_server(lambda: ready.get("at"), clock, stamps))
    interval_s, expected_s = 0.2, 0.6

    async def go() -> tuple[float, float]:
        backend = VllmSleepBackend({"m": server.url}, clock=clock, poll_interval_s=interval_s)
        backend.use_estimates(lambda model, call: expected_s if (model, call) == ("m", START) else None)
        try:
            called_s = clock.now_s()
            ready["at"] = called_s + expected_s
            answer = await backend.start(StartEngine("m", 1, "p1", (0,)), called_s)
            return called_s, answer.ready_at_s
        finally:
            await backend.close()

    called_s, ready_at_s = asyncio.run(go())
    schedule = PollSchedule(interval_s, expected_s)
    lo_s, _ = schedule.window(called_s)
    ready_s = ready["at"]
    before = [s for s in stamps if s < ready_s]
    after = [s for s in stamps if s >= ready_s]
    assert after and ready_at_s >= after[0] >= ready_s
    # coarse until the window: no more polls before it than the coarse grid has (0 and 0.2 s)
    assert sum(s < lo_s for s in before) <= 2
    # fine in it: the last poll that found it loading was in the window, and the schedule's next
    # poll after it was due within the fine step
    last_s = before[-1]
    assert last_s >= lo_s
    assert schedule.next_poll_s(called_s, last_s) - last_s <= FINE_POLL_S + 1e-9 < interval_s
    # and never faster than the fine step (a timer waking an instant early aside): no busy loop
    in_window = [s for s in stamps if s >= lo_s]
    assert all(b - a >= FINE_POLL_S / 2 for a, b in zip(in_window, in_window[1:]))
    assert FINE_POLL_S <= HINT_MARGIN_S / 2
