from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, StatusCode

from restorelens import spans
from restorelens.errors import InputError, SettingError
from restorelens.telemetry import build_tracer_provider


def test_memory_exporter_records_synchronously() -> None:
    provider = build_tracer_provider("svc", "memory")
    with provider.get_tracer("t").start_as_current_span(spans.SPAN_GATE_REQUEST):
        pass
    exporter = provider.restorelens_exporter
    assert isinstance(exporter, InMemorySpanExporter)
    [span] = exporter.get_finished_spans()
    assert span.name == "gate.request"
    assert span.resource.attributes["service.name"] == "svc"


def test_otel_service_name_overrides_the_component_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci")
    provider = build_tracer_provider("default-name", "memory")
    attrs = provider.resource.attributes
    assert attrs["service.name"] == "from-env"
    assert attrs["deployment.environment"] == "ci"


def test_resource_attributes_env_can_name_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=attr-env")
    assert build_tracer_provider("default-name", "memory").resource.attributes["service.name"] == "attr-env"


def test_component_default_applies_without_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    assert build_tracer_provider("restorelens-gate", "memory").resource.attributes["service.name"] == "restorelens-gate"


def test_otlp_exporter_honours_the_standard_endpoint_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9999")
    provider = build_tracer_provider("svc")
    try:
        assert provider.restorelens_exporter.endpoint == "http://127.0.0.1:9999/v1/traces"
    finally:
        provider.shutdown()


def test_file_exporter_writes_collector_shaped_json_lines(tmp_path: Path) -> None:
    out = tmp_path / "spans.jsonl"
    provider = build_tracer_provider("gate", "file", path=out, batch=False)
    tracer = provider.get_tracer("restorelens.test", "1.0")
    with tracer.start_as_current_span(spans.SPAN_CLIENT_REQUEST, start_time=1_000) as parent:
        parent.set_attribute(spans.ATTR_ATTEMPTS, 2)
        parent.set_attribute(spans.ATTR_RETRY_AFTER_S, 10.0)
        parent.set_attribute(spans.ATTR_HTTP_RETRY_AFTER, ["10"])
        parent.add_event(spans.EVENT_RETRY_WAIT, {spans.ATTR_RETRY_WAIT_S: 10.0}, timestamp=2_000)
        with tracer.start_as_current_span(
            spans.SPAN_GATE_REQUEST, kind=SpanKind.SERVER, links=[Link(parent.get_span_context())]
        ) as child:
            child.set_status(StatusCode.ERROR, "boom")
    provider.shutdown()
    lines = out.read_text().splitlines()
    assert len(lines) == 2  # one TracesData per export call (SimpleSpanProcessor exports one span)
    child_doc, parent_doc = (json.loads(line) for line in lines)
    [rs] = parent_doc["resourceSpans"]
    assert {"key": "service.name", "value": {"stringValue": "gate"}} in rs["resource"]["attributes"]
    [ss] = rs["scopeSpans"]
    assert ss["scope"] == {"name": "restorelens.test", "version": "1.0"}
    [p] = ss["spans"]
    assert p["kind"] == 1 and p["startTimeUnixNano"] == "1000"
    assert len(p["traceId"]) == 32 and p["traceId"] == p["traceId"].lower()
    attrs = {a["key"]: a["value"] for a in p["attributes"]}
    assert attrs["restore.attempts"] == {"intValue": "2"}
    assert attrs["restore.retry_after_s"] == {"doubleValue": 10.0}
    assert attrs["http.response.header.retry-after"] == {"arrayValue": {"values": [{"stringValue": "10"}]}}
    assert p["events"][0]["timeUnixNano"] == "2000"
    c = child_doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert c["kind"] == 2 and c["parentSpanId"] == p["spanId"]
    assert c["links"][0]["spanId"] == p["spanId"]
    assert c["status"] == {"code": 2, "message": "boom"}


def test_unknown_exporter_is_a_setting_error() -> None:
    with pytest.raises(SettingError, match="exporter.*unknown exporter 'zipkin'"):
        build_tracer_provider("svc", "zipkin")


def test_file_exporter_needs_a_path() -> None:
    with pytest.raises(SettingError, match="needs a path"):
        build_tracer_provider("svc", "file")


def test_an_unwritable_span_file_is_an_error_at_start(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(InputError, match=r"not-a-dir/spans\.jsonl: cannot write spans here"):
        build_tracer_provider("svc", "file", path=blocker / "spans.jsonl")
