"""Count the span batches an exporter could not export, so a run that lost spans can say so.

The SDK's span processors log a failed export and carry on, so a run against an unreachable
collector (the OTLP exporter gives up after its retries) or a file that fails mid-run would end
with exit status 0 and nothing recorded. ``CountingExporter`` wraps the run's exporter and counts
every batch the inner exporter did not accept; ``raise_if_dropped`` turns any into one error line
naming the destination, for ``restorelens run`` and ``restorelens probe`` to exit non-zero.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from restorelens.errors import RestorelensError

__all__ = ["CountingExporter"]


class CountingExporter(SpanExporter):
    """Exports through ``inner``; counts the batches (and their spans) that failed."""

    def __init__(self, inner: SpanExporter, destination: str) -> None:
        self.inner, self.destination = inner, destination
        self.failed_batches = 0
        self.failed_spans = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:
            self._failed(len(spans))
            raise  # the processor logs it, as it would without this wrapper
        if result is not SpanExportResult.SUCCESS:
            self._failed(len(spans))
        return result

    def _failed(self, spans: int) -> None:
        with self._lock:
            self.failed_batches += 1
            self.failed_spans += spans

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def raise_if_dropped(self) -> None:
        """A ``RestorelensError`` (exit status 1) when any batch failed; call after the flush."""
        if self.failed_batches:
            batches = "batch" if self.failed_batches == 1 else "batches"
            raise RestorelensError(f"{self.failed_batches} span {batches} ({self.failed_spans} spans) "
                                   f"could not be exported to {self.destination}")
