"""The compiled protobuf decoder gives the Python walk's table, or hands the message to it.

``native_table`` must either return exactly what ``decode_traces_proto_columns`` makes of the
message parsed by upb, or None. These tests check both halves: that it takes the messages it is
for (otherwise the equality would hold vacuously) and that the wire format's freedoms (fields in
any order, repeated fields interleaved, singular fields given twice, unknown fields) and damaged
bytes never make it disagree with upb.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.decode_proto import parse_traces_proto
from restorelens.collector.proto_columns import decode_traces_proto_columns, native_table
from restorelens.collector.rows import DICT_SCHEMA, PayloadError, SpanRows, plain_resources
from tests.collector.test_proto_columns import _build, _requests

PROPERTY = settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

_ids16 = st.binary(min_size=16, max_size=16).filter(any)
_ids8 = st.binary(min_size=8, max_size=8).filter(any)
_nanos = st.integers(0, 2**63 - 1)
_texts = st.text(max_size=12)
_scalars = st.one_of(
    st.tuples(st.just("string_value"), _texts),
    st.tuples(st.just("int_value"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("double_value"), st.floats(allow_nan=True, allow_infinity=True)),
    st.tuples(st.just("bool_value"), st.booleans()),
    st.tuples(st.just("bytes_value"), st.binary(max_size=8)),
    st.tuples(st.just("empty"), st.none()),
)
_attributes = st.lists(st.tuples(st.sampled_from(["a", "b", SERVICE_NAME, "é", ""]), _scalars), max_size=5)
_spans = st.fixed_dictionaries(
    {
        "trace_id": _ids16,
        "span_id": _ids8,
        "parent_span_id": st.one_of(_ids8, st.sampled_from([b"", bytes(8)])),
        "trace_state": _texts,
        "name": _texts,
        "kind": st.integers(0, 5),
        "start_time_unix_nano": _nanos,
        "end_time_unix_nano": _nanos,
    }
).flatmap(
    lambda fields: st.tuples(
        st.just(fields),
        _attributes,
        st.lists(st.tuples(_nanos, _texts, _attributes), max_size=2),
        st.lists(st.tuples(_ids16, _ids8, _texts, _attributes), max_size=2),
        st.tuples(st.integers(0, 2), _texts),
    )
)
#: Messages the compiled decoder is for: valid ids and times, scalar attribute values.
_valid_requests = st.lists(st.tuples(_attributes, st.lists(st.tuples(_texts, _texts, st.lists(_spans, max_size=4)),
                                                           max_size=3)), max_size=3)


def _python(data: bytes) -> Any:
    """The Python walk over upb's parse: its table, or PayloadError's type when upb refuses the bytes."""
    rows = SpanRows()
    try:
        decode_traces_proto_columns(parse_traces_proto(data), rows)
    except PayloadError:
        return PayloadError
    return rows


def _assert_agrees(data: bytes) -> bool:
    """native_table agrees with the Python walk on ``data``; True when it decoded the message itself."""
    table = native_table(data)
    expected = _python(data)
    if table is None:
        return False
    assert expected is not PayloadError, "the compiled decoder took bytes upb refuses"
    assert expected.rejected == 0, "the compiled decoder took a message with a span the Python walk rejects"
    assert table.schema == DICT_SCHEMA
    assert table.to_pylist() == expected.to_arrow().to_pylist()
    assert plain_resources(table).equals(plain_resources(expected.to_arrow()))
    if expected.tables:  # the dictionary of resource maps as the Python walk builds it
        assert table.equals(expected.to_arrow())
    return True


@PROPERTY
@given(_valid_requests)
def test_valid_messages_are_decoded_natively_and_identically(resources: list[Any]) -> None:
    assert _assert_agrees(_build(resources).SerializeToString())


@PROPERTY
@given(_requests)
def test_any_generated_message_is_decoded_identically_or_handed_over(resources: list[Any]) -> None:
    _assert_agrees(_build(resources).SerializeToString())


# --- the wire format's freedoms ------------------------------------------------------------------

def _fields(data: bytes) -> list[tuple[int, bytes]]:
    """(field number, the field's whole encoding) for each top-level field of a message."""
    out, i = [], 0
    while i < len(data):
        start = i
        tag, i = _varint(data, i)
        wire = tag & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            length, i = _varint(data, i)
            i += length
        out.append((tag >> 3, data[start:i]))
    return out


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _shuffled(message: Any, rng: random.Random) -> bytes:
    """``message`` serialized with the fields of every level in a random order (repeated fields'
    own elements keep theirs), some singular fields given twice (upb: the last wins, messages merge)."""
    if isinstance(message, ExportTraceServiceRequest):
        parts = [_len_field(1, _shuffled(rs, rng)) for rs in message.resource_spans]
        return b"".join(parts)
    if isinstance(message, ResourceSpans):
        fields = [(1, message.resource.SerializeToString())] if message.HasField("resource") else []
        fields += [(2, _shuffled(ss, rng)) for ss in message.scope_spans]
        return _interleave([(n, _len_field(n, payload)) for n, payload in fields], rng)
    if isinstance(message, ScopeSpans):
        fields = [(1, _len_field(1, message.scope.SerializeToString()))] if message.HasField("scope") else []
        fields += [(2, _len_field(2, span.SerializeToString())) for span in message.spans]
        return _interleave(fields, rng)
    assert isinstance(message, Span)
    fields = _fields(message.SerializeToString())
    repeated = [f for f in fields if f[0] in (9, 11, 13)]
    singular = [f for f in fields if f[0] not in (9, 11, 13)]
    if singular and rng.random() < 0.5:
        # an earlier copy of a singular field with another value: the later one must win
        number, encoding = rng.choice(singular)
        decoy = Span(name="decoy", kind=1, start_time_unix_nano=5, trace_state="decoy", status={"message": "decoy"})
        earlier = [e for n, e in _fields(decoy.SerializeToString()) if n == number]
        singular = [(number, e) for e in earlier] + singular
    unknown = [(99, _encode_varint(99 << 3 | 0) + _encode_varint(7)), (98, _encode_varint(98 << 3 | 5) + bytes(4))]
    return _interleave(singular + repeated + unknown[: rng.randint(0, 2)], rng)


def _interleave(fields: list[tuple[int, bytes]], rng: random.Random) -> bytes:
    """A random order that keeps each field number's own elements in order (list order matters),
    and keeps an earlier copy of a singular field before the later one."""
    queues: dict[int, list[bytes]] = {}
    for number, encoding in fields:
        queues.setdefault(number, []).append(encoding)
    out = []
    while queues:
        number = rng.choice(sorted(queues))
        out.append(queues[number].pop(0))
        if not queues[number]:
            del queues[number]
    return b"".join(out)


@PROPERTY
@given(_valid_requests, st.integers(0, 2**32))
def test_field_order_repeats_and_unknown_numbers_are_read_as_upb_reads_them(resources: list[Any], seed: int) -> None:
    data = _shuffled(_build(resources), random.Random(seed))
    assert parse_traces_proto(data) is not None
    assert _assert_agrees(data) or not resources


def test_a_second_status_merges_into_the_first_and_a_repeated_key_keeps_its_place() -> None:
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="n", kind=2)
    for key, value in (("a", "1"), ("b", "2"), ("a", "3")):
        kv = span.attributes.add()
        kv.key, kv.value.string_value = key, value
    body = span.SerializeToString() + _len_field(15, b"\x12\x03msg") + _len_field(15, b"\x18\x02")
    data = _len_field(1, _len_field(2, _len_field(2, body)))
    assert _assert_agrees(data)
    row = native_table(data).to_pylist()[0]  # type: ignore[union-attr]
    assert (row["StatusCode"], row["StatusMessage"], row["SpanAttributes"]) == ("Error", "msg", [("a", "3"), ("b", "2")])


@pytest.mark.parametrize(
    "why, span",
    [
        ("trace id all zeros", Span(trace_id=bytes(16), span_id=b"\x02" * 8)),
        ("span id too short", Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 7)),
        ("start past 2^63-1 ns", Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, start_time_unix_nano=2**63)),
        ("unknown kind", Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, kind=9)),
        ("array value", Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8,
                             attributes=[{"key": "k", "value": {"array_value": {"values": [{"int_value": 1}]}}}])),
        ("an unknown length-delimited field", None),
    ],
)
def test_what_it_does_not_take_goes_to_the_python_walk(why: str, span: Span | None) -> None:
    if span is None:
        body = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8).SerializeToString() + _len_field(77, b"x")
    else:
        body = span.SerializeToString()
    data = _len_field(1, _len_field(2, _len_field(2, body)))
    assert native_table(data) is None, why
    rows = SpanRows()
    decode_traces_proto_columns(data, rows)  # the public entry point still answers, through the walk
    assert len(rows) + rows.rejected == 1


def test_invalid_utf8_anywhere_upb_checks_is_handed_over() -> None:
    span = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8).SerializeToString()
    bad = b"\xed\xa0\x80"  # a surrogate: not UTF-8
    scope_attribute = _len_field(3, _len_field(1, bad))
    for data, stored, problem in (
        (_len_field(1, _len_field(2, _len_field(2, span + _len_field(5, bad)))), 0, "spans[0]: a string"),  # name
        (_len_field(1, _len_field(2, _len_field(1, scope_attribute) + _len_field(2, span))), 0, "scope: "),
        (_len_field(1, _len_field(3, bad) + _len_field(2, _len_field(2, span))), 1, None),  # schema_url, not kept
    ):
        assert native_table(data) is None
        rows = SpanRows()  # the walk rejects the span holding it alone (docs/collector.md)
        decode_traces_proto_columns(data, rows)
        assert (len(rows), rows.rejected) == (stored, 1 - stored)
        assert problem is None or (problem in rows.errors[0] and "not UTF-8" in rows.errors[0])


@PROPERTY
@given(_valid_requests, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(0, 10_000))
def test_damaged_messages_agree_with_upb_or_are_handed_over(resources: list[Any], edits: list[tuple[int, int]],
                                                             cut: int) -> None:
    data = bytearray(_build(resources).SerializeToString())
    if not data:
        return
    for position, byte in edits:
        data[position % len(data)] = byte
    _assert_agrees(bytes(data[: len(data) - cut % max(1, len(data) // 4)]))


@PROPERTY
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_it(data: bytes) -> None:
    _assert_agrees(data)
