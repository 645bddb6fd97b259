"""The columnar protobuf decoder gives exactly the rows, rejections and reasons of the span-by-span one."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.decode_proto import decode_traces_proto
from restorelens.collector.proto_columns import decode_traces_proto_columns
from restorelens.collector.rows import ARROW_SCHEMA, DICT_SCHEMA, PayloadError, SpanRows, plain_resources

PROPERTY = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

# Mostly valid values, with the edge cases each check looks at: wrong lengths, all zeros, out of range.
_trace_ids = st.one_of(st.binary(min_size=16, max_size=16), st.sampled_from([b"", bytes(16), b"\x01" * 15]))
_span_ids = st.one_of(st.binary(min_size=8, max_size=8), st.sampled_from([b"", bytes(8), b"\x01" * 9]))
_nanos = st.one_of(st.integers(0, 2**63 - 1), st.sampled_from([0, 2**63 - 1, 2**63, 2**64 - 1]))
_enums = st.one_of(st.integers(0, 5), st.integers(-3, 9))
_texts = st.text(max_size=12)
_floats = st.floats(allow_nan=True, allow_infinity=True)
_scalars = st.one_of(
    st.tuples(st.just("string_value"), _texts),
    st.tuples(st.just("int_value"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("double_value"), _floats),
    st.tuples(st.just("bool_value"), st.booleans()),
    st.tuples(st.just("bytes_value"), st.binary(max_size=8)),
    st.tuples(st.just("empty"), st.none()),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.tuples(st.just("array_value"), st.lists(inner, max_size=3))
    | st.tuples(st.just("kvlist_value"), st.lists(st.tuples(_texts, inner), max_size=3)),
    max_leaves=6,
)
# Few distinct keys, so duplicate keys in one list (the last wins) come up often.
_attributes = st.lists(st.tuples(st.sampled_from(["a", "b", SERVICE_NAME, "é"]), _values), max_size=4)


def _set_value(target: AnyValue, value: tuple[str, Any]) -> None:
    which, raw = value
    if which == "empty":
        return
    if which == "array_value":
        target.array_value.SetInParent()
        for item in raw:
            _set_value(target.array_value.values.add(), item)
    elif which == "kvlist_value":
        target.kvlist_value.SetInParent()
        for key, item in raw:
            kv = target.kvlist_value.values.add()
            kv.key = key
            _set_value(kv.value, item)
    else:
        setattr(target, which, raw)


def _set_attributes(container: Any, attributes: list[tuple[str, tuple[str, Any]]]) -> None:
    for key, value in attributes:
        kv: KeyValue = container.add()
        kv.key = key
        _set_value(kv.value, value)


_events = st.lists(st.tuples(_nanos, _texts, _attributes), max_size=2)
_links = st.lists(st.tuples(_trace_ids, _span_ids, _texts, _attributes), max_size=2)
_spans = st.fixed_dictionaries(
    {
        "trace_id": _trace_ids,
        "span_id": _span_ids,
        "parent_span_id": st.one_of(st.binary(min_size=8, max_size=8), st.sampled_from([b"", bytes(8), b"\x02"])),
        "trace_state": _texts,
        "name": _texts,
        "kind": _enums,
        "start_time_unix_nano": _nanos,
        "end_time_unix_nano": _nanos,
    }
).flatmap(
    lambda fields: st.tuples(
        st.just(fields), _attributes, _events, _links, st.tuples(st.integers(-1, 4), _texts)
    )
)
_scopes = st.tuples(_texts, _texts, st.lists(_spans, max_size=4))
_resources = st.tuples(_attributes, st.lists(_scopes, max_size=3))
_requests = st.lists(_resources, max_size=3)


def _build(resources: list[Any]) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    for resource_attributes, scopes in resources:
        rs = request.resource_spans.add()
        _set_attributes(rs.resource.attributes, resource_attributes)
        for scope_name, scope_version, spans in scopes:
            ss = rs.scope_spans.add()
            ss.scope.name, ss.scope.version = scope_name, scope_version
            for fields, attributes, events, links, (code, message) in spans:
                span = ss.spans.add(**fields)
                _set_attributes(span.attributes, attributes)
                for time_ns, name, event_attributes in events:
                    event = span.events.add(time_unix_nano=time_ns, name=name)
                    _set_attributes(event.attributes, event_attributes)
                for trace_id, span_id, trace_state, link_attributes in links:
                    link = span.links.add(trace_id=trace_id, span_id=span_id, trace_state=trace_state)
                    _set_attributes(link.attributes, link_attributes)
                span.status.code, span.status.message = code, message
    return request


def _both(data: bytes, where: str = "") -> tuple[SpanRows, SpanRows]:
    reference, columnar = SpanRows(), SpanRows()
    decode_traces_proto(data, reference, where)
    decode_traces_proto_columns(data, columnar, where)
    return reference, columnar


def _assert_same(reference: SpanRows, columnar: SpanRows) -> None:
    assert (columnar.rejected, columnar.errors) == (reference.rejected, reference.errors)
    expected, actual = reference.to_arrow(), columnar.to_arrow()
    assert expected.schema == ARROW_SCHEMA and actual.schema == (DICT_SCHEMA if columnar.tables else ARROW_SCHEMA)
    actual = plain_resources(actual)
    # NaN attribute strings compare equal; rows are compared as Python values for a readable diff.
    assert actual.to_pylist() == expected.to_pylist()
    assert actual.equals(expected)


@PROPERTY
@given(_requests)
def test_generated_requests_decode_identically(resources: list[Any]) -> None:
    data = _build(resources).SerializeToString()
    _assert_same(*_both(data, "f:1: "))


@PROPERTY
@given(st.binary(max_size=64))
def test_arbitrary_bytes_are_refused_or_decoded_identically(data: bytes) -> None:
    try:
        reference, columnar = _both(data)
    except PayloadError:
        with pytest.raises(PayloadError):
            decode_traces_proto_columns(data, SpanRows())
        return
    _assert_same(reference, columnar)


def test_rows_before_a_table_keep_their_place_so_the_first_copy_still_wins() -> None:
    request = _build([([], [("s", "1", [({"trace_id": b"\x01" * 16, "span_id": b"\x02" * 8}, [], [], [], (0, ""))])])])
    rows = SpanRows()
    decode_traces_proto(request.SerializeToString(), rows)
    decode_traces_proto_columns(request.SerializeToString(), rows)
    decode_traces_proto(request.SerializeToString(), rows)
    table = rows.to_arrow()
    assert len(rows) == table.num_rows == 3 and isinstance(table, pa.Table)
    assert len(rows.rows) == 1 and len(rows.tables) == 2  # the first row was turned into a table, in order
    # a table of plain maps and one with a dictionary of resource maps join as one, values intact
    assert table.schema == DICT_SCHEMA
    reference = SpanRows()
    for _ in range(3):
        decode_traces_proto(request.SerializeToString(), reference)
    assert table.to_pylist() == reference.to_arrow().to_pylist()


def test_a_request_of_rejected_spans_adds_no_table() -> None:
    request = _build([([], [("s", "", [({"trace_id": b"", "span_id": b"\x02" * 8}, [], [], [], (0, ""))])])])
    rows = SpanRows()
    decode_traces_proto_columns(request.SerializeToString(), rows)
    assert (len(rows), rows.tables, rows.rejected) == (0, [], 1)
    assert rows.errors == ["resource_spans[0].scope_spans[0].spans[0]: trace_id is missing"]


def _not_utf8_request(where: str) -> bytes:
    """Three spans, the second holding a string that is not UTF-8 at ``where`` (every string field
    a span, its scope or its resource has); "BAD!" is made \\xff + "AD!" in the serialized bytes."""
    request = ExportTraceServiceRequest()
    for r in range(2):
        rs = request.resource_spans.add()
        rs.resource.attributes.add(key=SERVICE_NAME).value.string_value = "BAD!" if where == "resource" and r else "svc"
        ss = rs.scope_spans.add()
        ss.scope.name = "BAD!" if where == "scope name" and r else "s"
        ss.scope.version = "BAD!" if where == "scope version" and r else "1"
        for i in range(3 if r == 0 else 1):
            bad = r == 0 and i == 1
            span = ss.spans.add(trace_id=b"\x01" * 16, span_id=bytes([r + 1, i + 1]) * 4, name="n",
                                start_time_unix_nano=1, end_time_unix_nano=2)
            mark = "BAD!" if bad else "ok"
            if where == "name":
                span.name = mark
            if where == "trace_state":
                span.trace_state = mark
            if where == "status message":
                span.status.message = mark
            if where == "attribute key":
                span.attributes.add(key=mark).value.int_value = 1
            if where == "array value":
                span.attributes.add(key="a").value.array_value.values.add().string_value = mark
            if where == "event name":
                span.events.add(time_unix_nano=1, name=mark)
            if where == "link attribute":
                link = span.links.add(trace_id=b"\x02" * 16, span_id=b"\x03" * 8)
                link.attributes.add(key="k").value.string_value = mark
    return request.SerializeToString().replace(b"BAD!", b"\xffAD!")


@pytest.mark.parametrize("where", ["name", "trace_state", "status message", "attribute key", "array value",
                                   "event name", "link attribute", "resource", "scope name", "scope version"])
def test_a_string_not_utf8_rejects_its_span_or_resource_or_scope_alone_on_both_decoders(where: str) -> None:
    from restorelens.collector.proto_columns import native_table

    data = _not_utf8_request(where)
    assert native_table(data) is None  # the compiled decoder declines it; the Python walk decides
    reference, columnar = _both(data, "f:1: ")
    _assert_same(reference, columnar)
    assert reference.rejected == 1 and len(reference) == 3
    assert "a string field is not UTF-8" in reference.errors[0]
    assert reference.errors[0].startswith("f:1: resource_spans[1]" if where.startswith(("resource", "scope"))
                                          else "f:1: resource_spans[0].scope_spans[0].spans[1]")
