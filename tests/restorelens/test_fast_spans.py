"""FastTracer's spans are the SDK's spans for the same calls, as the span processors receive them."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    NoOpTracerProvider,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    set_span_in_context,
)

from restorelens import spans as S
from restorelens.fast_spans import FastSpan, FastTracer
from restorelens.otlp_proto import SpanEncoder


def _provider(**options: object) -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "gate"}), **options)  # type: ignore[arg-type]
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def _emit(tracer: object, parent: object) -> None:
    """The same calls, the way the gate makes them, on either tracer."""
    span = tracer.start_span(S.SPAN_GATE_REQUEST, context=parent, kind=SpanKind.SERVER,  # type: ignore[attr-defined]
                             attributes={S.ATTR_REQUEST_ID: "r1", S.ATTR_TRAFFIC_CLASS: "batch"}, start_time=1_000,
                             links=[Link(SpanContext(5, 6, is_remote=True), {"why": "x"})])
    span.set_attributes({S.ATTR_GATE_DECISION: "admitted", S.ATTR_GATE_SLOT: 2, S.ATTR_GATE_WAIT_S: 0.25})
    span.add_event(S.EVENT_GRANT_ACQUIRED, {S.ATTR_GATE_SLOT: 2}, timestamp=1_500)
    span.set_attribute(S.ATTR_HTTP_RETRY_AFTER, ["1"])
    try:
        raise ConnectionError("engine gone")
    except ConnectionError as exc:
        span.record_exception(exc, timestamp=1_700)
    span.set_status(Status(StatusCode.ERROR, "ConnectionError: engine gone"))
    span.update_name(S.SPAN_GATE_REQUEST)
    span.end(end_time=2_000)
    span.set_attribute(S.ATTR_GATE_SLOT, 9)  # after the end: ignored by both
    span.add_event("late")


def _fields(span: ReadableSpan) -> dict:
    return {
        "name": span.name, "kind": span.kind, "attributes": dict(span.attributes),
        "events": [(e.name, e.timestamp, {k: v for k, v in e.attributes.items() if k != "exception.stacktrace"})
                   for e in span.events],
        "links": [(link.context, dict(link.attributes)) for link in span.links],
        "status": (span.status.status_code, span.status.description), "times": (span.start_time, span.end_time),
        "parent": span.parent, "trace": span.context.trace_id, "flags": span.context.trace_flags,
        "scope": span.instrumentation_scope, "resource": span.resource,
    }


def test_a_fast_span_is_the_sdk_span_of_the_same_calls() -> None:
    provider, memory = _provider()
    sdk_tracer = provider.get_tracer("restorelens.gate")
    parent = set_span_in_context(NonRecordingSpan(SpanContext(0xAB, 0xCD, is_remote=True, trace_flags=TraceFlags(1))))
    _emit(sdk_tracer, parent)
    _emit(FastTracer(sdk_tracer), parent)
    reference, fast = memory.get_finished_spans()
    assert _fields(fast) == _fields(reference)
    assert fast.context.span_id != reference.context.span_id
    # and the encoder writes the same message for it as the SDK's encoder
    assert SpanEncoder().encode([fast, reference]) == encode_spans([fast, reference]).SerializeToString()


def test_the_providers_sampler_decides() -> None:
    provider, memory = _provider(sampler=ALWAYS_OFF)
    span = FastTracer(provider.get_tracer("t")).start_span(S.SPAN_GATE_REQUEST)
    assert not span.is_recording() and not span.get_span_context().trace_flags.sampled
    span.end()
    provider, memory = _provider(sampler=ParentBased(TraceIdRatioBased(1.0)))
    unsampled = set_span_in_context(NonRecordingSpan(SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(0))))
    child = FastTracer(provider.get_tracer("t")).start_span(S.SPAN_HTTP_POST, context=unsampled)
    assert not child.is_recording() and child.get_span_context().trace_id == 1
    child.end()
    assert memory.get_finished_spans() == ()


def test_ok_is_final_and_a_span_ends_once() -> None:
    provider, memory = _provider()
    span = FastTracer(provider.get_tracer("t")).start_span(S.SPAN_GATE_REQUEST)
    assert isinstance(span, FastSpan)
    span.set_status(StatusCode.OK)
    span.set_status(Status(StatusCode.ERROR, "later"))
    span.end()
    span.end()
    [finished] = memory.get_finished_spans()
    assert finished.status.status_code is StatusCode.OK


def test_another_provider_gets_its_own_spans() -> None:
    tracer = FastTracer(NoOpTracerProvider().get_tracer("t"))
    span = tracer.start_span(S.SPAN_GATE_REQUEST)
    assert not isinstance(span, FastSpan) and not span.is_recording()
