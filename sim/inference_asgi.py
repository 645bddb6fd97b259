"""The simulator's hot path: raw ASGI ``POST /v1/completions`` and ``/v1/chat/completions``.

No Starlette request, response or middleware objects (they were a fifth of the CPU): headers are
read in one pass, the body is capped, non-streaming answers come from templates, and streaming
goes through Starlette's ``StreamingResponse`` only for its client-disconnect handling.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from restorelens.sim.openai_requests import ApiError, ParsedRequest, error_body, parse_request
from restorelens.sim.openai_responses import (CHAT, COMPLETIONS, STREAM_DONE, chat_body, completion_body, stream_chunk,
                                              token_text)
from restorelens.sim.records import EngineNotReadyError, RequestRecord, RequestRejectedError, SimRequest, TokenEvent
from restorelens.sim.state import SimState

__all__ = ["InferenceHandler"]

_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})


def _dump(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


_UNAUTHORIZED = _dump({"error": "Unauthorized"})
_ABORTED = _dump(error_body(503, "the request was aborted because the engine was put to sleep or restarted"))


class InferenceHandler:
    """The inference ASGI app of one simulator (also each inference route's endpoint, so other
    methods still get Starlette's 405 and anything the shortcut does not take is served)."""

    def __init__(self, sim: SimState) -> None:
        self.sim = sim

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Raw ASGI ``POST /v1/completions`` and ``/v1/chat/completions``: the hot path skips
        Starlette's request, response and middleware objects (they were a fifth of the CPU)."""
        kind = CHAT if scope["path"].endswith("/chat/completions") else COMPLETIONS
        started = False

        async def reply(status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
            nonlocal started
            started = True
            head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode("latin-1"))]
            await send({"type": "http.response.start", "status": status, "headers": head + (extra or [])})
            await send({"type": "http.response.body", "body": body})

        try:
            request_id, authorization, declared, carrier = "", b"", b"", {}
            for name, value in scope["headers"]:
                if name == b"x-request-id":
                    request_id = value.decode("latin-1")
                elif name == b"authorization":
                    authorization = value
                elif name == b"content-length":
                    declared = value
                elif name in _TRACE_HEADERS:
                    carrier[name.decode("latin-1")] = value.decode("latin-1")
            if self.sim.bearer is not None and not hmac.compare_digest(authorization, self.sim.bearer):
                await reply(401, _UNAUTHORIZED)
                return
            try:
                raw = await self._receive_body(receive, declared)
                if raw is None:
                    return  # the client left before sending its body
                parsed = parse_request(raw, kind, config=self.sim.config, model_name=self.sim.model_name)
            except ApiError as exc:
                await reply(exc.status, _dump(exc.body()))
                return
            prefix = "cmpl" if kind == COMPLETIONS else "chatcmpl"
            if not request_id or self.sim.engine.is_in_flight(request_id):
                request_id = f"{prefix}-{self.sim.request_ids.getrandbits(128):032x}"
            sim_request = SimRequest(
                request_id,
                parsed.prompt_tokens,
                parsed.max_tokens,
                priority=parsed.priority,
                output_tokens=parsed.output_tokens,
                emit_tokens=parsed.stream,
            )
            try:
                # Without a traceparent header vLLM parents the span to the process's own trace.
                parent = _PROPAGATOR.extract(carrier) if carrier else self.sim.environment_context
                in_flight = self.sim.engine.submit(sim_request, parent_context=parent, span_params=parsed.span_params())
            except RequestRejectedError as exc:
                await reply(400, _dump(error_body(400, str(exc), param=exc.param)))
                return
            except EngineNotReadyError as exc:
                await reply(503, _dump(error_body(503, str(exc))))
                return
            response_id = request_id if request_id.startswith(prefix) else f"{prefix}-{request_id}"
            if parsed.stream:
                started = True
                stream = StreamingResponse(
                    self._stream(parsed, in_flight.tokens, request_id, response_id),  # type: ignore[arg-type]
                    media_type="text/event-stream",
                    headers={"x-request-id": request_id},
                )
                await stream(scope, receive, send)
                return
            record = await self._done_or_disconnect(in_flight.done, receive)
            if record is None:
                self.sim.engine.abort(request_id)  # the client left: vLLM aborts, and so do we
                return
            if record.finish_reason == "abort":
                await reply(503, _ABORTED)
                return
            build = completion_body if kind == COMPLETIONS else chat_body
            body = build(response_id, self.sim.created, parsed.model, record.prompt_tokens, record.completion_tokens, record.finish_reason)
            await reply(200, body, [(b"x-request-id", request_id.encode("latin-1"))])
        except Exception as exc:
            if not started:
                # The class name helps a bug report; the traceback stays in the server log only.
                error = error_body(500, f"internal error ({type(exc).__name__})", error_type="InternalServerError")
                await reply(500, _dump(error))
            raise

    @staticmethod
    async def _done_or_disconnect(done: Any, receive: Receive) -> RequestRecord | None:
        """The finished record, or None when the client disconnected first (a gate taking the
        request back closes its connection, as any client leaving does)."""
        async def disconnected() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        watcher = asyncio.ensure_future(disconnected())
        try:
            finished, _ = await asyncio.wait({done, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        return done.result() if done in finished else None

    async def _receive_body(self, receive: Receive, declared: bytes) -> bytes | None:
        if declared.isdigit() and int(declared) > self.sim.max_body_bytes:
            raise ApiError(413, f"request body is larger than {self.sim.max_body_bytes} bytes")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.sim.max_body_bytes:
                raise ApiError(413, f"request body is larger than {self.sim.max_body_bytes} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _stream(
        self, parsed: ParsedRequest, tokens: Any, request_id: str, response_id: str
    ) -> AsyncIterator[str]:
        kind, created, model = parsed.kind, self.sim.created, parsed.model
        finished = False
        try:
            while True:
                item: TokenEvent | RequestRecord = await tokens.get()
                if isinstance(item, TokenEvent):
                    text = token_text(item.index)
                    if item.index == 0 and kind == CHAT:
                        yield stream_chunk(kind, response_id, created, model, role=True, text="")
                    yield stream_chunk(kind, response_id, created, model, text=text)
                    continue
                finished = True
                if item.finish_reason == "abort":
                    error = error_body(503, "the request was aborted because the engine was put to sleep")
                    yield f"data: {json.dumps(error)}\n\n"
                else:
                    yield stream_chunk(
                        kind, response_id, created, model, text="" if kind == COMPLETIONS else None,
                        finish_reason=item.finish_reason,
                    )
                    if parsed.include_usage:
                        usage = (item.prompt_tokens, item.completion_tokens)
                        yield stream_chunk(kind, response_id, created, model, usage_tokens=usage)
                yield STREAM_DONE
                return
        finally:
            if not finished:
                self.sim.engine.abort(request_id)
