"""The retrying, traced client: httpx ``AsyncClient`` + opentelemetry-instrumentation-httpx.

The transport is instrumented per client, with the caller's ``tracer_provider`` (no global
instrumentation), so each HTTP attempt is a ``POST`` CLIENT span and trace context reaches the gate
and the engine. Around the attempts one ``client.request`` span (``tracing.RequestSpan``) is stamped
from the injected clock; the wait between attempts goes through the injected ``sleep``, so tests and
time-scaled runs drive the timing. The instrumentation's hooks add the attempt's resend count
(passed to the hook in the request's ``extensions``) and its Retry-After. Request and response
bodies are never recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from opentelemetry import trace
from opentelemetry.instrumentation.httpx import AsyncOpenTelemetryTransport
from opentelemetry.trace import Span, TracerProvider

from restorelens import __version__
from restorelens.clock import Clock, WallClock
from restorelens.loadgen.request import ClientRequest, RequestResult, RetryLoop
from restorelens.loadgen.retry import RetryPolicy, make_policy, retry_after_of
from restorelens.loadgen.tracing import TRACER_NAME, RequestSpan, attempt_attributes, resend_attributes
from restorelens.protocol import is_preempted_answer, parse_preempted_event

__all__ = ["ATTEMPT_EXTENSION", "DEFAULT_TIMEOUT_S", "TracedClient"]

#: Request extension carrying the attempt number to the instrumentation's request hook.
ATTEMPT_EXTENSION = "restorelens.attempt"
DEFAULT_TIMEOUT_S = 120.0
#: What a stream the gate took back counts as: the 503 the gate answers when no byte went out yet.
PREEMPTED_STATUS = 503

Sleep = Callable[[float], Awaitable[Any]]


class TracedClient:
    """Send ``ClientRequest``s to an OpenAI-compatible ``base_url``, retrying per ``policy``.

    ``transport`` replaces the network transport (e.g. ``httpx.ASGITransport``); it is still
    instrumented. Use as ``async with TracedClient(...) as client``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        policy: RetryPolicy | None = None,
        tracer_provider: TracerProvider | None = None,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.policy = policy or make_policy("honour-retry-after")
        self.clock = clock or WallClock()
        self.sleep: Sleep = sleep or asyncio.sleep
        self._tracer = trace.get_tracer(TRACER_NAME, __version__, tracer_provider=tracer_provider)
        instrumented = AsyncOpenTelemetryTransport(
            transport or httpx.AsyncHTTPTransport(),
            tracer_provider=tracer_provider,
            request_hook=self._on_request,
            response_hook=self._on_response,
        )
        self._http = httpx.AsyncClient(
            base_url=base_url, transport=instrumented, timeout=httpx.Timeout(timeout_s), headers=headers
        )

    async def __aenter__(self) -> TracedClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _on_request(self, span: Span, request: Any) -> None:
        attempt = (request.extensions or {}).get(ATTEMPT_EXTENSION, 1)
        span.set_attributes(resend_attributes(attempt))

    async def _on_response(self, span: Span, request: Any, response: Any) -> None:
        headers = httpx.Headers(response.headers)
        span.set_attributes(attempt_attributes(response.status_code, retry_after_of(headers, self.clock.now_s())))

    async def request(self, request: ClientRequest) -> RequestResult:
        """Send ``request`` until it succeeds, is final, or the policy gives up; never raises on HTTP errors."""
        start_s = self.clock.now_s()
        loop = RetryLoop(request, self.policy, start_s)
        span = RequestSpan(self._tracer, request, self.policy.name, start_s)
        try:
            with trace.use_span(span.span, end_on_exit=False):
                while not loop.done:
                    attempt = loop.begin_attempt(self.clock.now_s())
                    status = await self._attempt(request, attempt, loop, span)
                    decision = loop.last_decision
                    if loop.done or decision is None:
                        break
                    span.retry_wait(self.clock.now_s(), decision, status)
                    await self.sleep(decision.wait_s)
        except BaseException as exc:
            # Cancelled mid-request (a run ending, Ctrl-C): the span still ends, as an error.
            loop.abort(self.clock.now_s(), type(exc).__qualname__)
            span.finish(loop.result(self.clock.now_s()))
            raise
        result = loop.result(self.clock.now_s())
        span.finish(result)
        return result

    async def _attempt(self, request: ClientRequest, attempt: int, loop: RetryLoop, span: RequestSpan) -> int | None:
        try:
            async with self._http.stream(
                "POST",
                request.path,
                json=request.body(),
                headers=request.headers(),
                extensions={ATTEMPT_EXTENSION: attempt},
            ) as response:
                if not response.is_success:
                    answered_s = self.clock.now_s()
                    await response.aread()
                    loop.answered(response.status_code, response.headers, answered_s,
                                  preempted=is_preempted_answer(response.status_code, response.content))
                    return response.status_code
                loop.answered(response.status_code, response.headers, self.clock.now_s())
                try:
                    if await self._read_body(response, request.stream, loop, span):
                        return PREEMPTED_STATUS
                except httpx.HTTPError:
                    loop.body_failed()
                return response.status_code
        except httpx.TransportError as exc:
            loop.answered(None, None, self.clock.now_s(), error_type=type(exc).__qualname__)
            return None

    async def _read_body(self, response: httpx.Response, stream: bool, loop: RetryLoop, span: RequestSpan) -> bool:
        """Read the answer's body; True when the gate took the request back mid-stream (preempted)."""
        if stream:
            # SSE: the first "data:" line that is not the terminator carries the first token.
            async for line in response.aiter_lines():
                if (hint := parse_preempted_event(line)) is not None:
                    loop.preempted(self.clock.now_s(), hint)
                    return True
                if loop.first_chunk_s is None and line.startswith("data:") and line[5:].strip() != "[DONE]":
                    now_s = self.clock.now_s()
                    loop.first_chunk(now_s)
                    span.first_chunk(now_s)
        else:
            async for chunk in response.aiter_bytes():
                if chunk and loop.first_chunk_s is None:
                    now_s = self.clock.now_s()
                    loop.first_chunk(now_s)
                    span.first_chunk(now_s)
