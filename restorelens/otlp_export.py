"""OTLP/HTTP protobuf export of spans, and the bounded batch processor that feeds it.

``OtlpHttpSpanExporter`` sends what ``otlp_proto.SpanEncoder`` writes over one keep-alive
connection, configured from the standard ``OTEL_EXPORTER_OTLP_*`` variables as the SDK's exporter
is. ``BoundedBatchSpanProcessor`` queues finished spans up to ``max_queue_size`` and counts every
span it had to drop (``dropped_spans``) instead of logging each one. Both keep counters of what they
did, and the exporter the seconds it spent encoding and sending: the gate's benchmark prints them.
"""

from __future__ import annotations

import collections
import gzip
import http.client
import os
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from restorelens.errors import SettingError
from restorelens.otlp_proto import SpanEncoder

__all__ = ["BoundedBatchSpanProcessor", "OtlpHttpSpanExporter", "resolve_endpoint"]

DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"
DEFAULT_TIMEOUT_S = 10.0
#: Statuses worth another attempt (OTLP/HTTP's retryable answers).
_RETRYABLE = frozenset({429, 502, 503, 504})
#: An answer body is read to keep the connection usable, and no further.
_MAX_ANSWER_BYTES = 64 * 1024


def _yield_gil() -> None:
    time.sleep(0)  # lets the event loop's thread run between chunks of a long encode


def _env(name: str, environ: Mapping[str, str]) -> str | None:
    """``OTEL_EXPORTER_OTLP_TRACES_<name>`` or else ``OTEL_EXPORTER_OTLP_<name>``, as the SDK reads them."""
    return environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or environ.get(f"OTEL_EXPORTER_OTLP_{name}")


def resolve_endpoint(endpoint: str | None = None, environ: Mapping[str, str] = os.environ) -> str:
    """The traces URL: the argument, the traces variable as given, the general one + ``/v1/traces``."""
    if endpoint:
        return endpoint
    if traces := environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return traces
    if general := environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return general.rstrip("/") + "/v1/traces"
    return DEFAULT_ENDPOINT


def _headers(environ: Mapping[str, str]) -> dict[str, str]:
    """``key=value`` pairs, comma separated and URL-encoded (the OTLP exporter's format)."""
    raw = _env("HEADERS", environ) or ""
    headers: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingError("OTEL_EXPORTER_OTLP_HEADERS", f"{item.strip()!r} is not key=value")
        headers[urllib.parse.unquote(key.strip()).lower()] = urllib.parse.unquote(value.strip())
    return headers


class OtlpHttpSpanExporter(SpanExporter):
    """POST ``ExportTraceServiceRequest`` protobufs to an OTLP/HTTP endpoint over a kept-alive connection.

    Failed sends are retried (connection errors and 429/502/503/504) with doubling waits until
    ``timeout_s`` has passed since the batch was handed over; then the batch counts as failed.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        compression: str | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.endpoint = resolve_endpoint(endpoint, environ)
        url = urllib.parse.urlsplit(self.endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise SettingError("endpoint", f"{self.endpoint!r} is not an http:// or https:// URL")
        self._scheme, self._host, self._port = url.scheme, url.hostname, url.port
        self._path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        if timeout_s is None:
            raw = _env("TIMEOUT", environ)
            try:
                timeout_s = float(raw) if raw else DEFAULT_TIMEOUT_S
            except ValueError:
                raise SettingError("OTEL_EXPORTER_OTLP_TIMEOUT", f"{raw!r} is not a number of seconds") from None
        self.timeout_s = timeout_s
        compression = (compression or _env("COMPRESSION", environ) or "none").lower()
        if compression not in ("none", "gzip"):
            raise SettingError("OTEL_EXPORTER_OTLP_COMPRESSION", f"{compression!r}: use gzip or none")
        self.gzip = compression == "gzip"
        self._headers = {**_headers(environ), **{k.lower(): v for k, v in (headers or {}).items()}}
        self._headers["content-type"] = "application/x-protobuf"
        if self.gzip:
            self._headers["content-encoding"] = "gzip"
        self._encoder = SpanEncoder()
        self._connection: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()
        self._shutdown = False
        self.spans_exported = 0
        self.spans_failed = 0
        self.batches = 0
        self.encode_s = 0.0  # CPU of the thread that exports, encoding
        self.send_s = 0.0  # ... and sending, answer included

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        with self._lock:
            if self._shutdown:
                return SpanExportResult.FAILURE
            started = time.thread_time()
            body = self._encoder.encode(spans, pause=_yield_gil)
            if self.gzip:
                body = gzip.compress(body, compresslevel=6)
            encoded = time.thread_time()
            ok = self._send(body)
            self.encode_s += encoded - started
            self.send_s += time.thread_time() - encoded
            self.batches += 1
            if ok:
                self.spans_exported += len(spans)
                return SpanExportResult.SUCCESS
            self.spans_failed += len(spans)
            return SpanExportResult.FAILURE

    def _send(self, body: bytes) -> bool:
        deadline = time.monotonic() + self.timeout_s
        wait_s = 0.25
        while True:
            retry, hint_s = True, 0.0
            try:
                status, hint_s = self._post(body, max(0.1, deadline - time.monotonic()))
                if 200 <= status < 300:
                    return True
                retry = status in _RETRYABLE
            except (OSError, http.client.HTTPException):
                self._close()  # a dropped keep-alive connection: the next attempt opens a new one
            pause_s = max(wait_s, hint_s)  # a receiver's Retry-After is the least wait
            if not retry or time.monotonic() + pause_s > deadline or self._shutdown:
                return False
            time.sleep(pause_s)
            wait_s *= 2

    def _post(self, body: bytes, timeout_s: float) -> tuple[int, float]:
        """(status, the answer's Retry-After in seconds or 0)."""
        connection = self._connection
        if connection is None:
            kind = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            connection = self._connection = kind(self._host, self._port, timeout=timeout_s)
        else:
            connection.timeout = timeout_s
            if connection.sock is not None:
                connection.sock.settimeout(timeout_s)
        connection.request("POST", self._path, body, self._headers)
        answer = connection.getresponse()
        answer.read(_MAX_ANSWER_BYTES)
        if answer.will_close or not answer.isclosed():
            self._close()  # the server ends it, or the answer was longer than we read
        retry_after = answer.getheader("retry-after", "")
        return answer.status, float(retry_after) if retry_after.isdigit() else 0.0

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def shutdown(self) -> None:
        self._shutdown = True
        with self._lock:
            self._close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class BoundedBatchSpanProcessor(SpanProcessor):
    """Batches finished spans for an exporter on one background thread; a full queue drops new spans.

    ``max_queue_size`` bounds the memory spans may take while the exporter is slow or its endpoint is
    down; every span refused then is counted in ``dropped_spans`` (and none is logged one by one).
    A batch goes out when ``max_export_batch_size`` spans wait or ``schedule_delay_s`` has passed.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        max_queue_size: int = 2048,
        max_export_batch_size: int = 512,
        schedule_delay_s: float = 5.0,
    ) -> None:
        if max_queue_size < 1 or not 1 <= max_export_batch_size <= max_queue_size or schedule_delay_s <= 0:
            raise SettingError("span processor", "needs 1 <= max_export_batch_size <= max_queue_size and a positive delay")
        self.exporter = exporter
        self.max_queue_size = max_queue_size
        self.max_export_batch_size = max_export_batch_size
        self.schedule_delay_s = schedule_delay_s
        self.dropped_spans = 0
        self.exported_batches = 0
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._wake = threading.Event()
        self._export_lock = threading.Lock()
        self._drop_lock = threading.Lock()
        self._done = False
        self._worker = threading.Thread(target=self._run, name="restorelens-span-export", daemon=True)
        self._worker.start()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        if self._done or not span.context.trace_flags.sampled:
            return
        queue = self._queue
        if len(queue) >= self.max_queue_size:
            with self._drop_lock:  # the rare path: spans may end on several threads
                self.dropped_spans += 1
            return
        queue.append(span)
        if len(queue) >= self.max_export_batch_size and not self._wake.is_set():
            self._wake.set()

    def _run(self) -> None:
        while not self._done:
            # woken: a full batch waits, send full ones; timed out: send whatever waits
            woken = self._wake.wait(self.schedule_delay_s)
            self._wake.clear()
            self._export(everything=not woken)

    def _export(self, *, everything: bool) -> None:
        with self._export_lock:
            queue = self._queue
            while queue and (everything or len(queue) >= self.max_export_batch_size):
                batch = [queue.popleft() for _ in range(min(self.max_export_batch_size, len(queue)))]
                try:
                    self.exporter.export(batch)
                except Exception:  # noqa: BLE001 - an exporter's bug must not stop the worker thread
                    pass
                self.exported_batches += 1

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        if self._done:
            return False
        self._export(everything=True)
        return True

    def shutdown(self) -> None:
        if self._done:
            return
        self._done = True
        self._wake.set()
        self._worker.join()
        self._export(everything=True)
        self.exporter.shutdown()
