"""Encode finished SDK spans as OTLP/JSON ``TracesData``, the shape the Collector's file exporter writes.

Hex IDs (lower case), int64 as strings, enums as integers, camelCase keys; one ``TracesData``
object per exported batch (one line in a JSON-lines file).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

__all__ = ["encode_traces_data", "encode_value"]


def encode_value(value: Any) -> dict[str, Any]:
    """One OTLP ``AnyValue``; bool is tested before int because bool is an int in Python."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": value.hex()}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [encode_value(v) for v in value]}}
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": _encode_attributes(value)}}
    return {"stringValue": str(value)}


def _encode_attributes(attributes: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    if not attributes:
        return []
    return [{"key": key, "value": encode_value(value)} for key, value in attributes.items()]


def _trace_id(value: int) -> str:
    return format(value, "032x")


def _span_id(value: int) -> str:
    return format(value, "016x")


def _encode_span(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.context
    out: dict[str, Any] = {
        "traceId": _trace_id(ctx.trace_id),
        "spanId": _span_id(ctx.span_id),
        "name": span.name,
        # OTLP numbers kinds from UNSPECIFIED=0; the SDK's enum starts at INTERNAL=0.
        "kind": span.kind.value + 1,
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or span.start_time or 0),
        "attributes": _encode_attributes(span.attributes),
        "status": {},
    }
    if ctx.trace_state:
        out["traceState"] = ctx.trace_state.to_header()
    if span.parent is not None:
        out["parentSpanId"] = _span_id(span.parent.span_id)
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(e.timestamp), "name": e.name, "attributes": _encode_attributes(e.attributes)}
            for e in span.events
        ]
    if span.links:
        out["links"] = [
            {
                "traceId": _trace_id(link.context.trace_id),
                "spanId": _span_id(link.context.span_id),
                "attributes": _encode_attributes(link.attributes),
            }
            for link in span.links
        ]
    code = span.status.status_code.value
    if code:
        out["status"]["code"] = code
    if span.status.description:
        out["status"]["message"] = span.status.description
    return out


def encode_traces_data(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """Group spans by resource, then by instrumentation scope, as OTLP does."""
    by_resource: dict[int, tuple[Any, dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    for span in spans:
        resource_key = id(span.resource)
        if resource_key not in by_resource:
            by_resource[resource_key] = (span.resource, {})
        scope = span.instrumentation_scope
        scope_key = (scope.name, scope.version or "") if scope else ("", "")
        by_resource[resource_key][1].setdefault(scope_key, []).append(_encode_span(span))
    resource_spans = []
    for resource, scopes in by_resource.values():
        resource_spans.append(
            {
                "resource": {"attributes": _encode_attributes(resource.attributes if resource else None)},
                "scopeSpans": [
                    {"scope": {"name": name, "version": version} if version else {"name": name}, "spans": encoded}
                    for (name, version), encoded in scopes.items()
                ],
            }
        )
    return {"resourceSpans": resource_spans}
