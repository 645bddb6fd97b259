"""Lifecycle spans and metrics from a virtual-time run: virtual timestamps, events, links, labels."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags
from prometheus_client import CollectorRegistry, generate_latest

from restorelens.clock import to_ns
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.metrics import ModelClaimMetrics
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.spans import ModelClaimSpans
from restorelens.gate.modelclaim.virtual import VirtualLifecycle
from restorelens.spans import (
    ATTR_GEN_AI_REQUEST_MODEL,
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

GIB = 2**30
T0 = 5_000.0
TRIGGER = SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def run_make_room(tracer_provider):  # noqa: ANN001, ANN201
    policy = PoolPolicy(sleep_after_s=60, no_wake_reserve_while_asleep=True)
    claims = [ClaimSpec(m, 12 * GIB, 4 * GIB, weight_bytes=8 * GIB) for m in ("a", "b")]
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], claims, policy)
    metrics = ModelClaimMetrics(core)
    core.listeners.extend([ModelClaimSpans(tracer_provider), metrics])
    backend = InProcessBackend(lambda model, pod: FixedLatencyEngine(30.0, 4.0, 0.5))
    life = VirtualLifecycle(core, backend, poll_interval_s=1.5)
    life.start(T0)
    life.advance_to(T0 + 160)  # a: ready 30 (observed 30), slept 90; b: placed 90.5, observed ready 120.5
    life.route("a", T0 + 160, trigger=TRIGGER)  # b idle >= 30 s: slept; a wakes
    life.advance_to(T0 + 170)
    return life, metrics


def test_wake_span_has_virtual_times_events_link_and_path(tracer_provider, span_exporter: InMemorySpanExporter) -> None:  # noqa: ANN001
    run_make_room(tracer_provider)
    wakes = [s for s in span_exporter.get_finished_spans() if s.name == SPAN_MODELCLAIM_WAKE]
    assert [(w.attributes[ATTR_GEN_AI_REQUEST_MODEL], w.attributes[ATTR_MODELCLAIM_WAKE_PATH]) for w in wakes] == [
        ("a", "cold-start"), ("b", "cold-start"), ("a", "make-room")]
    wake = wakes[-1]
    assert wake.start_time == to_ns(T0 + 160)
    assert wake.attributes[ATTR_MODELCLAIM_NEIGHBOUR] == "b"
    assert wake.attributes[ATTR_MODELCLAIM_POD] == "p1"
    events = {e.name: e.timestamp for e in wake.events}
    # b's sleep completes at 160.5: room found, wake called; ready 4 s later, observed then: the wake call's own
    # answer says awake (the 1.5-s polls are for starts: a's and b's cold starts above).
    assert events == {
        EVENT_ROOM_FOUND: to_ns(T0 + 160.5),
        EVENT_ENGINE_WAKE_CALLED: to_ns(T0 + 160.5),
        EVENT_ENGINE_READY: to_ns(T0 + 164.5),
        EVENT_READY_OBSERVED: to_ns(T0 + 164.5),
    }
    assert wake.end_time == to_ns(T0 + 164.5)
    assert [link.context.span_id for link in wake.links] == [0x5678]
    assert wake.parent is None


def test_state_spans_cover_each_interval(tracer_provider, span_exporter: InMemorySpanExporter) -> None:  # noqa: ANN001
    run_make_room(tracer_provider)
    states = [
        (s.attributes[ATTR_MODELCLAIM_PHASE], s.attributes[ATTR_MODELCLAIM_REASON],
         (s.start_time - to_ns(T0)) / 1e9, (s.end_time - to_ns(T0)) / 1e9)
        for s in span_exporter.get_finished_spans()
        if s.name == SPAN_MODELCLAIM_STATE and s.attributes[ATTR_GEN_AI_REQUEST_MODEL] == "a"
    ]
    assert states == [
        ("Loading", "EngineStarting", 0.0, 30.0),
        ("Active", "ModelClaimActive", 30.0, 90.0),
        ("Sleeping", "EngineSleeping", 90.0, 160.0),
        ("Sleeping", "WaitingForRoom", 160.0, 160.5),
        ("Activating", "EngineSleeping", 160.5, 164.5),
    ]


def test_metrics_expose_phases_wakes_durations_and_memory(tracer_provider) -> None:  # noqa: ANN001
    life, metrics = run_make_room(tracer_provider)
    registry = CollectorRegistry()
    metrics.register(registry)
    value = registry.get_sample_value
    assert value("restorelens_modelclaim_phase", {"model": "a", "phase": "Active", "reason": "ModelClaimActive"}) == 1
    assert value("restorelens_modelclaim_phase", {"model": "b", "phase": "Sleeping", "reason": "EngineSleeping"}) == 1
    assert value("restorelens_modelclaim_wakes_total", {"model": "a", "path": "make-room", "outcome": "ready"}) == 1
    assert value("restorelens_modelclaim_wakes_total", {"model": "b", "path": "cold-start", "outcome": "ready"}) == 1
    assert value("restorelens_modelclaim_wake_duration_seconds_sum", {"path": "make-room"}) == 4.5
    assert value("restorelens_modelclaim_gpu_memory_bytes", {"pod": "p1", "gpu": "0", "kind": "accounted"}) == 16 * GIB
    assert value("restorelens_modelclaim_gpu_memory_bytes", {"pod": "p1", "gpu": "0", "kind": "capacity"}) == 24 * GIB
    assert value("restorelens_modelclaim_host_memory_bytes", {"node": "p1", "kind": "accounted"}) == 8 * GIB
    assert "restorelens_modelclaim_host_ram_refusals_total 0.0" in generate_latest(registry).decode()


def test_a_started_engine_is_given_the_identity_its_wake_span_takes(tracer_provider, span_exporter: InMemorySpanExporter) -> None:  # noqa: ANN001
    """The wake span is made when the wake ends; the engine it started was told its trace at the start."""
    life, _ = run_make_room(tracer_provider)
    starts = [action for _, action in life.performed if type(action).__name__ == "StartEngine"]
    wakes = [s for s in span_exporter.get_finished_spans() if s.name == SPAN_MODELCLAIM_WAKE]
    started = [w for w in wakes if w.attributes[ATTR_MODELCLAIM_WAKE_PATH] == "cold-start"]
    assert [(a.trace.trace_id, a.trace.span_id) for a in starts] == [
        (w.context.trace_id, w.context.span_id) for w in started]
    assert all(w.parent is None for w in wakes)
    # Each wake is its own trace, the in-place one (no start, nothing minted) included.
    assert len({w.context.trace_id for w in wakes}) == len(wakes) == 3
    # Spans made after a minted one take fresh ids again.
    others = [s for s in span_exporter.get_finished_spans() if s.name == SPAN_MODELCLAIM_STATE]
    assert not {s.context.span_id for s in others} & {w.context.span_id for w in wakes}


def test_without_spans_no_identity_is_minted() -> None:
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("a", 12 * GIB, 4 * GIB)], PoolPolicy(sleep_after_s=60))
    life = VirtualLifecycle(core, InProcessBackend(lambda model, pod: FixedLatencyEngine(30.0, 4.0, 0.5)))
    life.start(T0)
    assert [action.trace for _, action in life.performed] == [None]
