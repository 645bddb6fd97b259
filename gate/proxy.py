"""The I/O shell around the admission core: one raw-ASGI endpoint per OpenAI inference path.

Per request: read and parse the body (400 on bad JSON, before anything else), route by model (the
static upstream table, or the ``ModelRouter`` for lifecycle-managed models), ask ``Admission`` for a
grant (wait on a future while queued), forward through the pooled, instrumented httpx transport and
stream the answer back chunk by chunk. A watcher on ``receive()`` notices a client disconnect while
queued or streaming. The grant, the router's started/finished pair and the span are each closed in
one ``finally``: every grant is released exactly once however the request ends.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import httpx
from opentelemetry import context, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from restorelens import spans as S
from restorelens.clock import Clock
from restorelens.spans import TRAFFIC_CLASSES

from .admission import Admission, Grant, Rejection, Waiter
from .gate_spans import GateSpans
from .retry_hint import retry_after_header
from .routing import ModelRouter, NotReady, Routed
from .settings import ANY_MODEL, GateSettings
from .upstream_transport import Origin, UpstreamTransport, origin_of, request_bytes

__all__ = ["ProxyEndpoint", "UpstreamTable", "error_body"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

TRAFFIC_CLASS_HEADER = b"x-traffic-class"
REQUEST_ID_HEADER = b"x-request-id"
RETRY_AFTER_MS_HEADER = b"x-restorelens-retry-after-ms"
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
     b"transfer-encoding", b"upgrade", b"host", b"content-length"}
)
_HOP_BY_HOP_ANSWER = _HOP_BY_HOP - {b"content-length"}
_URL_CACHE_SIZE = 256
_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})
_PROPAGATOR = TraceContextTextMapPropagator()


def error_body(status: int, message: str, error_type: str) -> bytes:
    """OpenAI-style JSON error (clients of OpenAI-compatible servers already parse this shape)."""
    return json.dumps({"error": {"message": message, "type": error_type, "code": status}}).encode()


class UpstreamTable:
    """Model -> engine base URLs; several URLs for one model are used in turn."""

    def __init__(self, upstreams: Mapping[str, list[str]]) -> None:
        self._cycles: dict[str, Iterator[str]] = {m: itertools.cycle([u.rstrip("/") for u in urls]) for m, urls in upstreams.items()}
        self.urls = {m: [u.rstrip("/") for u in urls] for m, urls in upstreams.items()}

    def pick(self, model: str | None) -> str | None:
        cycle = self._cycles.get(model or ANY_MODEL) or self._cycles.get(ANY_MODEL)
        return next(cycle) if cycle is not None else None


class _ClientGone(Exception):
    """The client went away before the request was complete."""


class _Answer(Exception):
    """The gate answers by itself (status, JSON body, extra headers) instead of forwarding."""

    def __init__(self, status: int, message: str, error_type: str, headers: list[tuple[bytes, bytes]] | None = None):
        super().__init__(message)
        self.status, self.message, self.error_type, self.headers = status, message, error_type, headers or []


async def _send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body})


class ProxyEndpoint:
    """Raw ASGI app for ``POST /v1/completions`` and ``POST /v1/chat/completions``."""

    def __init__(
        self,
        *,
        settings: GateSettings,
        admission: Admission,
        emitter: GateSpans,
        transport: httpx.AsyncBaseTransport,
        upstream: UpstreamTransport,
        timeout: httpx.Timeout,
        upstreams: UpstreamTable,
        clock: Clock,
        router: ModelRouter | None,
        tracer_provider: Any,
        waiters: dict[Waiter, asyncio.Future[Grant]],
    ) -> None:
        self.settings = settings
        self.admission = admission
        self.emitter = emitter
        self.transport = transport  # the instrumented one when tracing
        self.upstream = upstream  # the pool itself: the untraced path skips httpx's request/response models
        self._raw_routes: dict[str, tuple[Origin, bytes, bytes]] = {}
        self.timeout_extension = timeout.as_dict()
        self._urls: dict[str, httpx.URL] = {}
        self._ids = random.Random()  # its own generator: a seeded global `random` must not repeat ids
        self.upstreams = upstreams
        self.clock = clock
        # asyncio waits in real seconds; a ScaledClock (demo, `run --time-scale X`) runs X times faster.
        self._real_s_per_clock_s = 1.0 / getattr(clock, "time_scale", 1.0)
        self.router = router
        self.router_models = frozenset(router.models()) if router is not None else frozenset()
        self.tracing = tracer_provider is not None
        self.waiters = waiters
        self.upstream_errors: dict[str, int] = {"refused": 0, "timeout": 0, "broken": 0}

    def _request_headers(self, headers: list[tuple[bytes, bytes]]) -> tuple[str, str, Context | None]:
        """(request id, traffic class, the caller's trace context) in one pass over the headers."""
        request_id = traffic_class = b""
        carrier: dict[str, str] = {}
        for name, value in headers:  # uvicorn gives lower-case names
            if name == REQUEST_ID_HEADER:
                request_id = value
            elif name == TRAFFIC_CLASS_HEADER:
                traffic_class = value
            elif name in _TRACE_HEADERS:
                carrier[name.decode("latin-1")] = value.decode("latin-1")
        parent = _PROPAGATOR.extract(carrier) if carrier and self.tracing else None
        return (
            request_id.decode("latin-1") or f"{self._ids.getrandbits(128):032x}",
            traffic_class.decode("latin-1") or self.settings.default_traffic_class,
            parent,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id, traffic_class, parent = self._request_headers(scope["headers"])
        now_s = self.clock.now_s()
        early: _Answer | _ClientGone | None = None
        payload: dict[str, Any] = {}
        body = b""
        try:
            body = await self._read_body(receive)
            payload = self._parse(body, traffic_class)
        except (_Answer, _ClientGone) as exc:
            early = exc
        model = payload.get("model")
        # Started once the model is known (one attribute write less); the start time is the arrival.
        span = self.emitter.start_request(
            request_id, traffic_class, now_s, model=model if isinstance(model, str) else None, parent=parent
        )
        status: int | None = None
        watch: _DisconnectWatch | None = None
        try:
            if early is not None:
                raise early
            upstream = self._route(model, span, now_s)
            # Admission and forwarding run in this task; a watcher on receive() (after the body it
            # only says disconnect) cancels it wherever it waits: queue, upstream, a slow stream.
            watch = _DisconnectWatch(receive)
            status = await self._serve(scope, send, payload, body, model, upstream, request_id, traffic_class, span, watch)
        except _Answer as answer:
            status = answer.status
            if watch is not None:
                watch.finished = True
            if answer.error_type not in ("admission_rejected", "not_ready"):
                self.emitter.failed(span, answer.error_type, status)
            await _send_json(send, status, error_body(status, answer.message, answer.error_type), answer.headers)
        except _ClientGone:
            span.set_attribute(S.ATTR_ERROR_TYPE, "client_disconnected")
        except asyncio.CancelledError:
            if watch is None or not watch.absorb():
                raise  # cancelled from outside (shutdown): _serve's finally has released the grant
            span.set_attribute(S.ATTR_ERROR_TYPE, "client_disconnected")
        finally:
            if watch is not None:
                watch.stop()
            self.emitter.end_request(span, request_id, self.clock.now_s(), status)

    async def _serve(
        self, scope: Scope, send: Send, payload: dict[str, Any], body: bytes, model: str | None, upstream: str,
        request_id: str, traffic_class: str, span: Span, watch: _DisconnectWatch,
    ) -> int:
        grant: Grant | None = None
        routed_model: str | None = None
        try:
            grant = await self._admit(request_id, traffic_class, span, upstream)
            if self.router is not None and model in self.router_models:
                routed_model = model
                self.router.request_started(model, self.clock.now_s())
            priority = self.admission.policy.upstream_priority(traffic_class)
            if priority is not None:
                payload["priority"] = priority
                body = json.dumps(payload).encode()
            return await self._forward(scope, send, scope["headers"], body, upstream, span, watch)
        finally:
            end_s = self.clock.now_s()
            if grant is not None:
                self.admission.release(grant, end_s)
            if routed_model is not None and self.router is not None:
                self.router.request_finished(routed_model, end_s)

    # --- steps -------------------------------------------------------------------------------

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.settings.max_body_bytes:
                raise _Answer(413, f"request body exceeds {self.settings.max_body_bytes} bytes", "request_too_large")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _parse(self, body: bytes, traffic_class: str) -> dict[str, Any]:
        if traffic_class not in TRAFFIC_CLASSES:
            raise _Answer(400, f"x-traffic-class {traffic_class!r} is not one of {', '.join(TRAFFIC_CLASSES)}", "invalid_request_error")
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            # The position only, never the text: the body is a prompt.
            raise _Answer(400, f"request body is not valid JSON (line {getattr(exc, 'lineno', 1)}, column {getattr(exc, 'colno', 0)})", "invalid_request_error") from None
        if not isinstance(payload, dict):
            raise _Answer(400, "request body must be a JSON object", "invalid_request_error")
        return payload

    def _route(self, model: Any, span: Span, now_s: float) -> str:
        if model is not None and not isinstance(model, str):
            raise _Answer(400, "'model' must be a string", "invalid_request_error")
        if self.router is not None and model in self.router_models:
            answer = self.router.route(model, now_s, trigger=span.get_span_context())
            if isinstance(answer, Routed):
                return answer.upstream_url.rstrip("/")
            if isinstance(answer, NotReady):
                self.emitter.not_ready(span, answer.phase, answer.reason, answer.status_code, answer.retry_after_s)
                extra = [] if answer.retry_after_s is None else [(b"retry-after", str(answer.retry_after_s).encode())]
                message = answer.message or f"model {model!r} is not ready ({answer.phase}/{answer.reason})"
                raise _Answer(answer.status_code, message, "not_ready", extra)
        else:
            upstream = self.upstreams.pick(model)
            if upstream is not None:
                return upstream
        # AIBrix's gateway answers 400 for a model it does not manage; a plain proxy says 404.
        status = 400 if self.router is not None else 404
        raise _Answer(status, f"model {model!r} is not served by this gate", "model_not_found")

    async def _admit(self, request_id: str, traffic_class: str, span: Span, upstream: str) -> Grant:
        decision = self.admission.request(request_id, traffic_class, self.clock.now_s())
        if isinstance(decision, Waiter):
            decision = await self._wait(decision)
        if isinstance(decision, Rejection):
            self.emitter.rejected(span, decision)
            extra: list[tuple[bytes, bytes]] = []
            if decision.retry_after_ms is not None:
                extra.append((RETRY_AFTER_MS_HEADER, str(decision.retry_after_ms).encode()))
                header = retry_after_header(decision.retry_after_ms)
                if header is not None:
                    extra.append((b"retry-after", header.encode()))
            raise _Answer(429, f"{traffic_class} request not admitted ({decision.reason})", "admission_rejected", extra)
        self.emitter.granted(span, decision, upstream=upstream)
        return decision

    async def _wait(self, waiter: Waiter) -> Grant | Rejection:
        """Park on a future until a release grants the waiter or its deadline passes."""
        future: asyncio.Future[Grant] = asyncio.get_running_loop().create_future()
        self.waiters[waiter] = future
        try:
            wait_s = max(0.0, waiter.deadline_s - self.clock.now_s()) * self._real_s_per_clock_s
            await asyncio.wait({future}, timeout=wait_s)
        except BaseException:
            # Cancelled (client gone, shutdown): leave the queue, or give back a grant made meanwhile.
            self.waiters.pop(waiter, None)
            answer = self.admission.withdraw(waiter, self.clock.now_s())
            if isinstance(answer, Grant):
                self.admission.release(answer, self.clock.now_s())
            raise
        self.waiters.pop(waiter, None)
        return self.admission.withdraw(waiter, self.clock.now_s(), "timeout")

    async def _forward(
        self, scope: Scope, send: Send, headers: list[tuple[bytes, bytes]], body: bytes, upstream: str,
        span: Span, watch: _DisconnectWatch,
    ) -> int:
        target = upstream + scope["path"]
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        out_headers = [(k, v) for k, v in headers if k not in _HOP_BY_HOP]
        try:
            if self.tracing:
                status, answer_headers, stream = await self._send_traced(scope["method"], target, out_headers, body, span)
            else:
                origin, raw_path, host = self._route_bytes(target)
                data = request_bytes(scope["method"].encode("ascii"), raw_path, host, out_headers, body)
                status, answer_headers, stream = await self.upstream.exchange(origin, data, self.timeout_extension)
        except httpx.TimeoutException as exc:
            self.upstream_errors["timeout"] += 1
            _record_failure(span, exc)
            raise _Answer(504, "upstream engine timed out", "upstream_timeout") from None
        except httpx.TransportError as exc:
            self.upstream_errors["refused"] += 1
            _record_failure(span, exc)
            raise _Answer(502, f"upstream engine unreachable ({type(exc).__name__})", "upstream_error") from None
        try:
            self.emitter.first_byte(span, self.clock.now_s())
            await send({
                "type": "http.response.start",
                "status": status,
                "headers": [(k, v) for k, v in answer_headers if k.lower() not in _HOP_BY_HOP_ANSWER],
            })
            async for chunk in stream:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            # Completing the answer makes receive() say disconnect: not a client leaving.
            watch.finished = True
            await send({"type": "http.response.body", "body": b""})
        except httpx.HTTPError as exc:
            # Headers are gone already: the client sees a cut stream; the span says why.
            self.upstream_errors["broken"] += 1
            span.set_attribute(S.ATTR_ERROR_TYPE, type(exc).__name__)
        finally:
            watch.finished = True
            await stream.aclose()
        return status

    async def _send_traced(
        self, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes, span: Span
    ) -> tuple[int, list[tuple[bytes, bytes]], httpx.AsyncByteStream]:
        """Through the instrumented transport, which makes the attempt span and sends its traceparent.

        Straight to the transport: AsyncClient.send would add default headers, cookies, auth and
        redirect handling a proxy must not apply.
        """
        url = self._url(target)
        # stream= with our own Host and Content-Length: a third of the cost of content= (which
        # re-derives those headers and copies the body into a fresh stream).
        request = httpx.Request(
            method, url, headers=[*headers, (b"host", url.netloc), (b"content-length", str(len(body)).encode("ascii"))],
            stream=httpx.ByteStream(body), extensions={"timeout": self.timeout_extension},
        )
        # The gate span is the current span while the instrumented transport opens its attempt span.
        token = context.attach(trace.set_span_in_context(span))
        try:
            response = await self.transport.handle_async_request(request)
        finally:
            context.detach(token)
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        return response.status_code, response.headers.raw, stream

    def _url(self, target: str) -> httpx.URL:
        url = self._urls.get(target)
        if url is None:
            url = httpx.URL(target)  # parsing is costly; the targets are few
            if len(self._urls) < _URL_CACHE_SIZE:
                self._urls[target] = url
        return url

    def _route_bytes(self, target: str) -> tuple[Origin, bytes, bytes]:
        """(origin, request target, Host header) for an upstream URL; cached like the URLs."""
        route = self._raw_routes.get(target)
        if route is None:
            url = self._url(target)
            route = (origin_of(url), url.raw_path, url.netloc)
            if len(self._raw_routes) < _URL_CACHE_SIZE:
                self._raw_routes[target] = route
        return route



class _DisconnectWatch:
    """Cancel the request's own task when the client disconnects before its answer is complete.

    One watcher task per request instead of a second task for the work plus ``asyncio.wait`` over
    both. ``finished`` is set before the answer's last send: completing a response also makes
    uvicorn's ``receive()`` say disconnect, which must not cancel anything.
    """

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self.finished = False
        self._fired = False
        self._watcher = asyncio.get_running_loop().create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.finished:
            self._fired = True
            self._task.cancel()

    def absorb(self) -> bool:
        """After a CancelledError: True when our disconnect caused it (and nothing else cancelled)."""
        return self._fired and self._task.uncancel() == 0

    def stop(self) -> None:
        self._watcher.cancel()


def _record_failure(span: Span, exc: BaseException) -> None:
    if span.is_recording():
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
