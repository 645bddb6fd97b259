"""Drive a ``ModelClaimCore`` and an ``InProcessBackend`` in virtual time.

A small discrete-event loop: engine completions (ready, slept) are queued at the virtual times the
in-process engines give, and the core's own deadlines (idle sleeps, restarts, room, give-ups) are
honoured in time order. ``advance_to(t)`` processes everything due up to ``t``; the caller moves
its clock and calls ``route`` / ``request_started`` / ``request_finished`` at the times requests
happen, and ``sleep`` / ``wake`` / ``restart`` for an operator's control calls
(``experiments.modelclaim.virtual`` drives it so).

Readiness observation, as the live backends see it:

- a wake (``WakeEngine``) is observed at its ready time: vLLM's ``POST /wake_up`` (and the
  simulator's) answers once the engine is awake, and the live backend takes the ready time from
  that answer;
- a start (``StartEngine``: a cold start, a move) is observed at the first poll at or after the
  ready time, as a live ``/health`` poller sees a loading engine: on the live backends' schedule
  (``polls.PollSchedule``: every ``poll_interval_s`` from the call, finely around the start time
  the lifecycle expects, ``WakeEstimates.for_call``); with ``poll_interval_s=None``, at the ready
  time.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

from opentelemetry.trace import SpanContext

from restorelens.gate.modelclaim.actions import Action, SleepEngine, StartEngine, StopEngine, WakeEngine
from restorelens.gate.modelclaim.backends import EngineAnswer, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.estimates import START
from restorelens.gate.modelclaim.polls import PollSchedule
from restorelens.gate.routing import RouteAnswer

__all__ = ["VirtualLifecycle"]


class VirtualLifecycle:
    """``core`` + ``backend`` under one virtual clock; every method takes ``now_s``."""

    def __init__(
        self, core: ModelClaimCore, backend: InProcessBackend, *, poll_interval_s: float | None = None
    ) -> None:
        self.core = core
        self.backend = backend
        self.poll_interval_s = poll_interval_s
        self.now_s = float("-inf")
        self.performed: list[tuple[float, Action]] = []
        self._events: list[tuple[float, int, Callable[[float], list[Action]]]] = []
        self._seq = 0

    def start(self, now_s: float) -> None:
        self.now_s = now_s
        self._perform(self.core.start(now_s), now_s)

    def route(self, model: str, now_s: float, trigger: SpanContext | None = None,
              retries_taken: int | None = None) -> RouteAnswer:
        self.advance_to(now_s)
        answer, actions = self.core.route(model, now_s, trigger, retries_taken)
        self._perform(actions, now_s)
        return answer

    def request_started(self, model: str, now_s: float) -> None:
        self.advance_to(now_s)
        self._perform(self.core.request_started(model, now_s), now_s)

    def request_finished(self, model: str, now_s: float) -> None:
        self.advance_to(now_s)
        self._perform(self.core.request_finished(model, now_s), now_s)

    # --- an operator's control calls (POST /modelclaim/models/M/sleep|wake|restart live) ---------

    def sleep(self, model: str, now_s: float) -> None:
        """Sleep an Active model now; ``ClaimControlError`` when its state forbids it (nothing done then)."""
        self.advance_to(now_s)
        self._perform(self.core.sleep(model, now_s), now_s)

    def wake(self, model: str, now_s: float) -> None:
        """Wake (or place and start) a model as a request would, without a request."""
        self.advance_to(now_s)
        self._perform(self.core.wake(model, now_s), now_s)

    def restart(self, model: str, now_s: float) -> None:
        """Give a Failed model a fresh restart budget and place it again."""
        self.advance_to(now_s)
        self._perform(self.core.restart(model, now_s), now_s)

    def fail(self, model: str, now_s: float, error: str = "crashed") -> None:
        """The model's current engine instance crashes at ``now_s``."""
        self.advance_to(now_s)
        inst = self.core.claims_view()[model].instance
        if inst is not None:
            self.backend.crash(model, inst.id)
            self._perform(self.core.on_engine_failed(model, inst.id, now_s, error), now_s)

    def next_event_s(self) -> float | None:
        first_event_s = self._events[0][0] if self._events else None
        times = [t for t in (first_event_s, self.core.next_deadline_s()) if t is not None]
        return min(times) if times else None

    def advance_to(self, now_s: float, *, max_events: int = 100_000) -> None:
        """Process every engine completion and core deadline due at or before ``now_s``."""
        for _ in range(max_events):
            t = self.next_event_s()
            if t is None or t > now_s:
                break
            self.now_s = max(self.now_s, t)
            if self._events and self._events[0][0] <= t:
                _, _, callback = heapq.heappop(self._events)
                self._perform(callback(t), t)
            else:
                self._perform(self.core.advance(t), t)
        else:
            raise RuntimeError(f"more than {max_events} lifecycle events before t={now_s}")
        self.now_s = max(self.now_s, now_s)

    def run_until_idle(self, limit_s: float) -> None:
        """Advance through every pending event up to ``limit_s``."""
        self.advance_to(limit_s)

    def _at(self, t: float, callback: Callable[[float], list[Action]]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, self._seq, callback))

    def _observed_s(self, model: str, called_s: float, ready_s: float) -> float:
        if self.poll_interval_s is None:
            return max(ready_s, called_s)
        expected_s = self.core.hints.estimates(self.core.calibration).for_call(model, START)
        return PollSchedule(self.poll_interval_s, expected_s).observed_s(called_s, ready_s)

    def _perform(self, actions: list[Action], now_s: float) -> None:
        for action in actions:
            self.performed.append((now_s, action))
            if isinstance(action, StartEngine):
                self._observe_ready(action, self.backend.perform_start(action, now_s), now_s)
            elif isinstance(action, WakeEngine):
                self._observe_ready(action, self.backend.perform_wake(action, now_s), now_s)
            elif isinstance(action, SleepEngine):
                self._report_slept(action, self.backend.perform_sleep(action, now_s))
            elif isinstance(action, StopEngine):
                self.backend.perform_stop(action, now_s)

    def _observe_ready(self, action: StartEngine | WakeEngine, answer: EngineAnswer, called_s: float) -> None:
        def ready(t: float) -> list[Action]:
            return self.core.on_engine_ready(action.model, action.instance_id, t, ready_at_s=answer.ready_at_s,
                                             url=answer.url, attached=answer.attached, asleep=answer.asleep)

        if isinstance(action, WakeEngine):  # the wake call's own answer says awake
            observed_s = max(called_s, answer.ready_at_s)
        else:
            observed_s = self._observed_s(action.model, called_s, answer.ready_at_s)
        self._at(observed_s, ready)

    def _report_slept(self, action: SleepEngine, done_s: float) -> None:
        def slept(t: float) -> list[Action]:
            return self.core.on_engine_slept(action.model, action.instance_id, t)

        self._at(done_s, slept)
