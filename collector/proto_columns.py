"""Decode OTLP protobuf straight into Arrow columns: the receiver's and the loader's protobuf path.

The span-by-span decoder (``decode_proto``) builds a 22-tuple per span and a dict per attribute
list, and Arrow then converts those Python objects again; on the receiver that was most of the CPU.
Here one walk over the parsed message appends each value to its column's list: attribute lists
become flat key/value lists plus offsets (a MAP array without a dict per span reaching Arrow),
events and links become flat columns plus per-span offsets, and the resource and scope values are
built once per resource or scope (resource maps as a dictionary, the rest repeated with ``take``). Rows, rejections and reasons are
exactly those of ``decode_proto`` (``tests/collector/test_proto_columns.py`` checks it on
generated messages), which stays as the readable statement of the mapping.

Serialized messages go first through the compiled decoder (``_otlp_native.c``), which reads the
wire format straight into these columns' buffers; it returns None for anything but a valid
message of scalar attribute values, and the walk here does those (``test_otlp_native.py`` holds
both to the same tables).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector import _otlp_native
from restorelens.collector.decode_proto import (
    _enum,
    _id,
    _nanos,
    is_lenient,
    parse_traces_proto,
    proto_value_to_str,
    require_utf8,
    scope_problem,
)
from restorelens.collector.rows import (
    ARROW_SCHEMA,
    DICT_SCHEMA,
    KIND_NAMES,
    MAX_TIMESTAMP_NS,
    STATUS_NAMES,
    SpanRejected,
    SpanRows,
    double_to_str,
)

__all__ = ["columns_table", "decode_traces_proto_columns", "native_table"]

_ZERO_TRACE_ID = bytes(16)
_ZERO_SPAN_ID = bytes(8)
_N_KINDS = len(KIND_NAMES)
_N_STATUSES = len(STATUS_NAMES)
_MAP_TYPE = ARROW_SCHEMA.field("SpanAttributes").type


def _attributes(kvs: Any) -> dict[str, str]:
    """Like ``decode_proto._attributes`` with the common scalar cases inlined (same strings)."""
    attrs: dict[str, str] = {}
    for kv in kvs:
        value = kv.value
        which = value.WhichOneof("value")
        if which == "string_value":
            attrs[kv.key] = value.string_value
        elif which == "int_value":
            attrs[kv.key] = str(value.int_value)
        elif which == "double_value":
            attrs[kv.key] = double_to_str(value.double_value)
        elif which == "bool_value":
            attrs[kv.key] = "true" if value.bool_value else "false"
        else:
            attrs[kv.key] = proto_value_to_str(value)
    return attrs


class _Maps:
    """A growing MAP<VARCHAR, VARCHAR> column: flat keys and values, one offset per map."""

    __slots__ = ("keys", "offsets", "values")

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.values: list[str] = []
        self.offsets: list[int] = [0]

    def append(self, attrs: dict[str, str]) -> None:
        if attrs:
            self.keys.extend(attrs)
            self.values.extend(attrs.values())
        self.offsets.append(len(self.keys))

    def to_arrow(self) -> pa.Array:
        return pa.MapArray.from_arrays(
            pa.array(self.offsets, pa.int32()),
            pa.array(self.keys, pa.string()),
            pa.array(self.values, pa.string()),
            type=_MAP_TYPE,
        )


class _Columns:
    """The spans decoded so far: one tuple of scalar values per span (turned into columns by a
    single ``zip``, cheaper than twelve list appends per span), flat map and list columns with
    offsets, and the per-resource and per-scope values that ``take`` repeats."""

    def __init__(self) -> None:
        # (start, trace_id, span_id, parent_id, trace_state, name, kind, resource index,
        #  scope index, duration, status code, status message)
        self.scalars: list[tuple[Any, ...]] = []
        self.attributes = _Maps()
        self.event_offsets: list[int] = [0]
        self.event_time: list[int] = []
        self.event_name: list[str] = []
        self.event_attributes = _Maps()
        self.link_offsets: list[int] = [0]
        self.link_trace_id: list[str] = []
        self.link_span_id: list[str] = []
        self.link_trace_state: list[str] = []
        self.link_attributes = _Maps()
        self.resource_maps = _Maps()
        self.service_names: list[str] = []
        self.scope_names: list[str] = []
        self.scope_versions: list[str] = []

    def to_arrow(self) -> pa.Table:
        (start, trace_id, span_id, parent_id, trace_state, name, kind, resource_index, scope_index, duration,
         status_code, status_message) = zip(*self.scalars, strict=True)
        resource = pa.array(resource_index, pa.int32())
        scope = pa.array(scope_index, pa.int32())
        event_offsets = pa.array(self.event_offsets, pa.int32())
        link_offsets = pa.array(self.link_offsets, pa.int32())
        string = pa.string()
        timestamp = pa.timestamp("ns")

        def events(values: pa.Array) -> pa.Array:
            return pa.ListArray.from_arrays(event_offsets, values)

        def links(values: pa.Array) -> pa.Array:
            return pa.ListArray.from_arrays(link_offsets, values)

        columns = [
            pa.array(start, timestamp),
            pa.array(trace_id, string),
            pa.array(span_id, string),
            pa.array(parent_id, string),
            pa.array(trace_state, string),
            pa.array(name, string),
            pa.array(kind, string),
            pc.take(pa.array(self.service_names, string), resource),
            pa.DictionaryArray.from_arrays(resource, self.resource_maps.to_arrow()),
            pc.take(pa.array(self.scope_names, string), scope),
            pc.take(pa.array(self.scope_versions, string), scope),
            self.attributes.to_arrow(),
            pa.array(duration, pa.uint64()),
            pa.array(status_code, string),
            pa.array(status_message, string),
            events(pa.array(self.event_time, timestamp)),
            events(pa.array(self.event_name, string)),
            events(self.event_attributes.to_arrow()),
            links(pa.array(self.link_trace_id, string)),
            links(pa.array(self.link_span_id, string)),
            links(pa.array(self.link_trace_state, string)),
            links(self.link_attributes.to_arrow()),
        ]
        return pa.Table.from_arrays(columns, schema=DICT_SCHEMA)


def _hex(data: bytes, n_bytes: int, zero: bytes, what: str) -> str:
    if len(data) == n_bytes and data != zero:
        return data.hex()
    return _id(data, n_bytes, what, True)  # raises SpanRejected with decode_proto's reason


def _append_span(cols: _Columns, span: Any, resource_index: int, scope_index: int) -> None:
    """Append one span to every column, or raise SpanRejected having appended nothing.

    Checks run in the order ``decode_proto._span_row`` evaluates them, so the reason given for a
    span with several problems is the same.
    """
    start = span.start_time_unix_nano
    end = span.end_time_unix_nano
    if start > MAX_TIMESTAMP_NS:
        _nanos(start, "start_time_unix_nano")
    if end > MAX_TIMESTAMP_NS:
        _nanos(end, "end_time_unix_nano")
    raw = span.trace_id
    trace_id = raw.hex() if len(raw) == 16 and raw != _ZERO_TRACE_ID else _id(raw, 16, "trace_id", True)
    raw = span.span_id
    span_id = raw.hex() if len(raw) == 8 and raw != _ZERO_SPAN_ID else _id(raw, 8, "span_id", True)
    parent = span.parent_span_id
    parent_id = parent.hex() if len(parent) == 8 else _id(parent, 8, "parent_span_id", False)
    kind = span.kind
    kind_name = KIND_NAMES[kind] if 0 <= kind < _N_KINDS else _enum(kind, KIND_NAMES, "kind")
    attrs = _attributes(span.attributes)
    status = span.status
    code = status.code
    code_name = STATUS_NAMES[code] if 0 <= code < _N_STATUSES else _enum(code, STATUS_NAMES, "status.code")
    events = span.events
    if events:
        event_times = [e.time_unix_nano for e in events]
        for time_ns in event_times:
            if time_ns > MAX_TIMESTAMP_NS:
                _nanos(time_ns, "event time_unix_nano")
        event_names = [e.name for e in events]
        event_attrs = [_attributes(e.attributes) for e in events]
    links = span.links
    if links:
        link_trace_ids = [_hex(link.trace_id, 16, _ZERO_TRACE_ID, "link trace_id") for link in links]
        link_span_ids = [_hex(link.span_id, 8, _ZERO_SPAN_ID, "link span_id") for link in links]
        link_states = [link.trace_state for link in links]
        link_attrs = [_attributes(link.attributes) for link in links]

    # Everything is valid: from here on nothing raises, so the columns stay aligned.
    cols.scalars.append(
        (start, trace_id, span_id, parent_id, span.trace_state, span.name, kind_name, resource_index, scope_index,
         end - start if end > start else 0, code_name, status.message)
    )
    span_attributes = cols.attributes
    if attrs:
        span_attributes.keys.extend(attrs)
        span_attributes.values.extend(attrs.values())
    span_attributes.offsets.append(len(span_attributes.keys))
    if events:
        cols.event_time.extend(event_times)
        cols.event_name.extend(event_names)
        for one in event_attrs:
            cols.event_attributes.append(one)
    cols.event_offsets.append(len(cols.event_time))
    if links:
        cols.link_trace_id.extend(link_trace_ids)
        cols.link_span_id.extend(link_span_ids)
        cols.link_trace_state.extend(link_states)
        for one in link_attrs:
            cols.link_attributes.append(one)
    cols.link_offsets.append(len(cols.link_trace_id))


_KIND_NAMES = pa.array(KIND_NAMES, pa.string())
_STATUS_NAMES = pa.array(STATUS_NAMES, pa.string())


def _strings(column: tuple[bytes, bytes]) -> pa.Array:
    offsets, data = column
    return pa.Array.from_buffers(pa.string(), len(offsets) // 4 - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _fixed(data: bytes, type_: pa.DataType, width: int) -> pa.Array:
    return pa.Array.from_buffers(type_, len(data) // width, [None, pa.py_buffer(data)])


#: A map column's doubles from ``_otlp_native.decode_json``: None, or an int8 flag per value (1: a
#: double, its text left empty) and the doubles, in order.
Doubles = tuple[bytes, bytes] | None


def _maps(column: tuple[bytes, tuple[bytes, bytes], tuple[bytes, bytes]], doubles: Doubles = None,
          double_strings: Callable[[pa.Array], pa.Array] | None = None) -> pa.Array:
    offsets, keys, values = column
    texts = _strings(values)
    if doubles is not None:
        assert double_strings is not None
        flags, raw = doubles
        texts = pc.replace_with_mask(texts, pc.not_equal(_fixed(flags, pa.int8(), 1), 0),
                                     double_strings(_fixed(raw, pa.float64(), 8)))
    return pa.MapArray.from_arrays(_fixed(offsets, pa.int32(), 4), _strings(keys), texts, type=_MAP_TYPE)


def native_table(data: bytes | bytearray | memoryview) -> pa.Table | None:
    """The compiled decoder's table for a serialized message, or None when the Python walk must do it."""
    found = _otlp_native.decode(data)
    return None if found is None else columns_table(found)


def columns_table(
    found: tuple[Any, ...],
    doubles: tuple[Doubles, Doubles, Doubles, Doubles] = (None, None, None, None),
    double_strings: Callable[[pa.Array], pa.Array] | None = None,
) -> pa.Table:
    """``otel_traces`` rows (resource maps as a dictionary) from the compiled decoder's columns;
    ``doubles`` for the span, event, link and resource maps, whose text ``double_strings`` writes."""
    span_doubles, event_doubles, link_doubles, resource_doubles = doubles
    (spans, start, trace_id, span_id, parent_id, trace_state, name, kind, resource_index, scope_index, duration,
     status_code, status_message, attributes, event_offsets, event_time, event_name, event_attributes,
     link_offsets, link_trace_id, link_span_id, link_trace_state, link_attributes, resource_attributes,
     service_name, scope_name, scope_version) = found
    resource = _fixed(resource_index, pa.int32(), 4)
    scope = _fixed(scope_index, pa.int32(), 4)
    events_at = _fixed(event_offsets, pa.int32(), 4)
    links_at = _fixed(link_offsets, pa.int32(), 4)
    timestamp = pa.timestamp("ns")
    columns = [
        _fixed(start, timestamp, 8),
        _strings(trace_id),
        _strings(span_id),
        _strings(parent_id),
        _strings(trace_state),
        _strings(name),
        pc.take(_KIND_NAMES, _fixed(kind, pa.int8(), 1)),
        pc.take(_strings(service_name), resource),
        pa.DictionaryArray.from_arrays(resource, _maps(resource_attributes, resource_doubles, double_strings)),
        pc.take(_strings(scope_name), scope),
        pc.take(_strings(scope_version), scope),
        _maps(attributes, span_doubles, double_strings),
        _fixed(duration, pa.uint64(), 8),
        pc.take(_STATUS_NAMES, _fixed(status_code, pa.int8(), 1)),
        _strings(status_message),
        pa.ListArray.from_arrays(events_at, _fixed(event_time, timestamp, 8)),
        pa.ListArray.from_arrays(events_at, _strings(event_name)),
        pa.ListArray.from_arrays(events_at, _maps(event_attributes, event_doubles, double_strings)),
        pa.ListArray.from_arrays(links_at, _strings(link_trace_id)),
        pa.ListArray.from_arrays(links_at, _strings(link_span_id)),
        pa.ListArray.from_arrays(links_at, _strings(link_trace_state)),
        pa.ListArray.from_arrays(links_at, _maps(link_attributes, link_doubles, double_strings)),
    ]
    assert all(len(column) == spans for column in columns)
    return pa.Table.from_arrays(columns, schema=DICT_SCHEMA)


def decode_traces_proto_columns(message: Any, out: SpanRows, where: str = "") -> None:
    """Append the spans of a parsed protobuf message (or its serialized bytes) to ``out`` as one table.

    Raises PayloadError when the bytes are not an ExportTraceServiceRequest (nothing is appended);
    a span that cannot be stored is rejected alone, with the reason ``decode_proto`` would give.
    """
    if isinstance(message, (bytes, bytearray, memoryview)):
        table = native_table(message)
        if table is not None:
            if table.num_rows:
                out.add_table(table)
            return
        message = parse_traces_proto(bytes(message))
    lenient = is_lenient(message)  # a string not UTF-8 somewhere: each part is checked (decode_proto)
    cols = _Columns()
    for i, rs in enumerate(message.resource_spans):
        try:
            if lenient:
                require_utf8(rs.resource, "")
            res_attrs = _attributes(rs.resource.attributes)
            resource_error = ""
        except (SpanRejected, RecursionError) as exc:
            res_attrs, resource_error = {}, f"resource: {exc}"
        resource_index = len(cols.service_names)
        cols.resource_maps.append(res_attrs)
        cols.service_names.append(res_attrs.get(SERVICE_NAME, ""))
        for j, ss in enumerate(rs.scope_spans):
            scope_index = len(cols.scope_names)
            scope_error = scope_problem(ss.scope) if lenient else ""
            cols.scope_names.append("" if scope_error else ss.scope.name)
            cols.scope_versions.append("" if scope_error else ss.scope.version)
            for k, span in enumerate(ss.spans):
                try:
                    if resource_error or scope_error:
                        raise SpanRejected(resource_error or scope_error)
                    if lenient:
                        require_utf8(span, "")
                    _append_span(cols, span, resource_index, scope_index)
                except (SpanRejected, RecursionError) as exc:
                    out.reject(f"{where}resource_spans[{i}].scope_spans[{j}].spans[{k}]", str(exc))
    if cols.scalars:
        out.add_table(cols.to_arrow())
