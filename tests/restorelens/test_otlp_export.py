"""OTLP/HTTP export into the project's own receiver, and the bounded batch processor.

The receiver is the real one (``create_receiver_app`` under uvicorn, a DuckDB file); a stand-in
answers statuses the receiver would not give on demand (retries, refusals).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from restorelens import spans as S
from restorelens.collector.receiver import create_receiver_app
from restorelens.store import open_read_only
from restorelens.errors import SettingError
from restorelens.otlp_export import BoundedBatchSpanProcessor, OtlpHttpSpanExporter, resolve_endpoint
from restorelens.serving import ServerThread
from restorelens.telemetry import build_tracer_provider

Serve = Callable[..., ServerThread]


def _spans(count: int, service: str = "gate") -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("restorelens.gate")
    for i in range(count):
        with tracer.start_as_current_span(S.SPAN_GATE_REQUEST, attributes={S.ATTR_REQUEST_ID: f"r{i}"}) as span:
            span.add_event(S.EVENT_GRANT_ACQUIRED, {S.ATTR_GATE_SLOT: i})
    return list(memory.get_finished_spans())


def _stored(db: Path) -> list[tuple[str, str, str]]:
    with open_read_only(db) as con:
        return con.execute(
            'select "ServiceName", "SpanName", "SpanAttributes"[$key] from otel_traces order by 3',
            {"key": S.ATTR_REQUEST_ID},
        ).fetchall()


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_the_projects_receiver_stores_what_the_exporter_sends(tmp_path: Path, serve_asgi: Serve, compression: str) -> None:
    db = tmp_path / "spans.duckdb"
    server = serve_asgi(create_receiver_app(db, token="s3cret"))
    exporter = OtlpHttpSpanExporter(server.url + "/v1/traces", compression=compression,
                                    environ={"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20s3cret"})
    spans = _spans(700)
    assert exporter.export(spans[:500]) is SpanExportResult.SUCCESS
    assert exporter.export(spans[500:]) is SpanExportResult.SUCCESS  # the same kept-alive connection
    exporter.shutdown()
    server.stop()  # the receiver commits what it acknowledged
    stored = _stored(db)
    assert len(stored) == 700
    assert {row[:2] for row in stored} == {("gate", S.SPAN_GATE_REQUEST)}
    assert sorted(row[2] for row in stored) == sorted(f"r{i}" for i in range(700))
    assert exporter.spans_exported == 700 and exporter.spans_failed == 0 and exporter.batches == 2


def test_without_the_token_the_receiver_refuses_and_the_batch_fails(tmp_path: Path, serve_asgi: Serve) -> None:
    server = serve_asgi(create_receiver_app(tmp_path / "s.duckdb", token="s3cret"))
    exporter = OtlpHttpSpanExporter(server.url + "/v1/traces", environ={})
    assert exporter.export(_spans(3)) is SpanExportResult.FAILURE  # 401 is not worth a retry
    exporter.shutdown()
    assert exporter.spans_failed == 3


class _Answers:
    """An OTLP endpoint that answers the statuses it is given, in order, then 200."""

    def __init__(self, statuses: Sequence[int], retry_after: str | None = None) -> None:
        self.statuses, self.retry_after, self.times = list(statuses), retry_after, []

    async def traces(self, request: Request) -> Response:
        await request.body()
        self.times.append(time.monotonic())
        status = self.statuses.pop(0) if self.statuses else 200
        headers = {"retry-after": self.retry_after} if self.retry_after and status != 200 else None
        return Response(b"", status, headers=headers)

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/traces", self.traces, methods=["POST"])])


def test_busy_answers_are_retried_after_the_receivers_hint(serve_asgi: Serve) -> None:
    answers = _Answers([503, 429], retry_after="1")
    server = serve_asgi(answers.app())
    exporter = OtlpHttpSpanExporter(server.url + "/v1/traces", timeout_s=10, environ={})
    assert exporter.export(_spans(2)) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert len(answers.times) == 3
    assert answers.times[1] - answers.times[0] >= 0.9  # Retry-After: 1, not the 0.25 s first backoff


def test_retries_stop_at_the_timeout(serve_asgi: Serve) -> None:
    answers = _Answers([503] * 100)
    server = serve_asgi(answers.app())
    exporter = OtlpHttpSpanExporter(server.url + "/v1/traces", timeout_s=0.6, environ={})
    assert exporter.export(_spans(1)) is SpanExportResult.FAILURE
    exporter.shutdown()
    assert 2 <= len(answers.times) <= 3  # 0.25 s then 0.5 s waits: the second would pass the timeout


def test_an_unreachable_endpoint_fails_the_batch(serve_asgi: Serve) -> None:
    server = serve_asgi(_Answers([]).app())
    url = server.url + "/v1/traces"
    server.stop()
    exporter = OtlpHttpSpanExporter(url, timeout_s=0.3, environ={})
    assert exporter.export(_spans(2)) is SpanExportResult.FAILURE
    exporter.shutdown()


def test_settings_come_from_the_standard_variables() -> None:
    assert resolve_endpoint(environ={}) == "http://localhost:4318/v1/traces"
    assert resolve_endpoint(environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    assert resolve_endpoint(environ={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x"}) == "http://t/x"
    exporter = OtlpHttpSpanExporter(environ={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2.5", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"})
    assert exporter.timeout_s == 2.5 and exporter.gzip


@pytest.mark.parametrize(("environ", "named"), [
    ({"OTEL_EXPORTER_OTLP_COMPRESSION": "brotli"}, "OTEL_EXPORTER_OTLP_COMPRESSION"),
    ({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
    ({"OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS"),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://x"}, "endpoint"),
])
def test_bad_settings_are_one_line_errors(environ: dict[str, str], named: str) -> None:
    with pytest.raises(SettingError) as error:
        OtlpHttpSpanExporter(environ=environ)
    assert named in str(error.value) and "\n" not in str(error.value)


class _Gated(SpanExporter):
    """Holds each export until released: a slow endpoint, on demand."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.release = threading.Event()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.release.wait(10)
        self.batches.append(len(spans))
        return SpanExportResult.SUCCESS


def test_a_full_queue_drops_new_spans_and_counts_them() -> None:
    exporter = _Gated()
    processor = BoundedBatchSpanProcessor(exporter, max_queue_size=10, max_export_batch_size=4, schedule_delay_s=30)
    spans = _spans(30)
    for span in spans[:4]:
        processor.on_end(span)  # a full batch: the worker takes it and blocks in the slow export
    deadline = time.monotonic() + 5
    while len(processor._queue) and time.monotonic() < deadline:
        time.sleep(0.01)
    for span in spans[4:]:
        processor.on_end(span)
    assert processor.dropped_spans == 30 - 4 - 10  # 4 in the export, 10 queued, the rest refused
    exporter.release.set()
    processor.shutdown()
    assert sum(exporter.batches) == 14 and max(exporter.batches) <= 4


def test_spans_go_out_after_the_schedule_delay_without_a_full_batch() -> None:
    exporter = InMemorySpanExporter()
    processor = BoundedBatchSpanProcessor(exporter, max_queue_size=100, max_export_batch_size=50, schedule_delay_s=0.1)
    for span in _spans(3):
        processor.on_end(span)
    deadline = time.monotonic() + 5
    while len(exporter.get_finished_spans()) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(exporter.get_finished_spans()) == 3
    processor.shutdown()


def test_force_flush_and_shutdown_send_everything() -> None:
    exporter = InMemorySpanExporter()
    processor = BoundedBatchSpanProcessor(exporter, max_queue_size=100, max_export_batch_size=50, schedule_delay_s=60)
    for span in _spans(7):
        processor.on_end(span)
    assert processor.force_flush()
    assert len(exporter.get_finished_spans()) == 7
    processor.on_end(_spans(1)[0])
    processor.shutdown()
    assert len(exporter.get_finished_spans()) == 8
    processor.on_end(_spans(1)[0])  # after shutdown: ignored, not queued
    assert len(processor._queue) == 0


@pytest.mark.parametrize(("name", "value"), [
    ("OTEL_BSP_MAX_QUEUE_SIZE", "0"), ("OTEL_BSP_SCHEDULE_DELAY", "x"), ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5000"),
])
def test_the_providers_processor_is_sized_by_the_bsp_variables(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingError) as error:
        build_tracer_provider("svc", "none")
    assert name in str(error.value)


def test_the_provider_exposes_its_processor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
    provider = build_tracer_provider("svc", "none")
    try:
        processor = provider.restorelens_processor
        assert isinstance(processor, BoundedBatchSpanProcessor)
        assert (processor.max_queue_size, processor.max_export_batch_size, processor.schedule_delay_s) == (64, 16, 5.0)
    finally:
        provider.shutdown()
