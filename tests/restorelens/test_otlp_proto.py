"""The hand-written OTLP protobuf encoder writes exactly the SDK encoder's bytes.

Compared on spans made by the real SDK: several resources and scopes, remote and local parents,
links, events, statuses with and without a message, dropped counts past the SDK's limits, and every
attribute value type (hypothesis draws them). The official ``opentelemetry-proto`` definitions must
also parse the bytes back to the spans' fields.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
    set_span_in_context,
)

from restorelens import spans as S
from restorelens.otlp_proto import PAUSE_EVERY, SpanEncoder


def _provider(service: str, limits: SpanLimits | None = None) -> tuple[TracerProvider, InMemorySpanExporter]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service, "pod": 3}), span_limits=limits)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider, memory


def _assorted_spans() -> list[ReadableSpan]:
    gate, gate_spans = _provider("gate", SpanLimits(max_attributes=6, max_events=2, max_links=1,
                                                    max_event_attributes=1, max_link_attributes=1))
    client, client_spans = _provider("client")
    remote = set_span_in_context(NonRecordingSpan(
        SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1), trace_state=TraceState([("k", "v"), ("a", "b")]))
    ))
    tracer = gate.get_tracer("restorelens.gate", "1.2", schema_url="https://opentelemetry.io/schemas/1.21.0")
    other = gate.get_tracer("restorelens.other")
    for i in range(40):
        span = tracer.start_span(
            S.SPAN_GATE_REQUEST, context=remote if i % 2 else None, kind=SpanKind(i % 5),
            attributes={S.ATTR_REQUEST_ID: f"req-{i}", S.ATTR_TRAFFIC_CLASS: "interactive", S.ATTR_GATE_SLOT: i - 20,
                        S.ATTR_GATE_WAIT_S: i / 7, "flag": i % 3 == 0, "tags": ("a", "ü"), "ints": (1, -2**63),
                        "doubles": (0.5, -1e300), "bools": (True, False), "empty": "", "extra": 1},
            links=[Link(SpanContext(i + 1, i + 2, is_remote=i % 2 == 0), {"why": "restore", "n": i})] * (i % 3),
        )
        span.add_event(S.EVENT_GRANT_ACQUIRED, {S.ATTR_GATE_SLOT: i, "more": "x"})
        span.add_event(S.EVENT_UPSTREAM_FIRST_BYTE)
        span.add_event(S.EVENT_RETRY_WAIT, {})
        if i % 4 == 1:
            span.set_status(Status(StatusCode.ERROR, "upstream 503"))
        elif i % 4 == 2:
            span.set_status(Status(StatusCode.OK))
        elif i % 4 == 3:
            span.set_status(Status(StatusCode.ERROR))
        span.end()
        with other.start_as_current_span(S.SPAN_HTTP_POST, kind=SpanKind.CLIENT) as call:
            call.set_attribute(S.ATTR_HTTP_STATUS_CODE, 200)
    with client.get_tracer("loadgen").start_as_current_span(S.SPAN_CLIENT_REQUEST, attributes={"x": math.inf}):
        pass
    # interleaved: the groups keep the order each resource and scope first appears in
    mixed = [*gate_spans.get_finished_spans()]
    mixed.insert(3, client_spans.get_finished_spans()[0])
    return mixed


def test_the_bytes_are_the_sdk_encoders_bytes() -> None:
    spans = _assorted_spans()
    assert any(s.dropped_attributes for s in spans) and any(s.dropped_events for s in spans)
    assert any(s.dropped_links for s in spans)
    encoder = SpanEncoder()
    expected = encode_spans(spans).SerializeToString()
    assert encoder.encode(spans) == expected
    pauses: list[int] = []
    assert encoder.encode(spans, pause=lambda: pauses.append(1)) == expected  # again, from the caches
    assert len(pauses) == len(spans) // PAUSE_EVERY


def test_the_official_definitions_read_it_back() -> None:
    spans = _assorted_spans()
    request = ExportTraceServiceRequest.FromString(SpanEncoder().encode(spans))
    decoded = [(span.name, span.span_id, span.start_time_unix_nano, len(span.events))
               for resource in request.resource_spans for scope in resource.scope_spans for span in scope.spans]
    assert sorted(decoded) == sorted((s.name, s.context.span_id.to_bytes(8, "big"), s.start_time, len(s.events)) for s in spans)
    services = [dict((kv.key, kv.value.string_value) for kv in r.resource.attributes)[SERVICE_NAME] for r in request.resource_spans]
    assert services == ["gate", "client"]


def test_string_pairs_of_a_volatile_key_stop_being_cached() -> None:
    provider, memory = _provider("gate")
    tracer = provider.get_tracer("t")
    for i in range(600):
        tracer.start_span(S.SPAN_GATE_REQUEST, attributes={S.ATTR_REQUEST_ID: f"req-{i}", S.ATTR_TRAFFIC_CLASS: "batch"}).end()
    encoder = SpanEncoder()
    spans = memory.get_finished_spans()
    assert encoder.encode(spans) == encode_spans(spans).SerializeToString()
    cached_keys = {key for key, _ in encoder._pairs}
    assert S.ATTR_TRAFFIC_CLASS in cached_keys and S.ATTR_REQUEST_ID not in cached_keys


_scalars = st.one_of(
    st.text(max_size=40), st.booleans(), st.integers(min_value=-2**63, max_value=2**63 - 1),
    st.floats(allow_nan=False),
)
_values = st.one_of(
    _scalars,
    st.lists(st.text(max_size=10), max_size=4).map(tuple),
    st.lists(st.integers(min_value=-2**63, max_value=2**63 - 1), max_size=4).map(tuple),
    st.lists(st.floats(allow_nan=False), max_size=3).map(tuple),
    st.lists(st.booleans(), max_size=3).map(tuple),
)


@settings(max_examples=200, deadline=None)
@given(attributes=st.dictionaries(st.text(min_size=1, max_size=30), _values, max_size=8),
       name=st.text(max_size=300), description=st.text(max_size=200))
def test_any_attributes_encode_as_the_sdk_encodes_them(attributes: dict, name: str, description: str) -> None:
    provider, memory = _provider("gate")
    span = provider.get_tracer("t").start_span(name, attributes=attributes)
    span.add_event(name, attributes)
    span.set_status(Status(StatusCode.ERROR, description))
    span.end()
    spans = memory.get_finished_spans()
    assert SpanEncoder().encode(spans) == encode_spans(spans).SerializeToString()
