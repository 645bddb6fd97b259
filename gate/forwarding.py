"""Forwarding one admitted request to its engine and streaming the answer back, chunk by chunk.

Straight to the connection pool with prepared bytes, no httpx request or response models. Traced,
the call's CLIENT span (``UpstreamSpans``) is started before the request is written, its
traceparent goes with the request, and it ends when the engine's status line arrives.
Engine failures become the gate's 502/504 answers and are counted by kind.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
from opentelemetry.trace import Span, Status, StatusCode

from restorelens import spans as S
from restorelens.clock import Clock

from .gate_spans import GateSpans
from .proxy_asgi import DisconnectWatch, GateAnswer, Scope, Send
from .upstream_spans import UpstreamSpans
from .upstream_transport import Origin, UpstreamTransport, origin_of, request_bytes

__all__ = ["UpstreamForwarder", "token_events"]

_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
     b"transfer-encoding", b"upgrade", b"host", b"content-length"}
)
#: Of the engine's answer, also not passed back: the gate's server adds its own date and server
#: headers, and an answer must carry each once (nginx drops the same two by default).
_NOT_PASSED_BACK = (_HOP_BY_HOP - {b"content-length"}) | {b"date", b"server"}
_URL_CACHE_SIZE = 256
#: What the pool speaks to engines (upstream_transport.py is HTTP/1.1 only).
_HTTP_VERSION = "HTTP/1.1"


#: Server-Sent Events of an OpenAI stream that carry no generated token: the terminator, chat's
#: first event (the role, empty content), its last (an empty delta with the finish reason) and the
#: usage event (no choices).
_NOT_TOKENS = (b"[DONE]", b'"content":""', b'"content": ""', b'"delta":{}', b'"delta": {}', b'"choices":[]',
               b'"choices": []')


def token_events(chunk: bytes) -> int:
    """How many generated tokens a streamed chunk carries: vLLM streams one token per event."""
    events = chunk.count(b"data:")
    return events and max(0, events - sum(chunk.count(marker) for marker in _NOT_TOKENS))


class UpstreamForwarder:
    """Sends requests to engine base URLs; ``upstream_errors`` counts refused, timed-out and broken ones."""

    def __init__(
        self,
        *,
        upstream: UpstreamTransport,
        timeout: httpx.Timeout,
        emitter: GateSpans,
        clock: Clock,
        upstream_spans: UpstreamSpans | None,
    ) -> None:
        self.upstream = upstream
        self.timeout_extension = timeout.as_dict()
        self.emitter = emitter
        self.clock = clock
        self.upstream_spans = upstream_spans  # None when tracing is off
        self._urls: dict[str, httpx.URL] = {}
        self._raw_routes: dict[str, tuple[Origin, bytes, bytes]] = {}
        self.upstream_errors: dict[str, int] = {"refused": 0, "timeout": 0, "broken": 0}

    async def forward(
        self, scope: Scope, send: Send, headers: list[tuple[bytes, bytes]], body: bytes, upstream: str,
        span: Span, watch: DisconnectWatch, *, on_first_chunk: Callable[[float], None] | None = None,
        on_tokens: Callable[[int, float], None] | None = None,
    ) -> int:
        """Forward and stream back; ``on_first_chunk`` hears when the first body chunk (the first
        token, when streamed) passed, ``on_tokens`` how many SSE events each later chunk held."""
        target = upstream + scope["path"]
        if scope.get("query_string"):
            target += "?" + scope["query_string"].decode("latin-1")
        method: str = scope["method"]
        out_headers = [(k, v) for k, v in headers if k not in _HOP_BY_HOP]
        spans, call_span = self.upstream_spans, None
        if spans is not None:
            call_span, carried = spans.start(span, method, target, self.clock.now_s())
            if carried:  # the call's own context replaces whatever trace headers the client sent
                replaced = {name.encode("latin-1") for name in carried}
                out_headers = [(k, v) for k, v in out_headers if k not in replaced]
                out_headers += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in carried.items()]
        origin, raw_path, host = self._route_bytes(target)
        data = request_bytes(method.encode("ascii"), raw_path, host, out_headers, body)
        try:
            status, answer_headers, stream = await self.upstream.exchange(origin, data, self.timeout_extension)
        except BaseException as exc:
            if spans is not None and call_span is not None:
                spans.failed(call_span, exc, self.clock.now_s())
            if isinstance(exc, httpx.TimeoutException):
                self.upstream_errors["timeout"] += 1
                _record_failure(span, exc)
                raise GateAnswer(504, "upstream engine timed out", "upstream_timeout") from None
            if isinstance(exc, httpx.TransportError):
                self.upstream_errors["refused"] += 1
                _record_failure(span, exc)
                raise GateAnswer(502, f"upstream engine unreachable ({type(exc).__name__})", "upstream_error") from None
            raise
        try:
            now_s = self.clock.now_s()
            if spans is not None and call_span is not None:
                spans.answered(call_span, status, _HTTP_VERSION, now_s)
            self.emitter.first_byte(span, now_s)
            await send({
                "type": "http.response.start",
                "status": status,
                "headers": [(k, v) for k, v in answer_headers if k.lower() not in _NOT_PASSED_BACK],
            })
            watch.response_started = True
            first = True
            async for chunk in stream:
                if first and chunk:
                    first = False
                    if on_first_chunk is not None:
                        on_first_chunk(self.clock.now_s())
                if on_tokens is not None and (events := token_events(chunk)) > 0:
                    on_tokens(events, self.clock.now_s())
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            # Completing the answer makes receive() say disconnect: not a client leaving.
            watch.finished = True
            watch.response_completed = True
            await send({"type": "http.response.body", "body": b""})
        except httpx.HTTPError as exc:
            # Headers are gone already: the client sees a cut stream; the span says why.
            self.upstream_errors["broken"] += 1
            span.set_attribute(S.ATTR_ERROR_TYPE, type(exc).__name__)
        finally:
            watch.finished = True
            await stream.aclose()
        return status

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


def _record_failure(span: Span, exc: BaseException) -> None:
    if span.is_recording():
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
