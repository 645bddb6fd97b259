"""Write the Jaeger and Tempo fixtures of tests/collector/test_load_formats.py from formats_source.jsonl.

    python tests/collector/data/make_format_fixtures.py

These fixtures are *converted*, not recorded: neither Jaeger nor Tempo could run where they were
made (no container registry reachable, no Jaeger or Tempo build in PyPI, Debian or npm). The
OTLP source is spans recorded by the OpenTelemetry Python SDK (sample_traces/modelclaim-move.jsonl),
the Collector file-exporter fixture, and one line of edge cases (every value type, every kind,
nanosecond times, a resource without attributes, a trace state). They are converted by the
published rules, and their shapes were checked against real files of both projects:

- Jaeger: the Collector's OTLP -> Jaeger translator (opentelemetry-collector-contrib,
  pkg/translator/jaeger/traces_to_jaegerproto.go), then Jaeger's JSON model
  (jaeger model/converter/json/from_domain.go, model/json/model.go; compared with
  model/json/fixture.json and model/converter/json/fixtures/ui_01.json): microsecond times
  (truncated, as model.TimeAsEpochMicroseconds), hex IDs (``%016x``; older Jaeger wrote ``%x``,
  dropping leading zeros: jaeger_ui_download.json is written that way), the parent as the first
  CHILD_OF reference, links as FOLLOWS_FROM, span.kind / otel.status_code / error /
  otel.status_description / otel.scope.* / w3c.tracestate tags, events as logs with an ``event``
  field, typed tags (int64 beyond 2^53 as a decimal string, binary as base64, arrays and maps as
  JSON text), resources as processes ``p1``, ``p2``... keyed in ``processes``, the query API's
  envelope ``{"data", "total", "limit", "offset", "errors"}``.
- Tempo: protobuf's JSON mapping of the OTLP messages (``json_format.MessageToDict``: base64 IDs,
  enum names, int64 as strings, defaults left out), as Tempo's jsonpb writes its answers (compared
  with grafana/tempo cmd/tempo-vulture/testdata/trace.json and the shapes quoted in Tempo's and
  Grafana's issues), one trace per answer: ``{"batches": [...]}`` (GET /api/traces/<id>; every
  other trace with Tempo 1.x's ``instrumentationLibrarySpans``) and ``{"trace": {"resourceSpans":
  [...]}, "status": "COMPLETE"}`` (GET /api/v2/traces/<id>).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict, ParseDict
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

HERE = Path(__file__).parent
SOURCE = HERE / "formats_source.jsonl"
JAEGER_API = HERE / "jaeger_api_traces.json"
JAEGER_UI = HERE / "jaeger_ui_download.json"
TEMPO_V1 = HERE / "tempo_v1_batches.jsonl"
TEMPO_V2 = HERE / "tempo_v2_traces.jsonl"

_KIND_TAGS = {2: "server", 3: "client", 4: "producer", 5: "consumer", 1: "internal"}
_JS_MAX_SAFE_INTEGER = 2**53 - 1


def source_traces() -> dict[str, list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]]:
    """(resource, scope, span) of every source span, by trace ID, in file order."""
    traces: dict[str, list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]] = {}
    for line in SOURCE.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs.get("scopeSpans", []):
                for span in ss["spans"]:
                    members = traces.setdefault(span["traceId"].lower(), [])
                    members.append((rs.get("resource", {}), ss.get("scope", {}), span))
    return traces


# ---------------------------------------------------------------- Jaeger


def _jaeger_value(value: dict[str, Any]) -> tuple[str, Any]:
    (kind, raw), = value.items()
    if kind == "stringValue":
        return "string", raw
    if kind == "boolValue":
        return "bool", raw
    if kind == "intValue":
        number = int(raw)
        return "int64", number if abs(number) <= _JS_MAX_SAFE_INTEGER else str(number)
    if kind == "doubleValue":
        return "float64", float(raw)
    if kind == "bytesValue":
        return "binary", raw
    return "string", json.dumps(_plain({kind: raw}), separators=(",", ":"))  # pcommon Value.AsString


def _plain(value: dict[str, Any]) -> Any:
    (kind, raw), = value.items()
    if kind == "arrayValue":
        return [_plain(v) for v in raw.get("values", [])]
    if kind == "kvlistValue":
        return {kv["key"]: _plain(kv["value"]) for kv in raw.get("values", [])}
    if kind == "intValue":
        return int(raw)
    return raw


def _tags(attributes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tags = []
    for kv in attributes:
        kind, value = _jaeger_value(kv["value"])
        tags.append({"key": kv["key"], "type": kind, "value": value})
    return tags


def _id(hex_id: str, old_style: bool) -> str:
    """jaeger-idl's TraceID/SpanID String(): ``%016x`` (a 64-bit high half of zeros left out);
    before, ``%x``, dropping leading zeros."""
    halves = [hex_id[:16], hex_id[16:]] if len(hex_id) == 32 else [hex_id]
    if len(halves) == 2 and int(halves[0], 16) == 0:
        halves = halves[1:]
    if old_style:
        return f"{int(halves[0], 16):x}" + "".join(halves[1:])
    return "".join(halves)


def _jaeger_span(resource_key: str, scope: dict[str, Any], span: dict[str, Any], old_style: bool) -> dict[str, Any]:
    trace_id = span["traceId"].lower()
    start_ns, end_ns = int(span["startTimeUnixNano"]), int(span["endTimeUnixNano"])
    refs = []
    parent = (span.get("parentSpanId") or "").lower()
    if parent:
        refs.append({"refType": "CHILD_OF", "traceID": _id(trace_id, old_style), "spanID": _id(parent, old_style)})
    for link in span.get("links", []):
        ref_type = "FOLLOWS_FROM"
        for kv in link.get("attributes", []):
            if kv["key"] == "opentracing.ref_type" and kv["value"].get("stringValue") == "child_of":
                ref_type = "CHILD_OF"
        if parent and link["traceId"].lower() == trace_id and link["spanId"].lower() == parent:
            refs[0]["refType"] = ref_type
            continue
        refs.append({"refType": ref_type, "traceID": _id(link["traceId"].lower(), old_style),
                     "spanID": _id(link["spanId"].lower(), old_style)})
    tags = []
    if scope.get("name"):
        tags.append({"key": "otel.scope.name", "type": "string", "value": scope["name"]})
    if scope.get("version"):
        tags.append({"key": "otel.scope.version", "type": "string", "value": scope["version"]})
    tags += _tags(span.get("attributes", []))
    kind = _KIND_TAGS.get(span.get("kind", 0))
    if kind:
        tags.append({"key": "span.kind", "type": "string", "value": kind})
    status = span.get("status", {})
    code = status.get("code", 0)
    if code == 2:
        tags.append({"key": "otel.status_code", "type": "string", "value": "ERROR"})
        tags.append({"key": "error", "type": "bool", "value": True})
    elif code == 1:
        tags.append({"key": "otel.status_code", "type": "string", "value": "OK"})
    if status.get("message"):
        tags.append({"key": "otel.status_description", "type": "string", "value": status["message"]})
    if span.get("traceState"):
        tags.append({"key": "w3c.tracestate", "type": "string", "value": span["traceState"]})
    logs = []
    for event in span.get("events", []):
        fields = []
        names = {kv["key"] for kv in event.get("attributes", [])}
        if event.get("name") and "event" not in names:
            fields.append({"key": "event", "type": "string", "value": event["name"]})
        fields += _tags(event.get("attributes", []))
        logs.append({"timestamp": int(event["timeUnixNano"]) // 1000, "fields": fields})
    return {
        "traceID": _id(trace_id, old_style),
        "spanID": _id(span["spanId"].lower(), old_style),
        "flags": 1,
        "operationName": span["name"],
        "references": refs,
        "startTime": start_ns // 1000,
        "duration": max(end_ns - start_ns, 0) // 1000,
        "tags": tags,
        "logs": logs,
        "processID": resource_key,
        "warnings": None,
    }


def jaeger_traces(old_style: bool) -> list[dict[str, Any]]:
    traces = []
    for trace_id, spans in source_traces().items():
        processes: dict[str, dict[str, Any]] = {}
        keys: dict[str, str] = {}
        jaeger_spans = []
        for resource, scope, span in spans:
            attributes = resource.get("attributes", [])
            fingerprint = json.dumps(attributes, sort_keys=True)
            if fingerprint not in keys:
                keys[fingerprint] = f"p{len(keys) + 1}"
                service = next((kv["value"]["stringValue"] for kv in attributes if kv["key"] == "service.name"), "")
                process: dict[str, Any] = {"serviceName": service if attributes else "OTLPResourceNoServiceName"}
                process["tags"] = _tags([kv for kv in attributes if kv["key"] != "service.name"])
                processes[keys[fingerprint]] = process
            jaeger_spans.append(_jaeger_span(keys[fingerprint], scope, span, old_style))
        traces.append({"traceID": _id(trace_id, old_style), "spans": jaeger_spans, "processes": processes,
                       "warnings": None})
    return traces


# ---------------------------------------------------------------- Tempo


def _base64_ids(span: dict[str, Any]) -> dict[str, Any]:
    """The span with its hex IDs as the bytes they stand for (ParseDict reads bytes as base64)."""
    def b64(hex_id: str) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    span = dict(span, traceId=b64(span["traceId"]), spanId=b64(span["spanId"]))
    if span.get("parentSpanId"):
        span["parentSpanId"] = b64(span["parentSpanId"])
    span["links"] = [dict(link, traceId=b64(link["traceId"]), spanId=b64(link["spanId"]))
                     for link in span.get("links", [])]
    return span


Spans = list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]


def tempo_batches(spans: Spans, legacy: bool) -> list[dict[str, Any]]:
    """One trace's spans as Tempo nests them: by resource, then scope."""
    resources: dict[str, tuple[dict[str, Any], dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]]] = {}
    for resource, scope, span in spans:
        scopes = resources.setdefault(json.dumps(resource, sort_keys=True), (resource, {}))[1]
        scopes.setdefault(json.dumps(scope, sort_keys=True), (scope, []))[1].append(_base64_ids(span))
    batches = []
    for resource, scopes in resources.values():
        scope_spans = [{"scope": scope, "spans": members} for scope, members in scopes.values()]
        batch = MessageToDict(ParseDict({"resource": resource, "scopeSpans": scope_spans}, ResourceSpans()))
        if legacy:  # Tempo 1.x: OTLP before 0.15
            for ss in batch.get("scopeSpans", []):
                if "scope" in ss:
                    ss["instrumentationLibrary"] = ss.pop("scope")
            batch["instrumentationLibrarySpans"] = batch.pop("scopeSpans")
        batches.append(batch)
    return batches


def main() -> None:
    api = {"data": jaeger_traces(old_style=False), "total": 0, "limit": 0, "offset": 0, "errors": None}
    JAEGER_API.write_text(json.dumps(api, indent=2) + "\n")  # ?prettyPrint=true
    JAEGER_UI.write_text(json.dumps({"data": jaeger_traces(old_style=True)}, separators=(",", ":")))
    traces = list(source_traces().values())
    with TEMPO_V1.open("w") as v1, TEMPO_V2.open("w") as v2:
        for i, spans in enumerate(traces):
            v1.write(json.dumps({"batches": tempo_batches(spans, legacy=i % 2 == 1)}, separators=(",", ":")) + "\n")
            v2.write(json.dumps({"trace": {"resourceSpans": tempo_batches(spans, legacy=False)}, "status": "COMPLETE"},
                                separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
