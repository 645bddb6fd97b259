"""Build a TracerProvider for one component, with the exporter the user chose.

No global state is touched: callers pass the returned provider to the components that emit spans
(every component accepts an optional ``tracer_provider``) and shut it down when done.

Exporters:
- ``"otlp"`` (default): OTLP/HTTP protobuf (``otlp_export.OtlpHttpSpanExporter``: the SDK's wire
  format without its per-span encoding cost). Honours ``OTEL_EXPORTER_OTLP_ENDPOINT`` and
  ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (default ``http://localhost:4318/v1/traces``), and the
  ``*_HEADERS``, ``*_TIMEOUT`` (seconds) and ``*_COMPRESSION`` (gzip or none) variables.
- ``"file"``: OTLP JSON lines, one ``TracesData`` per batch, as the Collector's file exporter writes.
- ``"memory"``: an ``InMemorySpanExporter`` with a synchronous processor, for tests.
- ``"none"``: spans are created but dropped.
- any ``SpanExporter`` instance.

Batching: ``otlp_export.BoundedBatchSpanProcessor``, sized by ``OTEL_BSP_MAX_QUEUE_SIZE`` (2048),
``OTEL_BSP_MAX_EXPORT_BATCH_SIZE`` (512) and ``OTEL_BSP_SCHEDULE_DELAY`` (5000 ms); spans that find
the queue full are dropped and counted (``provider.restorelens_processor.dropped_spans``).

Service name: ``OTEL_SERVICE_NAME`` wins over the component's default name;
``OTEL_RESOURCE_ATTRIBUTES`` adds resource attributes, as the SDK defines.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from restorelens.errors import InputError, SettingError
from restorelens.otlp_export import BoundedBatchSpanProcessor, OtlpHttpSpanExporter
from restorelens.otlp_json import encode_traces_data

__all__ = ["EXPORTER_NAMES", "JsonLinesSpanExporter", "build_tracer_provider"]

EXPORTER_NAMES = ("otlp", "file", "memory", "none")


class JsonLinesSpanExporter(SpanExporter):
    """Append each exported batch as one OTLP/JSON ``TracesData`` line to a file.

    The file is opened at once, so an unwritable path is an ``InputError`` when the component
    starts rather than spans silently dropped later.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            raise InputError(str(self.path), f"cannot write spans here: {exc.strerror or exc}") from None

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        line = json.dumps(encode_traces_data(spans), separators=(",", ":"))
        try:
            with self._lock:
                if self._file is None:  # exported after shutdown: nothing may be written
                    return SpanExportResult.FAILURE
                self._file.write(line + "\n")
                self._file.flush()
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class _DropSpanExporter(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _resource(service_name: str, resource_attributes: Mapping[str, Any] | None) -> Resource:
    # Resource.create lets our attributes override the environment's; the component's name is
    # only a default, so it yields to OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES when they name one.
    attributes: dict[str, Any] = dict(resource_attributes or {})
    if not OTELResourceDetector().detect().attributes.get(SERVICE_NAME):
        attributes.setdefault(SERVICE_NAME, service_name)
    return Resource.create(attributes)


def _positive_int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise SettingError(name, f"{raw!r} is not a positive whole number")
    return value


def _batch_processor(exporter: SpanExporter, environ: Mapping[str, str]) -> BoundedBatchSpanProcessor:
    """The batch processor, sized by the SDK's own ``OTEL_BSP_*`` variables."""
    queue = _positive_int(environ, "OTEL_BSP_MAX_QUEUE_SIZE", 2048)
    batch = _positive_int(environ, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)
    if batch > queue:
        raise SettingError("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", f"{batch} is larger than OTEL_BSP_MAX_QUEUE_SIZE ({queue})")
    delay_ms = _positive_int(environ, "OTEL_BSP_SCHEDULE_DELAY", 5000)
    return BoundedBatchSpanProcessor(exporter, max_queue_size=queue, max_export_batch_size=batch,
                                     schedule_delay_s=delay_ms / 1000)


def build_tracer_provider(
    service_name: str,
    exporter: str | SpanExporter = "otlp",
    *,
    endpoint: str | None = None,
    path: str | os.PathLike[str] | None = None,
    resource_attributes: Mapping[str, Any] | None = None,
    batch: bool | None = None,
) -> TracerProvider:
    """A TracerProvider for one component.

    Args:
        service_name: the component's default ``service.name`` (``OTEL_SERVICE_NAME`` overrides it).
        exporter: one of ``EXPORTER_NAMES`` or a ``SpanExporter``.
        endpoint: OTLP/HTTP traces URL; default from the environment, then localhost:4318.
        path: output file for the ``"file"`` exporter.
        resource_attributes: extra resource attributes.
        batch: use a BatchSpanProcessor; default True except for ``"memory"``.

    The exporter is reachable as ``provider.restorelens_exporter`` (the in-memory one, for tests)
    and the span processor as ``provider.restorelens_processor``.
    """
    span_exporter: SpanExporter
    if isinstance(exporter, SpanExporter):
        span_exporter = exporter
    elif exporter == "otlp":
        span_exporter = OtlpHttpSpanExporter(endpoint)
    elif exporter == "file":
        if path is None:
            raise SettingError("exporter", "the 'file' exporter needs a path")
        span_exporter = JsonLinesSpanExporter(path)
    elif exporter == "memory":
        span_exporter = InMemorySpanExporter()
    elif exporter == "none":
        span_exporter = _DropSpanExporter()
    else:
        raise SettingError("exporter", f"unknown exporter {exporter!r}; choose one of {', '.join(EXPORTER_NAMES)}")
    if batch is None:
        batch = exporter != "memory"
    provider = TracerProvider(resource=_resource(service_name, resource_attributes))
    processor = _batch_processor(span_exporter, os.environ) if batch else SimpleSpanProcessor(span_exporter)
    provider.add_span_processor(processor)
    provider.restorelens_exporter = span_exporter  # type: ignore[attr-defined]
    provider.restorelens_processor = processor  # type: ignore[attr-defined]
    return provider
