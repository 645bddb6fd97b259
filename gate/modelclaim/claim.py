"""One model's lifecycle state, and the transitions its listeners see.

A ``ClaimState`` holds everything the core knows about one declared model: its phase and reason
(AIBrix's names), the engine instance it runs (if any), the engine operation in progress
(``op``: starting, waking, sleeping), the requests in flight, and the wake in progress.

Two transitions are reported to listeners, stamped with the caller's ``now_s``: a change of
(phase, reason, pod) closes the current interval as a ``StateInterval``, and the end of a wake
(ready, failed, timed out, stopped) becomes a ``WakeRecord``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from opentelemetry.trace import SpanContext

from restorelens.gate.modelclaim.actions import LifecycleListener, StateInterval, WakeRecord
from restorelens.gate.modelclaim.phases import FAILED, REASON_NOT_PLACED, SCHEDULING
from restorelens.gate.modelclaim.placement import ClaimSpec, GpuSlot

__all__ = [
    "OP_SLEEPING",
    "OP_STARTING",
    "OP_WAKING",
    "ClaimState",
    "ClaimStatus",
    "EngineInstance",
    "WakeInProgress",
]

#: The engine operation in progress (``ClaimState.op``); None when the engine is not being acted on.
OP_STARTING, OP_WAKING, OP_SLEEPING = "starting", "waking", "sleeping"
_INSTANCE_POD = object()  # set_state's default: the pod of the claim's current instance


@dataclass(slots=True)
class EngineInstance:
    """One engine instance the lifecycle started (ids are never reused, so stale reports are ignored)."""

    id: int
    pod: str
    gpus: tuple[GpuSlot, ...]
    url: str | None = None
    asleep: bool = False
    crashed: bool = False


@dataclass(slots=True)
class WakeInProgress:
    """A wake, start or move from when it was first wanted; becomes a ``WakeRecord`` when it ends."""

    requested_s: float
    triggers: list[SpanContext] = field(default_factory=list)
    path: str = "cold-start"
    pod: str = ""
    room_found_s: float | None = None
    wake_called_s: float | None = None
    from_pod: str | None = None
    neighbours: list[str] = field(default_factory=list)
    waiting_on: str | None = None  # the neighbour being slept to make room
    #: When the wake path under way began (the start or wake called, or the first neighbour's sleep
    #: for make-room): what a wake's duration is predicted and learnt from, so that time spent
    #: waiting for room, out a restart's backoff or on an attach does not count as the wake.
    path_started_s: float | None = None
    #: The wake span's identity, minted when the wake first started an engine (``WakeRecord.context``).
    context: SpanContext | None = None


@dataclass(frozen=True, slots=True)
class ClaimStatus:
    """A read-only view of one model, for the status endpoint and metrics."""

    model: str
    phase: str
    reason: str
    since_s: float
    pod: str | None
    gpus: tuple[int, ...]
    upstream_url: str | None
    in_flight: int
    idle_since_s: float
    restarts: int
    wake_path: str | None
    last_error: str = ""


@dataclass(slots=True)
class ClaimState:
    spec: ClaimSpec
    held_back: str | None  # the configuration reason that keeps it Pending for good
    phase: str = SCHEDULING
    reason: str = REASON_NOT_PLACED
    pod: str | None = None
    since_s: float = 0.0
    instance: EngineInstance | None = None
    op: str | None = None
    inflight: int = 0
    idle_since_s: float = 0.0
    wake: WakeInProgress | None = None
    restarts: int = 0
    restart_at_s: float | None = None
    last_error: str = ""  # the engine's last failure, for the 503 and the status while restarting or Failed
    sleep_refused_idle_since_s: float | None = None  # idle sleep refused (host RAM) for this idle period
    #: (wake path, engine ready time) of the last wake until a request is routed after it (a metric).
    ready_unserved: tuple[str, float] | None = None

    # --- queries -------------------------------------------------------------------------------

    @property
    def out_of_service(self) -> bool:
        """Held back by its declaration, or Failed: nothing happens until an operator acts."""
        return self.held_back is not None or self.phase == FAILED

    @property
    def routable(self) -> bool:
        inst = self.instance
        return inst is not None and not inst.asleep and not inst.crashed and self.op is None

    def current_instance(self, instance_id: int) -> EngineInstance | None:
        """The instance if ``instance_id`` is the one the claim runs now (a report about another is stale)."""
        inst = self.instance
        return inst if inst is not None and inst.id == instance_id else None

    def idle_sleep_at_s(self, sleep_after_s: float | None) -> float | None:
        """When the idle sleep is due; None while idle sleep is off, requests are in flight or a wake is wanted."""
        if sleep_after_s is None or self.inflight != 0 or self.wake is not None:
            return None
        return self.idle_since_s + sleep_after_s

    def status(self) -> ClaimStatus:
        inst, wake = self.instance, self.wake
        return ClaimStatus(
            model=self.spec.model,
            phase=self.phase,
            reason=self.reason,
            since_s=self.since_s,
            pod=self.pod,
            gpus=tuple(s.index for s in inst.gpus) if inst else (),
            upstream_url=inst.url if inst else None,
            in_flight=self.inflight,
            idle_since_s=self.idle_since_s,
            restarts=self.restarts,
            wake_path=wake.path if wake and wake.room_found_s is not None else None,
            last_error=self.last_error,
        )

    # --- transitions ---------------------------------------------------------------------------

    def want_wake(self, now_s: float, trigger: SpanContext | None) -> None:
        """Record that a wake is wanted; one per model, linked to the first request that wanted it."""
        if self.wake is None:
            self.wake = WakeInProgress(requested_s=now_s)
        if trigger is not None and not self.wake.triggers:
            self.wake.triggers.append(trigger)

    def set_state(
        self, phase: str, reason: str, now_s: float, listeners: Iterable[LifecycleListener], *,
        pod: object = _INSTANCE_POD,
    ) -> None:
        """Enter (phase, reason, pod); a change closes the current interval. ``pod`` defaults to the instance's."""
        new_pod = (self.instance.pod if self.instance else None) if pod is _INSTANCE_POD else pod
        assert new_pod is None or isinstance(new_pod, str)
        if (phase, reason, new_pod) == (self.phase, self.reason, self.pod):
            return
        self.close_interval(now_s, listeners)
        self.phase, self.reason, self.pod, self.since_s = phase, reason, new_pod, now_s  # type: ignore[assignment]

    def close_interval(self, now_s: float, listeners: Iterable[LifecycleListener]) -> None:
        """Report the interval in the current state up to ``now_s`` (nothing if it is empty)."""
        if now_s <= self.since_s:
            return
        interval = StateInterval(self.spec.model, self.phase, self.reason, self.pod, self.since_s, now_s)
        for listener in listeners:
            listener.on_state_interval(interval)

    def finish_wake(
        self, now_s: float, outcome: str, listeners: Iterable[LifecycleListener], *,
        ready_s: float | None = None, error: str = "",
    ) -> None:
        """End the wake in progress (if any) with ``outcome`` and report it."""
        wake = self.wake
        if wake is None:
            return
        self.wake = None
        record = WakeRecord(
            model=self.spec.model,
            path=wake.path,
            pod=wake.pod or (self.pod or ""),
            requested_s=wake.requested_s,
            end_s=now_s,
            outcome=outcome,
            room_found_s=wake.room_found_s,
            wake_called_s=wake.wake_called_s,
            path_started_s=wake.path_started_s,
            ready_s=ready_s,
            observed_s=now_s if outcome == "ready" else None,
            from_pod=wake.from_pod,
            neighbour=",".join(wake.neighbours) or None,
            triggers=tuple(wake.triggers),
            error=error,
            context=wake.context,
        )
        for listener in listeners:
            listener.on_wake_finished(record)
