"""The sans-I/O engine core: a scheduler and a lifecycle stepped with explicit times.

The core never reads a clock. A driver (the live app against ``WallClock``, or a discrete-event
loop against ``VirtualClock``) tells it what happened at which time (``add_request``, ``abort``,
``sleep``, ``wake_up``) and asks ``next_event_s()`` when it next needs stepping; ``advance_to(t)``
runs every step and transition due by ``t`` and returns the events they produced, in time order.
Calls that carry ``now_s`` first catch up to it, keeping what they produced for the next
``advance_to``, so a driver may call them in any order as long as time does not go backwards.
"""

from __future__ import annotations

import random

from restorelens.sim.config import EngineConfig
from restorelens.sim.lifecycle import Lifecycle
from restorelens.sim.records import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    EngineStateEvent,
    Event,
    FinishedEvent,
    FirstTokenEvent,
    RequestRecord,
    RequestRejectedError,
    SimRequest,
    TokenEvent,
)
from restorelens.sim.scheduler import Scheduler, StepPlan, TrackedRequest

__all__ = ["EngineCore"]


class EngineCore:
    """One simulated engine. Deterministic: the same calls with the same ``seed`` give the same events."""

    def __init__(self, config: EngineConfig, *, seed: int = 0, now_s: float = 0.0) -> None:
        self.config = config
        self.seed = seed
        self._rng = random.Random(seed)
        self._scheduler = Scheduler(config)
        self._lifecycle = Lifecycle(config)
        self._requests: dict[str, TrackedRequest] = {}
        self._now_s = now_s
        self._step: StepPlan | None = None
        self._step_end_s = 0.0
        self._needs_schedule = False
        self._pending: list[Event] = []

    # --- gauges -------------------------------------------------------------------------------

    @property
    def now_s(self) -> float:
        """The latest time the core has been told about."""
        return self._now_s

    @property
    def num_running(self) -> int:
        return self._scheduler.num_running

    @property
    def num_waiting(self) -> int:
        return self._scheduler.num_waiting

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV blocks in use, 0..1 (vllm:kv_cache_usage_perc)."""
        return self._scheduler.kv_usage

    @property
    def num_free_blocks(self) -> int:
        return self._scheduler.free_blocks

    @property
    def num_preemptions_total(self) -> int:
        return self._scheduler.num_preemptions_total

    @property
    def state(self) -> str:
        """loading, ready, draining, falling_asleep, asleep or waking."""
        return self._lifecycle.state

    @property
    def is_sleeping(self) -> bool:
        return self._lifecycle.is_sleeping

    @property
    def sleep_level(self) -> int | None:
        return self._lifecycle.sleep_level

    @property
    def weights_state(self) -> str:
        """resident, offloaded (level 1: in host RAM) or discarded (level 2)."""
        return self._lifecycle.weights

    @property
    def kv_cache_state(self) -> str:
        return self._lifecycle.kv_cache

    @property
    def host_ram_bytes(self) -> int:
        """Host RAM holding offloaded weights (level-1 sleep); invisible to GPU accounting."""
        return self._lifecycle.host_ram_bytes

    @property
    def device_weight_bytes(self) -> int:
        return self._lifecycle.device_weight_bytes

    def is_ready(self, now_s: float) -> bool:
        """Is the engine awake and scheduling at ``now_s`` (counting transitions due by then)?"""
        if self._lifecycle.accepts_requests:
            return True
        ready_at_s = self._lifecycle.ready_at_s()
        return ready_at_s is not None and ready_at_s <= now_s

    def ready_at_s(self) -> float | None:
        """When a cold start or wake-up in progress makes the engine ready; None if none is."""
        return self._lifecycle.ready_at_s()

    def is_in_flight(self, request_id: str) -> bool:
        return request_id in self._requests

    # --- inputs -------------------------------------------------------------------------------

    def add_request(self, request: SimRequest, now_s: float) -> None:
        """Queue a request that arrived at ``now_s``.

        While the engine sleeps (or falls asleep, drains for sleep, or wakes) the request waits
        and is scheduled after the wake, as vLLM does; with ``asleep_requests="refuse"`` it is an
        EngineNotReadyError instead. Raises RequestRejectedError when it can never be served as
        asked, EngineNotReadyError while the engine is loading (a cold start).
        """
        self._catch_up(now_s)
        self._validate(request)
        lifecycle = self._lifecycle
        if lifecycle.accepts_requests:
            self._requests[request.request_id] = self._scheduler.add(request, self._now_s)
            self._needs_schedule = True
            return
        if self.config.asleep_requests == "refuse" or not lifecycle.holds_requests:
            raise lifecycle.refusal()
        self._requests[request.request_id] = self._scheduler.add(request, self._now_s, hold=True)

    def _validate(self, request: SimRequest) -> None:
        config = self.config
        if request.request_id in self._requests:
            raise RequestRejectedError(f"request id {request.request_id!r} is already in flight", param="request_id")
        if request.prompt_tokens < 1:
            raise RequestRejectedError("the prompt must have at least one token", param="prompt")
        if request.max_tokens < 1:
            raise RequestRejectedError(f"max_tokens must be at least 1, got {request.max_tokens}", param="max_tokens")
        total = request.prompt_tokens + request.max_tokens
        if total > config.max_model_len:
            raise RequestRejectedError(
                f"This model's maximum context length is {config.max_model_len} tokens. However, you "
                f"requested {total} tokens ({request.prompt_tokens} in the messages, {request.max_tokens} "
                "in the completion). Please reduce the length of the messages or completion.",
                param="max_tokens",
            )
        if request.priority != 0 and config.scheduling_policy != "priority":
            # vLLM refuses this too rather than silently ignoring the field.
            raise RequestRejectedError(
                f"Got priority {request.priority} but priority scheduling is not enabled "
                "(scheduling_policy is fcfs)",
                param="priority",
            )

    def abort(self, request_id: str, now_s: float) -> FinishedEvent | None:
        """Abort one request (e.g. the client went away); its record is returned, not queued."""
        self._catch_up(now_s)
        tracked = self._requests.get(request_id)
        if tracked is None:
            return None
        event = self._finish(tracked, FINISH_ABORT, self._now_s)
        self._needs_schedule = True
        self._check_drained()
        return event

    def sleep(self, level: int, now_s: float, *, mode: str = "abort") -> float | None:
        """Put the engine to sleep; returns when it will be asleep, or None while draining (mode "wait").

        mode "abort" aborts every request in flight, held ones included (their FinishedEvents come
        from the next ``advance_to``); mode "wait" sleeps once the requests already accepted
        finish. Requests arriving afterwards are held until the wake (or refused, see
        ``add_request``).
        """
        if mode not in ("abort", "wait"):
            raise ValueError(f"sleep mode must be 'abort' or 'wait', got {mode!r}")
        self._catch_up(now_s)
        if mode == "abort" and self._lifecycle.state in ("ready", "draining", "asleep"):
            for tracked in list(self._requests.values()):
                self._pending.append(self._finish(tracked, FINISH_ABORT, self._now_s))
        return self._lifecycle.request_sleep(level, self._now_s, has_work=self._scheduler.has_work)

    def wake_up(self, now_s: float, tags: tuple[str, ...] | list[str] | None = None) -> float:
        """Begin restoring ``tags`` ("weights", "kv_cache"; all when None); returns the ready time."""
        self._catch_up(now_s)
        ready_at_s = self._lifecycle.wake_up(self._now_s, tuple(tags) if tags else None)
        self._release_if_awake()
        return ready_at_s

    def cold_start(self, now_s: float) -> float:
        """Start the engine process from scratch (everything in flight is lost); returns the ready time."""
        self._catch_up(now_s)
        for tracked in list(self._requests.values()):
            self._pending.append(self._finish(tracked, FINISH_ABORT, self._now_s))
        self._step = None
        return self._lifecycle.cold_start(self._now_s)

    # --- time ---------------------------------------------------------------------------------

    def next_event_s(self) -> float | None:
        """When the core next needs ``advance_to``; None when idle until the next input."""
        return self._now_s if self._pending else self._next_internal_s()

    def advance_to(self, now_s: float) -> list[Event]:
        """Run everything due by ``now_s``; returns the events produced since the last call."""
        self._catch_up(now_s, inclusive=True)
        events, self._pending = self._pending, []
        return events

    def _catch_up(self, now_s: float, *, inclusive: bool = False) -> None:
        # Inputs at time t see steps and transitions that ended at t, but no step starts at t
        # before them, so requests arriving together share a step; advance_to (inclusive) then
        # starts it. A live clock may step back by a hair; time never runs backwards in here.
        now_s = max(now_s, self._now_s)
        pending = self._pending
        while True:
            due = self._next_internal_s()
            if due is None or due > now_s:
                break
            if due == now_s and not inclusive:
                timed = self._timed_due_s()
                if timed is None or timed > now_s:
                    break
                self._now_s = now_s
                self._process(pending, start_steps=False)
                continue
            self._now_s = max(self._now_s, due)
            self._process(pending, start_steps=True)
        self._now_s = now_s

    def _timed_due_s(self) -> float | None:
        candidates = []
        if self._step is not None:
            candidates.append(self._step_end_s)
        if self._lifecycle.transition_at_s is not None:
            candidates.append(self._lifecycle.transition_at_s)
        return min(candidates) if candidates else None

    def _next_internal_s(self) -> float | None:
        candidates = []
        if self._step is not None:
            candidates.append(self._step_end_s)
        elif self._needs_schedule and self._lifecycle.schedules and self._scheduler.has_work:
            candidates.append(self._now_s)
        if self._lifecycle.transition_at_s is not None:
            candidates.append(self._lifecycle.transition_at_s)
        return min(candidates) if candidates else None

    def _process(self, events: list[Event], *, start_steps: bool) -> None:
        t = self._now_s
        if self._step is not None and self._step_end_s <= t:
            self._end_step(t, events)
        transition_at_s = self._lifecycle.transition_at_s
        if transition_at_s is not None and transition_at_s <= t:
            reached = self._lifecycle.complete_transition()
            if reached is not None:
                events.append(EngineStateEvent(reached, t))
            self._release_if_awake()
        if start_steps and self._step is None and self._needs_schedule:
            self._needs_schedule = False
            if self._lifecycle.schedules and self._scheduler.has_work:
                self._start_step(t)

    def _start_step(self, t: float) -> None:
        plan = self._scheduler.plan_step(t)
        if not plan.batch:
            return
        duration_s = self.config.step_time_s(
            prefill_tokens=plan.prefill_tokens,
            decode_seqs=plan.decode_seqs,
            decode_context_tokens=plan.decode_context_tokens,
        )
        jitter = self.config.step_jitter_frac
        if jitter:
            duration_s *= 1.0 + jitter * (2.0 * self._rng.random() - 1.0)
        self._step = plan
        self._step_end_s = t + duration_s

    def _end_step(self, t: float, events: list[Event]) -> None:
        plan, self._step = self._step, None
        assert plan is not None
        sampled, finished = self._scheduler.finish_step(plan, t)
        for tracked in sampled:
            request = tracked.request
            if tracked.num_output == 1:
                events.append(FirstTokenEvent(request.request_id, t))
            if request.emit_tokens:
                events.append(TokenEvent(request.request_id, tracked.num_output - 1, t))
        for tracked in finished:
            reason = FINISH_LENGTH if tracked.num_output >= tracked.request.max_tokens else FINISH_STOP
            events.append(FinishedEvent(self._record(tracked, reason, t)))
            del self._requests[tracked.request.request_id]
        self._needs_schedule = True
        self._check_drained()

    def _release_if_awake(self) -> None:
        if self._lifecycle.accepts_requests:
            self._scheduler.release_held()
        self._needs_schedule = True

    def _check_drained(self) -> None:
        if self._lifecycle.state == "draining" and not self._scheduler.has_work and self._step is None:
            self._lifecycle.drained(self._now_s)

    def _finish(self, tracked: TrackedRequest, reason: str, t: float) -> FinishedEvent:
        self._scheduler.remove(tracked)
        del self._requests[tracked.request.request_id]
        return FinishedEvent(self._record(tracked, reason, t))

    @staticmethod
    def _record(tracked: TrackedRequest, reason: str, finished_s: float) -> RequestRecord:
        request = tracked.request
        return RequestRecord(
            request_id=request.request_id,
            arrival_s=tracked.arrival_s,
            scheduled_s=tracked.scheduled_s,
            first_token_s=tracked.first_token_s,
            last_token_s=tracked.last_token_s,
            finished_s=finished_s,
            prompt_tokens=request.prompt_tokens,
            completion_tokens=tracked.num_output,
            max_tokens=request.max_tokens,
            priority=request.priority,
            finish_reason=reason,
            num_preemptions=tracked.num_preemptions,
        )
