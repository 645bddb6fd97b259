"""Decode OTLP protobuf (``TracesData`` / ``ExportTraceServiceRequest``, same wire format) into span rows.

Works on the generated message objects directly (no detour through JSON). Bytes values are
stringified as base64, as the Collector's pdata does.

A string field that is not UTF-8 makes upb refuse the whole message, though its structure (every
length) is sound. Such a message is parsed again without the UTF-8 check (:func:`lenient_class`,
the same schema as an edition with ``utf8_validation = NONE``), and :func:`require_utf8` rejects
each span (or resource, or scope) holding such a string alone, as the JSON path rejects a lone
surrogate: partial success, the other spans stored (docs/collector.md).
"""

from __future__ import annotations

import base64
import functools
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
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

__all__ = [
    "decode_traces_proto",
    "is_lenient",
    "lenient_class",
    "parse_traces_proto",
    "proto_value_to_str",
    "require_utf8",
    "scope_problem",
]

_MAX_VALUE_DEPTH = 32


@functools.cache
def lenient_class() -> Any:
    """``ExportTraceServiceRequest`` in a pool of its own, its files made an edition that checks no
    UTF-8 (proto3's semantics otherwise: implicit presence, open enums): a string that is not UTF-8
    reads as ``bytes``."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    files: dict[str, Any] = {}

    def gather(file: Any) -> None:
        for dependency in file.dependencies:
            gather(dependency)
        files.setdefault(file.name, file)

    gather(trace_service_pb2.DESCRIPTOR)
    pool = descriptor_pool.DescriptorPool()
    for file in files.values():
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        proto.syntax, proto.edition = "editions", descriptor_pb2.EDITION_2023
        features = proto.options.features
        features.field_presence = descriptor_pb2.FeatureSet.IMPLICIT
        features.enum_type = descriptor_pb2.FeatureSet.OPEN
        features.utf8_validation = descriptor_pb2.FeatureSet.NONE
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(ExportTraceServiceRequest.DESCRIPTOR.full_name))


def parse_traces_proto(data: bytes) -> Any:
    """The message, strictly parsed; or, when only a string that is not UTF-8 stops that, leniently
    (:func:`lenient_class`: the walks then check each part with :func:`require_utf8`)."""
    message = ExportTraceServiceRequest()
    try:
        message.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError) as exc:
        try:
            return lenient_class().FromString(data)
        except (DecodeError, RecursionError, ValueError):
            pass
        raise PayloadError(f"not an OTLP ExportTraceServiceRequest protobuf: {exc or 'decode error'}") from None
    return message


def require_utf8(part: Any, what: str) -> None:
    """SpanRejected when ``part`` of a leniently parsed message holds a string that is not UTF-8:
    the strict class of the same name refuses its bytes then."""
    strict = _strict_class(type(part).DESCRIPTOR.full_name)
    try:
        strict.FromString(part.SerializeToString())
    except DecodeError:
        raise SpanRejected(f"{what}a string field is not UTF-8 (protobuf requires it)") from None


def scope_problem(scope: Any) -> str:
    """Why the spans of a leniently parsed ``scope`` are rejected ('' when its strings are UTF-8)."""
    try:
        require_utf8(scope, "scope: ")
    except SpanRejected as exc:
        return str(exc)
    return ""


def is_lenient(message: Any) -> bool:
    """Whether ``message`` was parsed by :func:`lenient_class` (its parts need :func:`require_utf8`)."""
    return not isinstance(message, ExportTraceServiceRequest)


@functools.cache
def _strict_class(full_name: str) -> Any:
    from google.protobuf import message_factory

    pool = ExportTraceServiceRequest.DESCRIPTOR.file.pool
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))


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
    lenient = is_lenient(message)
    for i, rs in enumerate(message.resource_spans):
        try:
            if lenient:
                require_utf8(rs.resource, "")
            res_attrs = _attributes(rs.resource.attributes)
            resource_error = ""
        except (SpanRejected, RecursionError) as exc:
            res_attrs, resource_error = {}, f"resource: {exc}"
        res = (res_attrs, res_attrs.get(SERVICE_NAME, ""))
        for j, ss in enumerate(rs.scope_spans):
            scope_error = scope_problem(ss.scope) if lenient else ""
            scope = ("", "") if scope_error else (ss.scope.name, ss.scope.version)
            for k, span in enumerate(ss.spans):
                try:
                    if resource_error or scope_error:
                        raise SpanRejected(resource_error or scope_error)
                    if lenient:
                        require_utf8(span, "")
                    out.rows.append(_span_row(span, res, scope))
                except (SpanRejected, RecursionError) as exc:
                    out.reject(f"{where}resource_spans[{i}].scope_spans[{j}].spans[{k}]", str(exc))
