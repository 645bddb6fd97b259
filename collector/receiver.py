"""The OTLP/HTTP trace receiver: ``POST /v1/traces`` into a span store (reference section 2).

Answers, in the request's encoding (protobuf or JSON; JSON when the request's type is unknown):
200 ``ExportTraceServiceResponse`` once the spans are committed (``partial_success`` when some were
rejected); 400 ``google.rpc.Status`` saying what is wrong; 401 without the bearer token when one is
set; 404/405 for other paths and methods; 413 above ``max_body_bytes`` (compressed or not); 431 at
once for a request line plus headers above ``max_header_bytes``; 415 for other content types or
encodings; 429 (backlog full) and 503 (store locked by a reader too long, or failing) with
``Retry-After``. ``GET /metrics`` counts spans stored and rejected and requests refused per limit,
and, for each engine scraped (``scrape_targets``: collector/scrape/), scrapes by outcome, scrapes
cut at ``max_series_per_scrape``, and the samples stored or dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from restorelens.collector.decode_json import decode_traces_json, loads, may_hold_surrogates
from restorelens.collector.http_body import BodyTooLarge, CorruptBody, UnsupportedEncoding, body_decoder
from restorelens.collector.phases import DECODE, Phases
from restorelens.collector.proto_columns import decode_traces_proto_columns
from restorelens.collector.rows import PayloadError, SpanRows
from restorelens.collector.scrape import (
    DEFAULT_INTERVAL_S,
    DEFAULT_MAX_SCRAPE_BYTES,
    DEFAULT_MAX_SERIES_PER_SCRAPE,
    DEFAULT_SCRAPE_TIMEOUT_S,
    ScrapeCounts,
    Scraper,
)
from restorelens.collector.writer import DEFAULT_MAX_PENDING_SAMPLES, Overloaded, StoreWriter
from restorelens.serving import DEFAULT_MAX_HEADER_BYTES, HeadLimit

__all__ = ["DEFAULT_MAX_BODY_BYTES", "TRACES_PATH", "create_receiver_app"]

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_MAX_MESSAGES_IN_ANSWER = 20
# google.rpc.Code for each HTTP status we send (grpc/grpc doc/http-grpc-status-mapping.md, reversed).
_RPC_CODE = {400: 3, 401: 16, 404: 5, 405: 12, 413: 11, 415: 3, 429: 8, 431: 11, 500: 13, 503: 14}
#: The size limits a request can be refused for, by option: the keys of the refusal counts.
REFUSAL_LIMITS = ("max_header_bytes", "max_body_bytes")


class ReceiverCollector(Collector):
    """/metrics, read from the receiver's counts at scrape time (the request path only adds)."""

    def __init__(self, counts: dict[str, int], refusals: dict[str, int], scrapes: dict[str, ScrapeCounts]) -> None:
        self.counts, self.refusals, self.scrapes = counts, refusals, scrapes

    def collect(self):  # -> Iterator[CounterMetricFamily]
        prefix = "restorelens_collector_"
        yield CounterMetricFamily(prefix + "spans_stored", "Spans committed to the store", value=self.counts["stored"])
        yield CounterMetricFamily(prefix + "spans_rejected", "Spans rejected alone (partial success)", value=self.counts["rejected"])
        refused = CounterMetricFamily(prefix + "refused", "Requests refused for passing a size limit, by the limit's option", labels=["limit"])
        for limit, count in sorted(self.refusals.items()):
            refused.add_metric([limit], count)
        yield refused
        if not self.scrapes:
            return
        scrapes = CounterMetricFamily(prefix + "scrapes", "Scrapes of each engine's /metrics, by outcome (ok, failed)", labels=["target", "outcome"])
        stored = CounterMetricFamily(prefix + "engine_samples_stored", "Engine metric samples stored in engine_metrics", labels=["target"])
        dropped = CounterMetricFamily(
            prefix + "engine_samples_dropped", "Engine metric samples scraped but not stored (store busy, behind or failing)", labels=["target"]
        )
        capped = CounterMetricFamily(
            prefix + "scrapes_capped",
            "Scrapes whose answer held more series of the kept metrics than --max-series-per-scrape (the rest not read or stored)",
            labels=["target"],
        )
        for target, c in self.scrapes.items():
            scrapes.add_metric([target, "ok"], c.ok)
            scrapes.add_metric([target, "failed"], c.failed)
            stored.add_metric([target], c.samples_stored)
            dropped.add_metric([target], c.samples_dropped)
            capped.add_metric([target], c.capped)
        yield from (scrapes, stored, dropped, capped)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _status(media_type: str, http_status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    code = _RPC_CODE.get(http_status, 2)
    if media_type == PROTOBUF:
        body = status_pb2.Status(code=code, message=message).SerializeToString()
        return Response(body, http_status, headers=headers, media_type=PROTOBUF)
    body_json = json.dumps({"code": code, "message": message, "details": []})
    return Response(body_json, http_status, headers=headers, media_type=JSON)


def _success(media_type: str, rows: SpanRows) -> Response:
    message = ""
    if rows.errors:
        shown = rows.errors[:_MAX_MESSAGES_IN_ANSWER]
        more = rows.rejected - len(shown)
        message = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    if media_type == PROTOBUF:
        answer = ExportTraceServiceResponse()
        if rows.rejected:
            answer.partial_success.rejected_spans = rows.rejected
            answer.partial_success.error_message = message
        return Response(answer.SerializeToString(), 200, media_type=PROTOBUF)
    body: dict[str, Any] = {}
    if rows.rejected:
        body["partialSuccess"] = {"rejectedSpans": str(rows.rejected), "errorMessage": message}
    return Response(json.dumps(body), 200, media_type=JSON)


def _decode(media_type: str, body: bytes, phases: Phases) -> SpanRows:
    with phases.timing(DECODE):
        return _decode_rows(media_type, body)


def _decode_rows(media_type: str, body: bytes) -> SpanRows:
    rows = SpanRows()
    if media_type == PROTOBUF:
        decode_traces_proto_columns(body, rows)
        return rows
    try:
        parsed = loads(body)
    except (ValueError, RecursionError) as exc:
        raise PayloadError(f"invalid JSON: {exc}") from None
    decode_traces_json(parsed, rows, check_unicode=may_hold_surrogates(body))
    return rows


def create_receiver_app(
    db_path: str | os.PathLike[str],
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    max_pending_spans: int = 200_000,
    lock_timeout_s: float = 5.0,
    retry_after_s: int = 1,
    writer_options: dict[str, Any] | None = None,
    scrape_targets: Sequence[str] = (),
    scrape_interval_s: float = DEFAULT_INTERVAL_S,
    scrape_timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S,
    max_scrape_bytes: int = DEFAULT_MAX_SCRAPE_BYTES,
    max_series_per_scrape: int = DEFAULT_MAX_SERIES_PER_SCRAPE,
) -> Starlette:
    """A Starlette app receiving OTLP/HTTP traces into the DuckDB file ``db_path``.

    The store opens now (so a locked or unwritable file fails here); its writer thread runs with the
    app's lifespan (or from the first request) and is drained and closed at shutdown. Each of
    ``scrape_targets`` (a Prometheus /metrics URL) is scraped into ``engine_metrics`` every
    ``scrape_interval_s`` during the lifespan, through the same writer, at most
    ``max_series_per_scrape`` series a scrape (no more than the writer's ``max_pending_samples``:
    a larger scrape could never be taken; ValueError).
    """
    max_pending_samples = (writer_options or {}).get("max_pending_samples", DEFAULT_MAX_PENDING_SAMPLES)
    if max_series_per_scrape > max_pending_samples:  # before the store file is created
        raise ValueError(
            f"max_series_per_scrape {max_series_per_scrape} exceeds the writer's max_pending_samples "
            f"{max_pending_samples}: no scrape that large could be stored"
        )
    # each step's CPU measured on the thread doing it: requests decode concurrently with the writer
    phases = Phases(time.thread_time)
    writer = StoreWriter(
        db_path, max_pending_spans=max_pending_spans, lock_timeout_s=lock_timeout_s, phases=phases,
        **(writer_options or {}),
    )
    expected_token = token.encode() if token else None
    retry_after = {"Retry-After": str(retry_after_s)}
    counts = {"stored": 0, "rejected": 0}
    refusals = dict.fromkeys(REFUSAL_LIMITS, 0)
    registry = CollectorRegistry(auto_describe=True)
    scraper = Scraper(
        scrape_targets, writer, interval_s=scrape_interval_s, timeout_s=scrape_timeout_s, max_scrape_bytes=max_scrape_bytes,
        max_series_per_scrape=max_series_per_scrape,
    )
    registry.register(ReceiverCollector(counts, refusals, scraper.counts))

    def too_large(answer_type: str, message: str) -> Response:
        refusals["max_body_bytes"] += 1
        return _status(answer_type, 413, message)

    async def export_traces(request: Request) -> Response:
        media_type = _media_type(request)
        answer_type = media_type if media_type in (PROTOBUF, JSON) else JSON
        if expected_token is not None:
            # RFC 7235: the scheme is case-insensitive (some clients send "bearer"), the token is
            # not; compared in constant time, as the gate's admin token is
            scheme, _, given = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), expected_token):
                headers = {"WWW-Authenticate": "Bearer"}
                return _status(answer_type, 401, "missing or wrong bearer token", headers)
        if media_type not in (PROTOBUF, JSON):
            message = f"unsupported media type {media_type!r}, supported: [{JSON}, {PROTOBUF}]"
            return _status(answer_type, 415, message)
        try:
            declared = int(request.headers.get("content-length", "0") or 0)
        except ValueError:
            return _status(answer_type, 400, "invalid Content-Length")
        if declared > max_body_bytes:
            return too_large(answer_type, f"request body exceeds {max_body_bytes} bytes")
        try:
            decoder = body_decoder(request.headers.get("content-encoding", ""), max_body_bytes)
            async for chunk in request.stream():
                decoder.feed(chunk)
            body = decoder.finish()
        except UnsupportedEncoding as exc:
            return _status(answer_type, 415, str(exc))
        except BodyTooLarge as exc:
            return too_large(answer_type, str(exc))
        except CorruptBody as exc:
            return _status(answer_type, 400, str(exc))
        try:
            rows = await run_in_threadpool(_decode, media_type, body, phases)
        except PayloadError as exc:
            return _status(answer_type, 400, str(exc))
        if not len(rows):
            counts["rejected"] += rows.rejected
            return _success(answer_type, rows)
        writer.start()
        try:
            future = writer.submit(rows)
        except Overloaded as exc:
            return _status(answer_type, 429, f"receiver overloaded: {exc}; retry later", retry_after)
        try:
            await asyncio.wrap_future(future)
        except Exception as exc:  # StoreBusy or a storage failure: nothing was committed
            return _status(answer_type, 503, f"span store unavailable: {exc}", retry_after)
        counts["stored"] += len(rows)
        counts["rejected"] += rows.rejected  # here, not before the write: a 429 or 503 batch comes again
        return _success(answer_type, rows)

    async def metrics(request: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _status(_media_type(request), exc.status_code, exc.detail, dict(exc.headers or {}))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        writer.start()
        scraper.start()
        try:
            yield
        finally:
            await run_in_threadpool(scraper.stop)  # first: its last rows go in with the writer's drain
            await run_in_threadpool(writer.stop)

    app = Starlette(
        routes=[Route(TRACES_PATH, export_traces, methods=["POST"]), Route("/metrics", metrics, methods=["GET"])],
        exception_handlers={HTTPException: http_error},
        lifespan=lifespan,
    )
    app.state.writer = writer
    app.state.phases = phases  # seconds per step: decoding here, the writer's store steps
    app.state.scraper = scraper

    def head_refused() -> None:
        refusals["max_header_bytes"] += 1

    # The server answers an oversize head before any route runs; JSON, since its type is unread.
    app.state.head_limit = HeadLimit(max_header_bytes, lambda status, message: (JSON.encode(), _status(JSON, status, message).body), head_refused)
    return app
