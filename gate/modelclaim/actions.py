"""What the lifecycle core asks its shell to do, and what it reports to its listeners.

The core never performs I/O: each of its methods returns a list of actions (start, wake, sleep,
stop an engine instance); the shell performs them through an engine backend and reports the
outcome back (``on_engine_ready``, ``on_engine_slept``, ``on_engine_failed``). Instance ids make
stale reports harmless: a report about an instance the claim no longer runs is ignored.

Listeners (spans, metrics) receive finished ``StateInterval`` and ``WakeRecord`` values, stamped
with the core's ``now_s`` so virtual runs record virtual times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry.trace import SpanContext

__all__ = [
    "Action",
    "LifecycleListener",
    "ServedAfterWake",
    "SleepEngine",
    "StartEngine",
    "StateInterval",
    "StopEngine",
    "WakeEngine",
    "WakeEnds",
    "WakeRecord",
]


@dataclass(frozen=True, slots=True)
class StartEngine:
    """Start a new engine instance (process start, or attach to a running engine) and load it."""

    model: str
    instance_id: int
    pod: str
    gpus: tuple[int, ...]
    #: The ``modelclaim.wake`` span this start belongs to, when a listener minted one
    #: (``new_wake_context``): the backend hands it to the engine so its startup spans join the
    #: wake's trace. Not part of the action's identity.
    trace: SpanContext | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class WakeEngine:
    """Wake a sleeping instance (vLLM ``POST /wake_up``)."""

    model: str
    instance_id: int
    pod: str


@dataclass(frozen=True, slots=True)
class SleepEngine:
    """Put an idle instance to sleep (vLLM ``POST /sleep?level=N``)."""

    model: str
    instance_id: int
    pod: str
    level: int = 1


@dataclass(frozen=True, slots=True)
class StopEngine:
    """Stop an instance for good (it moved, or the lifecycle shuts down)."""

    model: str
    instance_id: int
    pod: str


Action = StartEngine | WakeEngine | SleepEngine | StopEngine


@dataclass(frozen=True, slots=True)
class StateInterval:
    """A model spent ``[start_s, end_s)`` in one (phase, reason, pod)."""

    model: str
    phase: str
    reason: str
    pod: str | None
    start_s: float
    end_s: float


@dataclass(frozen=True, slots=True)
class WakeRecord:
    """One wake, start or move of a model's engine, from the moment it was wanted to its end.

    ``ready_s`` is when the backend said the engine was ready (its answer, or the first poll that
    saw it); ``observed_s`` is when the lifecycle took that in and began routing. They differ by the
    polling and reporting delay, and the difference is exactly what a client cannot see.
    """

    model: str
    path: str
    pod: str
    requested_s: float
    end_s: float
    outcome: str
    room_found_s: float | None = None
    wake_called_s: float | None = None
    #: When the path that ended it began (``WakeInProgress.path_started_s``).
    path_started_s: float | None = None
    ready_s: float | None = None
    observed_s: float | None = None
    from_pod: str | None = None
    neighbour: str | None = None
    triggers: tuple[SpanContext, ...] = ()
    error: str = ""
    #: The identity the wake's span must take (minted before the engine was started with it).
    context: SpanContext | None = None


@dataclass(frozen=True, slots=True)
class ServedAfterWake:
    """The first request routed to a model after a wake: ``routed_s - ready_s`` is how long the
    ready engine waited for its clients (their Retry-After overshoot, seen from the gateway)."""

    model: str
    path: str
    ready_s: float
    routed_s: float


class WakeEnds:
    """A listener that only wants wakes ending: calls ``callback(record)`` (held requests wait on it)."""

    def __init__(self, callback: Callable[[WakeRecord], None]) -> None:
        self.on_wake_finished = callback

    def on_state_interval(self, interval: StateInterval) -> None:
        pass


class LifecycleListener(Protocol):
    def on_state_interval(self, interval: StateInterval) -> None: ...

    def on_wake_finished(self, record: WakeRecord) -> None: ...

    # Optional: ``on_served_after_wake(self, served: ServedAfterWake) -> None`` (called when present),
    # and ``new_wake_context(self) -> SpanContext | None``: the identity a wake's span will take, asked
    # for when the wake starts an engine, so the engine can be told its trace before the span exists.
