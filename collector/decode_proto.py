"""Decode OTLP protobuf (``TracesData`` / ``ExportTraceServiceRequest``, same wire format) into span rows.

Works on the generated message objects directly (no detour through JSON). Bytes values are
stringified as base64, as the Collector's pdata does.
"""

from __future__ import annotations

import base64
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.rows import (
    KIND_NAMES,
    MAX_TIMESTAMP_NS,
    STATUS_NAMES,
    PayloadError,
    SpanRejected,
    SpanRows,
    compact_json,
    double_to_str,
)

__all__ = ["decode_traces_proto", "parse_traces_proto", "proto_value_to_str"]

_MAX_VALUE_DEPTH = 32


def parse_traces_proto(data: bytes) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise PayloadError(f"not an OTLP ExportTraceServiceRequest protobuf: {exc or 'decode error'}") from None
    return message


def _raw(value: Any, depth: int) -> Any:
    if depth > _MAX_VALUE_DEPTH:
        raise SpanRejected("attribute value nested too deeply")
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_raw(v, depth + 1) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _raw(kv.value, depth + 1) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if which == "double_value":
        raw = value.double_value
        return raw if raw == raw and abs(raw) != float("inf") else double_to_str(raw)
    return getattr(value, which)


def proto_value_to_str(value: Any) -> str:
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "bool_value":
        return "true" if value.bool_value else "false"
    if which == "int_value":
        return str(value.int_value)
    if which == "double_value":
        return double_to_str(value.double_value)
    raw = _raw(value, 0)
    if raw is None:
        return ""
    return raw if isinstance(raw, str) else compact_json(raw)


def _attributes(kvs: Any) -> dict[str, str]:
    return {kv.key: proto_value_to_str(kv.value) for kv in kvs}


def _id(data: bytes, n_bytes: int, what: str, required: bool) -> str:
    if not data:
        if required:
            raise SpanRejected(f"{what} is missing")
        return ""
    if len(data) != n_bytes:
        raise SpanRejected(f"{what} has {len(data)} bytes, expected {n_bytes}")
    if required and not any(data):
        raise SpanRejected(f"{what} is all zeros (invalid)")
    return data.hex()


def _enum(value: int, names: tuple[str, ...], what: str) -> str:
    if 0 <= value < len(names):
        return names[value]
    raise SpanRejected(f"{what} {value} is not a known value")


def _nanos(value: int, what: str) -> int:
    if value > MAX_TIMESTAMP_NS:
        raise SpanRejected(f"{what} {value} is out of range (0 .. 2^63-1 ns)")
    return value


def _span_row(span: Any, resource: tuple[dict[str, str], str], scope: tuple[str, str]) -> tuple[Any, ...]:
    start = _nanos(span.start_time_unix_nano, "start_time_unix_nano")
    end = _nanos(span.end_time_unix_nano, "end_time_unix_nano")
    events, links = span.events, span.links
    return (
        start,
        _id(span.trace_id, 16, "trace_id", True),
        _id(span.span_id, 8, "span_id", True),
        _id(span.parent_span_id, 8, "parent_span_id", False),
        span.trace_state,
        span.name,
        _enum(span.kind, KIND_NAMES, "kind"),
        resource[1],
        resource[0],
        scope[0],
        scope[1],
        _attributes(span.attributes),
        end - start if end > start else 0,
        _enum(span.status.code, STATUS_NAMES, "status.code"),
        span.status.message,
        [_nanos(e.time_unix_nano, "event time_unix_nano") for e in events],
        [e.name for e in events],
        [_attributes(e.attributes) for e in events],
        [_id(link.trace_id, 16, "link trace_id", True) for link in links],
        [_id(link.span_id, 8, "link span_id", True) for link in links],
        [link.trace_state for link in links],
        [_attributes(link.attributes) for link in links],
    )


def decode_traces_proto(message: Any, out: SpanRows, where: str = "") -> None:
    """Append the spans of a parsed protobuf message (or its serialized bytes) to ``out``."""
    if isinstance(message, (bytes, bytearray, memoryview)):
        message = parse_traces_proto(bytes(message))
    for i, rs in enumerate(message.resource_spans):
        try:
            res_attrs = _attributes(rs.resource.attributes)
            resource_error = ""
        except (SpanRejected, RecursionError) as exc:
            res_attrs, resource_error = {}, f"resource: {exc}"
        res = (res_attrs, res_attrs.get(SERVICE_NAME, ""))
        for j, ss in enumerate(rs.scope_spans):
            scope = (ss.scope.name, ss.scope.version)
            for k, span in enumerate(ss.spans):
                try:
                    if resource_error:
                        raise SpanRejected(resource_error)
                    out.rows.append(_span_row(span, res, scope))
                except (SpanRejected, RecursionError) as exc:
                    out.reject(f"{where}resource_spans[{i}].scope_spans[{j}].spans[{k}]", str(exc))
