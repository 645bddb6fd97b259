"""Decode Jaeger's JSON traces into span rows.

Read: the query API's answer (``GET /api/traces?...`` and ``/api/traces/<id>``:
``{"data": [trace, ...], "total", "limit", "offset", "errors"}``), the UI's downloads (the same
``data`` array), a bare list of traces, and one trace (``{"traceID", "spans", "processes"}``).
The shapes are Jaeger's ``model/json`` (what ``model/converter/json/from_domain.go`` writes).

Each span is rewritten as the OTLP/JSON span that the OpenTelemetry Collector's Jaeger translator
(``pkg/translator/jaeger``, ``jaegerproto_to_traces.go``) makes of it, then decoded by
``decode_json``, so IDs, timestamps, attribute values and rejections follow the OTLP rules:

- IDs are hex with leading zeros dropped by older Jaeger (``%x``): padded to 32 / 16 digits;
- ``startTime``, ``duration`` and log ``timestamp`` are microseconds;
- tags keep their types (``string``, ``bool``, ``int64``, ``float64``, ``binary`` as base64);
  ``span.kind`` becomes the kind, ``error``/``otel.status_code``/``otel.status_description`` the
  status, ``otel.scope.name``/``otel.scope.version`` the scope, ``w3c.tracestate`` the trace
  state, each removed from the attributes as the translator removes it;
- logs become events (the ``event`` field is the name), ``process.serviceName`` and
  ``process.tags`` the resource.

Two choices differ from the translator, both so that an OTLP span exported to Jaeger reads back
unchanged: only a ``CHILD_OF`` reference of the same trace is the parent (Jaeger's
``Span.ParentSpanID`` falls back to a ``FOLLOWS_FROM`` one, which is what an OTLP link becomes),
and a ``FOLLOWS_FROM`` link gets no ``opentracing.ref_type`` attribute (a further ``CHILD_OF``
reference, which OTLP cannot say otherwise, gets ``opentracing.ref_type=child_of``). The
translator's fallback from ``http.status_code`` to an error status is not applied: the status is
what the instrumentation set.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.rows import MAX_TIMESTAMP_NS, PayloadError, SpanRejected, SpanRows

__all__ = ["decode_jaeger_json", "is_jaeger_json", "shown"]

_HEX = frozenset("0123456789abcdefABCDEF")
#: Jaeger's exporter writes this service name for a resource without attributes (tracetranslator).
_NO_SERVICE_NAME = "OTLPResourceNoServiceName"
_KINDS = {
    "client": "SPAN_KIND_CLIENT",
    "server": "SPAN_KIND_SERVER",
    "producer": "SPAN_KIND_PRODUCER",
    "consumer": "SPAN_KIND_CONSUMER",
    "internal": "SPAN_KIND_INTERNAL",
}
#: Nanoseconds per microsecond: Jaeger's JSON times and durations are microseconds.
_NS_PER_US = 1000
#: The latest time (and start + duration) whose nanoseconds fit the store's signed 64-bit TIMESTAMP_NS.
MAX_MICROS = MAX_TIMESTAMP_NS // _NS_PER_US
_INT64 = (-(2**63), 2**63 - 1)
#: Digits beyond which a decimal cannot be in range: checked before int(), which refuses more than
#: 4300 digits with a ValueError of its own.
_MAX_INT64_DIGITS = 19
_UNSIGNED = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"-?[0-9]+")
# A float64 as a string: what Go's strconv.ParseFloat reads in base 10 (float() would also take
# blanks around it and "1_000")
_FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)
_SPAN_AT = re.compile(r"resourceSpans\[(\d+)\]\.scopeSpans\[0\]\.spans\[0\]: ")
#: Keys that make a document OTLP's or Tempo's: such a document is not Jaeger's, whatever else it holds.
_OTHER_FORMATS_KEYS = ("resourceSpans", "resource_spans", "batches", "trace")
#: Characters of a value shown in a message: a megabyte-long value must not make a megabyte-long line.
SHOWN_CHARS = 200


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters with an ellipsis."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int of over 4300 digits; a structure nested too deeply
        return f"<a {type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def is_jaeger_json(obj: Any) -> bool:
    """Whether a parsed JSON document has one of Jaeger's shapes (checked before OTLP's); one
    holding OTLP's or Tempo's keys too is not (the loader refuses it as ambiguous)."""
    if isinstance(obj, list):
        return bool(obj) and all(isinstance(t, dict) and "spans" in t for t in obj)
    if not isinstance(obj, dict) or any(key in obj for key in _OTHER_FORMATS_KEYS):
        return False
    return "data" in obj or ("spans" in obj and ("traceID" in obj or "processes" in obj))


def _hex_id(value: Any, digits: int, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpanRejected(f"{what} is missing" if value in (None, "") else f"{what} must be a hex string")
    if len(value) > digits or not _HEX.issuperset(value):
        raise SpanRejected(f"{what} {shown(value, 52)} is not hex of at most {digits} digits")
    return value.lower().rjust(digits, "0")


def _micros(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise SpanRejected(f"{what} must be a number of microseconds")
    if isinstance(value, int):
        micros = value
    elif isinstance(value, float) and value.is_integer():
        micros = int(value)
    elif isinstance(value, str) and _UNSIGNED.fullmatch(value):
        if len(value.lstrip("0")) > _MAX_INT64_DIGITS:
            raise SpanRejected(f"{what} {shown(value)} is out of range (0 .. {MAX_MICROS} microseconds)")
        micros = int(value)
    else:
        raise SpanRejected(f"{what} {shown(value)} is not a whole number of microseconds")
    if micros < 0:
        raise SpanRejected(f"{what} {shown(micros)} is negative")
    if micros > MAX_MICROS:  # the store's nanoseconds are a signed 64-bit count
        raise SpanRejected(f"{what} {shown(micros)} is out of range (0 .. {MAX_MICROS} microseconds)")
    return micros


def _int64(value: Any) -> int | None:
    """An int64 tag's value (a JSON number, or a decimal string beyond 2^53); None if not an integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _SIGNED.fullmatch(value):
        if len(value.lstrip("-").lstrip("0")) > _MAX_INT64_DIGITS:
            raise SpanRejected(f"int64 value {shown(value)} is out of range")
        number = int(value)
    else:
        return None
    if not _INT64[0] <= number <= _INT64[1]:
        raise SpanRejected(f"int64 value {shown(number)} is out of range")
    return number


def _float64(value: Any) -> float | None:
    """A float64 tag's value (a JSON number, or a string of one); None if not a number."""
    if isinstance(value, float):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise SpanRejected(f"float64 value {shown(value)} is out of range") from None
    if isinstance(value, str) and _FLOAT.fullmatch(value):
        return float(value)
    return None


def _tag(kv: Any, what: str) -> tuple[str, str, Any]:
    """One Jaeger KeyValue as (key, type, value) with the value of that type."""
    if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
        raise SpanRejected(f"{what} must be an object with a string 'key'")
    key, kind, value = kv["key"], kv.get("type"), kv.get("value")
    try:
        return key, *_typed(kind, value)
    except SpanRejected as exc:
        raise SpanRejected(f"{what} {shown(key, 60)}: {exc}") from None


def _typed(kind: Any, value: Any) -> tuple[str, Any]:
    """A tag's (type, value), the value checked against the type (or the type told by the value)."""
    if kind is None:  # "type" is omitempty in model/json: tell it by the JSON value
        kind = {str: "string", bool: "bool", int: "int64", float: "float64"}.get(type(value), "")
    given = kind
    kind = kind.lower() if isinstance(kind, str) else ""
    if kind == "string" and isinstance(value, str):
        return kind, value
    if kind == "bool":
        if isinstance(value, bool):
            return kind, value
        if value in ("true", "false"):
            return kind, value == "true"
    elif kind == "int64":
        # from_domain.go writes integers beyond 2^53 (JavaScript's exact range) as decimal strings
        number = _int64(value)
        if number is not None:
            return kind, number
    elif kind == "float64":
        double = _float64(value)
        if double is not None:
            return kind, double
    elif kind == "binary" and isinstance(value, str):  # Go's JSON encodes []byte as base64
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise SpanRejected("binary value is not base64") from None
        return kind, value
    elif kind not in ("string", ""):
        raise SpanRejected(f"unknown type {shown(given, 40)}")
    raise SpanRejected(f"value {shown(value, 40)} is not of type {kind or 'string'}")


def _any_value(kind: str, value: Any) -> dict[str, Any]:
    if kind == "string":
        return {"stringValue": value}
    if kind == "bool":
        return {"boolValue": value}
    if kind == "int64":
        return {"intValue": str(value)}
    if kind == "float64":
        return {"doubleValue": value}
    return {"bytesValue": value}


def _tags(kvs: Any, what: str) -> dict[str, tuple[str, Any]]:
    if kvs is None:
        return {}
    if not isinstance(kvs, list):
        raise SpanRejected(f"{what}s must be a list")
    tags: dict[str, tuple[str, Any]] = {}
    for kv in kvs:
        key, kind, value = _tag(kv, what)
        tags[key] = (kind, value)  # a repeated key: the last wins, as for OTLP attributes
    return tags


def _attributes(tags: dict[str, tuple[str, Any]]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _any_value(kind, value)} for key, (kind, value) in tags.items()]


def _string_tag(tags: dict[str, tuple[str, Any]], key: str) -> str | None:
    """Remove tag ``key``; its value if a string, '' if of another type (pcommon's Str()), None if absent."""
    found = tags.pop(key, None)
    if found is None:
        return None
    return found[1] if found[0] == "string" else ""


def _status(tags: dict[str, tuple[str, Any]]) -> dict[str, Any]:
    """Span status from the tags, in the translator's order (setInternalSpanStatus)."""
    error = tags.get("error")
    if error is not None and error == ("bool", True):
        del tags["error"]
        tags.pop("otel.status_code", None)
        message = _string_tag(tags, "otel.status_description")
        if message is None:
            http_message = tags.get("http.status_message")
            message = http_message[1] if http_message and http_message[0] == "string" else ""
        return {"code": "STATUS_CODE_ERROR", "message": message}
    code = _string_tag(tags, "otel.status_code")
    if code is None:
        return {}
    number = {"OK": "STATUS_CODE_OK", "ERROR": "STATUS_CODE_ERROR"}.get(code.upper(), "STATUS_CODE_UNSET")
    return {"code": number, "message": _string_tag(tags, "otel.status_description") or ""}


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
    tags.update(_tags(process.get("tags"), f"{what} tag"))  # a service.name tag wins, as in the translator
    return _attributes(tags)


def _events(logs: Any) -> list[dict[str, Any]]:
    if logs is None:
        return []
    if not isinstance(logs, list):
        raise SpanRejected("logs must be a list")
    events = []
    for log in logs:
        if not isinstance(log, dict):
            raise SpanRejected("log must be an object")
        fields = _tags(log.get("fields"), "log field")
        event: dict[str, Any] = {"timeUnixNano": str(_micros(log.get("timestamp"), "log timestamp") * _NS_PER_US)}
        name = fields.get("event")
        if name is not None and name[0] == "string":
            del fields["event"]
            event["name"] = name[1]
        event["attributes"] = _attributes(fields)
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
        ref_trace = _hex_id(ref.get("traceID") or trace_id, 32, "reference traceID")
        ref_span = _hex_id(ref.get("spanID"), 16, "reference spanID")
        if ref_type == "CHILD_OF" and not parent and ref_trace == trace_id:
            parent = ref_span
            continue
        link: dict[str, Any] = {"traceId": ref_trace, "spanId": ref_span}
        if ref_type == "CHILD_OF":
            link["attributes"] = [{"key": "opentracing.ref_type", "value": {"stringValue": "child_of"}}]
        links.append(link)
    if not parent and span.get("parentSpanID"):  # the embedded-process form (e.g. Elasticsearch) carries it
        parent = _hex_id(span["parentSpanID"], 16, "parentSpanID")
    return parent, links


def _otlp_span(span: Any, trace_id_default: Any, processes: dict[str, Any]) -> dict[str, Any]:
    """One Jaeger span as a one-span OTLP/JSON ``ResourceSpans``."""
    if not isinstance(span, dict):
        raise SpanRejected("span must be an object")
    trace_id = _hex_id(span.get("traceID") or trace_id_default, 32, "traceID")
    span_id = _hex_id(span.get("spanID"), 16, "spanID")
    if "process" in span:
        resource = _resource(span["process"], "process")
    else:
        process_id = span.get("processID")
        if process_id is not None and not isinstance(process_id, str):  # a key of "processes", a string
            raise SpanRejected(f"processID must be a string, not a JSON {_json_type(process_id)}")
        if process_id is not None and process_id not in processes:
            raise SpanRejected(f"processID {shown(process_id, 48)} is not in the trace's processes")
        resource = _resource(processes.get(process_id), f"processes[{shown(process_id, 48)}]")
    name = span.get("operationName") or ""
    if not isinstance(name, str):
        raise SpanRejected("operationName must be a string")
    start_us = _micros(span.get("startTime"), "startTime")
    duration_us = _micros(span.get("duration", 0), "duration")
    if start_us + duration_us > MAX_MICROS:  # the end, as OTLP's endTimeUnixNano, must fit too
        raise SpanRejected(
            f"startTime + duration ({start_us} + {duration_us}) is out of range (0 .. {MAX_MICROS} microseconds)"
        )
    tags = _tags(span.get("tags"), "tag")
    kind = _string_tag(tags, "span.kind")
    scope_name = _string_tag(tags, "otel.scope.name")
    scope_version = _string_tag(tags, "otel.scope.version") if scope_name is not None else None
    if scope_name is None:  # the OpenTelemetry SDKs' own Jaeger exporters wrote the older names
        scope_name = _string_tag(tags, "otel.library.name")
        scope_version = _string_tag(tags, "otel.library.version") if scope_name is not None else None
    trace_state = _string_tag(tags, "w3c.tracestate") or ""
    status = _status(tags)
    parent, links = _references(span, trace_id)
    otlp: dict[str, Any] = {
        "traceId": trace_id,
        "spanId": span_id,
        "parentSpanId": parent,
        "traceState": trace_state,
        "name": name,
        "kind": _KINDS.get(kind or "", 0),
        "startTimeUnixNano": str(start_us * _NS_PER_US),
        "endTimeUnixNano": str((start_us + duration_us) * _NS_PER_US),
        "attributes": _attributes(tags),
        "events": _events(span.get("logs")),
        "links": links,
        "status": status,
    }
    scope = {"name": scope_name or "", "version": scope_version or ""}
    return {"resource": {"attributes": resource}, "scopeSpans": [{"scope": scope, "spans": [otlp]}]}


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}


def _json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def _error_text(error: Any) -> str:
    """One of the query API's ``errors`` (``{"code", "msg"}``; anything else as it is) as a few words."""
    if isinstance(error, dict) and ("code" in error or "msg" in error):
        parts = [error.get("code"), error.get("msg")]
        words = " ".join(p if isinstance(p, str) else _compact(p) for p in parts if p not in (None, ""))
    else:
        words = error if isinstance(error, str) else _compact(error)
    return words if len(words) <= SHOWN_CHARS else words[: SHOWN_CHARS - 1] + "\u2026"


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"))
    except (ValueError, RecursionError):
        return shown(value)


def _traces(obj: Any) -> tuple[list[Any], str, str]:
    """The traces of a document, the path they sit at (for messages), and a note (Jaeger's errors)."""
    if isinstance(obj, list):
        return obj, "", ""
    if "data" not in obj:
        return [obj], "", ""
    data, errors = obj.get("data"), obj.get("errors")
    if errors is None:
        errors = []
    elif not isinstance(errors, list):  # Jaeger writes a list; a lone error is still one
        errors = [errors]
    messages = [text for text in map(_error_text, errors) if text]
    note = "Jaeger reported: " + "; ".join(messages) if messages else ""
    if data is None:
        data = []
    if not isinstance(data, list):
        raise PayloadError(f'"data" must be a list of traces, not a JSON {_json_type(data)}')
    if not data and note:
        raise PayloadError(f"no traces: {note}")
    return data, "data", note


def decode_jaeger_json(obj: Any, out: SpanRows, where: str = "", *, check_unicode: bool = True) -> str:
    """Append the spans of one Jaeger JSON document to ``out``; returns a note for the user ('' if none).

    A malformed envelope raises :class:`PayloadError`; a malformed span is rejected alone, with its
    position (``data[0].spans[3]``) and the reason.
    """
    traces, at, note = _traces(obj)
    places = [f"{at}[{i}]" if at else f"[{i}]" if isinstance(obj, list) else "" for i in range(len(traces))]
    for here, trace in zip(places, traces, strict=True):  # the whole envelope first: a bad one stores nothing
        if not isinstance(trace, dict) or not isinstance(trace.get("spans"), list):
            raise PayloadError(f"{here or 'the document'} is not a Jaeger trace (an object with a 'spans' list)")
        if not isinstance(trace.get("processes") or {}, dict):
            raise PayloadError(f"{here}.processes must be an object".lstrip("."))
    for here, trace in zip(places, traces, strict=True):
        processes = trace.get("processes") or {}
        converted, positions = [], []
        for k, span in enumerate(trace["spans"]):
            position = f"{here}.spans[{k}]".lstrip(".")
            try:
                converted.append(_otlp_span(span, trace.get("traceID"), processes))
                positions.append(position)
            except (SpanRejected, RecursionError) as exc:
                out.reject(f"{where}{position}", str(exc) or "nested too deeply")
        scratch = SpanRows()
        decode_traces_json({"resourceSpans": converted}, scratch, check_unicode=check_unicode)
        out.rows.extend(scratch.rows)
        for message in scratch.errors:  # each names its one-span resourceSpans[n]: say the Jaeger position
            match = _SPAN_AT.match(message)
            position = positions[int(match.group(1))] if match else ""
            out.reject(f"{where}{position}", message[match.end():] if match else message)
        out.rejected += scratch.rejected - len(scratch.errors)  # rejections beyond the kept messages
    return note
