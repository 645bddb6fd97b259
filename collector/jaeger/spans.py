"""One Jaeger span as the one-span OTLP/JSON ``ResourceSpans`` the OpenTelemetry Collector's Jaeger
translator makes of it: the kind, status, scope and trace state taken out of its tags, its logs as
events, its process as the resource, its references as the parent and the links."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.jaeger.values import (
    MAX_MICROS,
    NS_PER_US,
    attributes,
    hex_id,
    json_type,
    microseconds,
    shown,
    string_tag,
    typed_tags,
)
from restorelens.collector.rows import SpanRejected

__all__ = ["otlp_span"]

#: Jaeger's exporter writes this service name for a resource without attributes (tracetranslator).
_NO_SERVICE_NAME = "OTLPResourceNoServiceName"
_KINDS = {
    "client": "SPAN_KIND_CLIENT",
    "server": "SPAN_KIND_SERVER",
    "producer": "SPAN_KIND_PRODUCER",
    "consumer": "SPAN_KIND_CONSUMER",
    "internal": "SPAN_KIND_INTERNAL",
}


def _status(tags: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """Span status from the tags, in the translator's order (setInternalSpanStatus)."""
    error = tags.get("error")
    if error is not None and error == ("bool", True):
        del tags["error"]
        tags.pop("otel.status_code", None)
        message = string_tag(tags, "otel.status_description")
        if message is None:
            http_message = tags.get("http.status_message")
            message = http_message[1] if http_message and http_message[0] == "string" else ""
        return {"code": "STATUS_CODE_ERROR", "message": message}
    code = string_tag(tags, "otel.status_code")
    if code is None:
        return {}
    number = {"OK": "STATUS_CODE_OK", "ERROR": "STATUS_CODE_ERROR"}.get(code.upper(), "STATUS_CODE_UNSET")
    return {"code": number, "message": string_tag(tags, "otel.status_description") or ""}


def _resource(process: Any, what: str) -> list[dict[str, Any]]:
    if process is None:
        return []
    if not isinstance(process, dict):
        raise SpanRejected(f"{what} must be an object")
    service = process.get("serviceName") or ""
    if not isinstance(service, str):
        raise SpanRejected(f"{what}.serviceName must be a string")
    tags: dict[str, tuple[str, Any]] = {}
    if service and service != _NO_SERVICE_NAME:
        tags[SERVICE_NAME] = ("string", service)
    tags.update(typed_tags(process.get("tags"), f"{what} tag"))  # a service.name tag wins, as in the translator
    return attributes(tags)


def _events(logs: Any) -> list[dict[str, Any]]:
    if logs is None:
        return []
    if not isinstance(logs, list):
        raise SpanRejected("logs must be a list")
    events = []
    for log in logs:
        if not isinstance(log, dict):
            raise SpanRejected("log must be an object")
        fields = typed_tags(log.get("fields"), "log field")
        at_us = microseconds(log.get("timestamp"), "log timestamp")
        event: dict[str, Any] = {"timeUnixNano": str(at_us * NS_PER_US)}
        name = fields.get("event")
        if name is not None and name[0] == "string":
            del fields["event"]
            event["name"] = name[1]
        event["attributes"] = attributes(fields)
        events.append(event)
    return events


def _references(span: dict[str, Any], trace_id: str) -> tuple[str, list[dict[str, Any]]]:
    """The parent span ID ('' for a root) and the links, from ``references`` (and ``parentSpanID``)."""
    refs = span.get("references") or []
    if not isinstance(refs, list):
        raise SpanRejected("references must be a list")
    parent = ""
    links = []
    for ref in refs:
        if not isinstance(ref, dict):
            raise SpanRejected("reference must be an object")
        ref_type = ref.get("refType") or "CHILD_OF"  # model/json: CHILD_OF unless FOLLOWS_FROM
        if ref_type not in ("CHILD_OF", "FOLLOWS_FROM"):
            raise SpanRejected(f"reference refType {shown(ref_type, 40)} is neither CHILD_OF nor FOLLOWS_FROM")
        ref_trace = hex_id(ref.get("traceID") or trace_id, 32, "reference traceID")
        ref_span = hex_id(ref.get("spanID"), 16, "reference spanID")
        if ref_type == "CHILD_OF" and not parent and ref_trace == trace_id:
            parent = ref_span
            continue
        link: dict[str, Any] = {"traceId": ref_trace, "spanId": ref_span}
        if ref_type == "CHILD_OF":
            link["attributes"] = [{"key": "opentracing.ref_type", "value": {"stringValue": "child_of"}}]
        links.append(link)
    if not parent and span.get("parentSpanID"):  # the embedded-process form (e.g. Elasticsearch) carries it
        parent = hex_id(span["parentSpanID"], 16, "parentSpanID")
    return parent, links


def otlp_span(span: Any, trace_id_default: Any, processes: dict[str, Any]) -> dict[str, Any]:
    """One Jaeger span as a one-span OTLP/JSON ``ResourceSpans``."""
    if not isinstance(span, dict):
        raise SpanRejected("span must be an object")
    trace_id = hex_id(span.get("traceID") or trace_id_default, 32, "traceID")
    span_id = hex_id(span.get("spanID"), 16, "spanID")
    if "process" in span:
        resource = _resource(span["process"], "process")
    else:
        process_id = span.get("processID")
        if process_id is not None and not isinstance(process_id, str):  # a key of "processes", a string
            raise SpanRejected(f"processID must be a string, not a JSON {json_type(process_id)}")
        if process_id is not None and process_id not in processes:
            raise SpanRejected(f"processID {shown(process_id, 48)} is not in the trace's processes")
        resource = _resource(processes.get(process_id), f"processes[{shown(process_id, 48)}]")
    name = span.get("operationName") or ""
    if not isinstance(name, str):
        raise SpanRejected("operationName must be a string")
    start_us = microseconds(span.get("startTime"), "startTime")
    duration_us = microseconds(span.get("duration", 0), "duration")
    if start_us + duration_us > MAX_MICROS:  # the end, as OTLP's endTimeUnixNano, must fit too
        raise SpanRejected(
            f"startTime + duration ({start_us} + {duration_us}) is out of range (0 .. {MAX_MICROS} microseconds)"
        )
    tags = typed_tags(span.get("tags"), "tag")
    kind = string_tag(tags, "span.kind")
    scope_name = string_tag(tags, "otel.scope.name")
    scope_version = string_tag(tags, "otel.scope.version") if scope_name is not None else None
    if scope_name is None:  # the OpenTelemetry SDKs' own Jaeger exporters wrote the older names
        scope_name = string_tag(tags, "otel.library.name")
        scope_version = string_tag(tags, "otel.library.version") if scope_name is not None else None
    trace_state = string_tag(tags, "w3c.tracestate") or ""
    status = _status(tags)
    parent, links = _references(span, trace_id)
    otlp: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "parentSpanId": parent,
        "traceState": trace_state,
        "name": name,
        "kind": _KINDS.get(kind or "", 0),
        "startTimeUnixNano": str(start_us * NS_PER_US),
        "endTimeUnixNano": str((start_us + duration_us) * NS_PER_US),
        "attributes": attributes(tags),
        "events": _events(span.get("logs")),
        "links": links,
        "status": status,
    }
    scope = {"name": scope_name or "", "version": scope_version or ""}
    return {"resource": {"attributes": resource}, "scopeSpans": [{"scope": scope, "spans": [otlp]}]}
