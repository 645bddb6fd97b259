"""The gate's /metrics counts the spans its tracing lost: dropped at a full queue, failed to export."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from starlette.testclient import TestClient

from restorelens.gate import GateSettings, create_gate_app
from restorelens.telemetry import build_tracer_provider


class _Stuck(SpanExporter):
    """An exporter whose endpoint never answers until released, and then refuses."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.spans_failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.spans_failed += len(spans)
        return SpanExportResult.FAILURE


def _metric(text: str, name: str) -> float:
    [line] = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


def test_dropped_and_failed_spans_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    exporter = _Stuck()
    provider = build_tracer_provider("gate", exporter)
    tracer = provider.get_tracer("t")
    processor = provider.restorelens_processor
    for _ in range(2):  # a full batch: the worker takes it and hangs in the export
        tracer.start_span("s").end()
    deadline = time.monotonic() + 10
    while processor._queue and time.monotonic() < deadline:
        time.sleep(0.01)
    for _ in range(18):  # 4 queued, 14 dropped
        tracer.start_span("s").end()
    app = create_gate_app(GateSettings(upstreams={"*": "http://127.0.0.1:9"}, policy="fcfs"), tracer_provider=provider)
    with TestClient(app) as client:
        text = client.get("/metrics").text
        assert _metric(text, "restorelens_gate_spans_dropped_total") == 14
        assert _metric(text, "restorelens_gate_spans_export_failed_total") == 0
        exporter.release.set()
        provider.shutdown()
        text = client.get("/metrics").text
        assert _metric(text, "restorelens_gate_spans_export_failed_total") == 6


def test_without_tracing_there_is_nothing_to_count() -> None:
    app = create_gate_app(GateSettings(upstreams={"*": "http://127.0.0.1:9"}, policy="fcfs", tracing=False))
    with TestClient(app) as client:
        assert "spans_dropped" not in client.get("/metrics").text
