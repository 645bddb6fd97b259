"""Spans for the lifecycle: one ``modelclaim.state`` per state interval, one ``modelclaim.wake`` per wake.

A lifecycle listener: the core hands it finished intervals and wakes, stamped with the core's
``now_s``, and every timestamp on the spans comes from those (``start_time``, ``end_time``, event
``timestamp``), so a virtual-time run records the same spans at virtual times.

``modelclaim.wake`` starts when the wake was wanted (the first request, or the start) and carries
``room.found``, ``engine.wake_called``, ``engine.ready`` (the backend's ready time) and
``ready.observed`` (when the lifecycle began routing) as events, and a link to the request that
triggered it. A wake that did not end ready has status ERROR with the reason as description.

A wake that starts an engine needs its span's identity before the span exists (it is made when the
wake ends): ``new_wake_context`` mints one from the provider's own id generator, the start hands it
to the engine (``TRACEPARENT``) so the engine's startup spans are children of the wake's span, and
``on_wake_finished`` gives the span exactly that trace and span id.

Given the core (``core=``), each ``modelclaim.state`` also carries the memory the model's engine
holds in that state, as the lifecycle accounts it from the declared figures: GPU bytes
(``perGPU`` on each of its GPUs while it loads, runs or wakes, and while asleep with the wake
reserve; only ``sleeping_footprint`` asleep without it) and host RAM (the weights a level-1 sleep
moved there, from the sleep until the wake completes).
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from restorelens.clock import to_ns
from restorelens.gate.modelclaim.actions import StateInterval, WakeRecord
from restorelens.gate.modelclaim.phases import ACTIVATING, SLEEPING
from restorelens.spans import (
    ATTR_GEN_AI_REQUEST_MODEL,
    ATTR_MODELCLAIM_FROM_POD,
    ATTR_MODELCLAIM_GPU_BYTES,
    ATTR_MODELCLAIM_HOST_RAM_BYTES,
    ATTR_MODELCLAIM_NEIGHBOUR,
    ATTR_MODELCLAIM_PHASE,
    ATTR_MODELCLAIM_POD,
    ATTR_MODELCLAIM_REASON,
    ATTR_MODELCLAIM_WAKE_PATH,
    EVENT_ENGINE_READY,
    EVENT_ENGINE_WAKE_CALLED,
    EVENT_READY_OBSERVED,
    EVENT_ROOM_FOUND,
    SPAN_MODELCLAIM_STATE,
    SPAN_MODELCLAIM_WAKE,
)

__all__ = ["TRACER_NAME", "ModelClaimSpans"]

TRACER_NAME = "restorelens.gate.modelclaim"


class _PresetIds(IdGenerator):
    """The provider's ids, except for the next span when one was preset (a minted wake identity)."""

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner
        self.preset: SpanContext | None = None

    def generate_trace_id(self) -> int:
        return self.preset.trace_id if self.preset is not None else self.inner.generate_trace_id()

    def generate_span_id(self) -> int:
        # The SDK asks for the span id last (after the trace id of a root): the preset is spent here.
        preset, self.preset = self.preset, None
        return preset.span_id if preset is not None else self.inner.generate_span_id()

    def is_trace_id_random(self) -> bool:
        return self.inner.is_trace_id_random()


class ModelClaimSpans:
    """Turns the core's finished intervals and wakes into spans on ``tracer_provider``."""

    def __init__(self, tracer_provider: TracerProvider | None = None, *, core: Any = None) -> None:
        self._tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
        self.core = core
        # Only the SDK's tracer takes ids from a generator; without one no identity can be preset,
        # and a started engine is simply not told a trace.
        inner = getattr(self._tracer, "id_generator", None)
        self._ids = _PresetIds(inner) if isinstance(inner, IdGenerator) else None
        if self._ids is not None:
            self._tracer.id_generator = self._ids  # type: ignore[attr-defined]

    def new_wake_context(self) -> SpanContext | None:
        """A fresh identity for a wake's span (a root: its own trace), from the provider's generator."""
        if self._ids is None:
            return None
        inner = self._ids.inner
        return SpanContext(inner.generate_trace_id(), inner.generate_span_id(), is_remote=False,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))

    def held_bytes(self, interval: StateInterval) -> tuple[int, int] | None:
        """(GPU bytes, host RAM bytes) the model holds in ``interval``; None without the core."""
        core = self.core
        if core is None or interval.model not in core.claims_view():
            return None
        if not interval.pod:
            return 0, 0  # not placed (Pending, Scheduling, Failed): nothing held
        spec = core.claims_view()[interval.model].spec
        asleep = interval.phase == SLEEPING
        per_gpu = spec.sleeping_footprint_bytes if asleep and core.policy.no_wake_reserve_while_asleep else spec.per_gpu_bytes
        level1 = core.sleep_level == 1 and interval.phase in (SLEEPING, ACTIVATING)
        return per_gpu * spec.tensor_parallel, spec.weight_bytes if level1 else 0

    def on_state_interval(self, interval: StateInterval) -> None:
        attributes: dict[str, Any] = {
            ATTR_MODELCLAIM_PHASE: interval.phase,
            ATTR_MODELCLAIM_REASON: interval.reason,
            ATTR_GEN_AI_REQUEST_MODEL: interval.model,
        }
        if interval.pod:
            attributes[ATTR_MODELCLAIM_POD] = interval.pod
        held = self.held_bytes(interval)
        if held is not None:
            attributes[ATTR_MODELCLAIM_GPU_BYTES], attributes[ATTR_MODELCLAIM_HOST_RAM_BYTES] = held
        span = self._tracer.start_span(
            SPAN_MODELCLAIM_STATE,
            context=trace.set_span_in_context(trace.INVALID_SPAN),  # a root: not under whatever request is current
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=to_ns(interval.start_s),
        )
        span.end(end_time=to_ns(interval.end_s))

    def on_wake_finished(self, record: WakeRecord) -> None:
        attributes: dict[str, str] = {
            ATTR_MODELCLAIM_WAKE_PATH: record.path,
            ATTR_GEN_AI_REQUEST_MODEL: record.model,
        }
        if record.pod:
            attributes[ATTR_MODELCLAIM_POD] = record.pod
        if record.from_pod:
            attributes[ATTR_MODELCLAIM_FROM_POD] = record.from_pod
        if record.neighbour:
            attributes[ATTR_MODELCLAIM_NEIGHBOUR] = record.neighbour
        if record.context is not None and self._ids is not None:
            self._ids.preset = record.context
        span = self._tracer.start_span(
            SPAN_MODELCLAIM_WAKE,
            context=trace.set_span_in_context(trace.INVALID_SPAN),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=[Link(ctx) for ctx in record.triggers if ctx.is_valid],
            start_time=to_ns(record.requested_s),
        )
        if self._ids is not None:
            self._ids.preset = None  # a tracer that made no span (disabled) must not pass it on
        for name, at_s in (
            (EVENT_ROOM_FOUND, record.room_found_s),
            (EVENT_ENGINE_WAKE_CALLED, record.wake_called_s),
            (EVENT_ENGINE_READY, record.ready_s),
            (EVENT_READY_OBSERVED, record.observed_s),
        ):
            if at_s is not None:
                span.add_event(name, timestamp=to_ns(at_s))
        if record.outcome != "ready":
            span.set_status(Status(StatusCode.ERROR, record.error or record.outcome))
        span.end(end_time=to_ns(record.end_s))
