"""The live shell: an OpenAI-compatible Starlette app in front of one simulated engine.

Endpoints as vLLM serves them: ``POST /v1/completions``, ``POST /v1/chat/completions`` (JSON or
SSE), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` and, with ``enable_sleep_mode``,
``POST /sleep``, ``POST /wake_up``, ``GET /is_sleeping``. Errors are OpenAI error objects.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from opentelemetry.propagators.textmap import DefaultGetter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from restorelens.clock import WallClock, to_ns
from restorelens.errors import SettingError
from restorelens.sim import openai_api as api
from restorelens.sim.config import EngineConfig, get_preset
from restorelens.sim.core import EngineCore
from restorelens.sim.live_engine import LiveEngine
from restorelens.sim.metrics import EngineMetrics
from restorelens.sim.records import EngineNotReadyError, RequestRecord, RequestRejectedError, SimRequest, TokenEvent
from restorelens.spans import (
    ATTR_ENGINE_SLEEP_LEVEL,
    ATTR_ENGINE_WAKE_TAGS,
    ATTR_ERROR_TYPE,
    ATTR_HTTP_STATUS_CODE,
    SPAN_ENGINE_IS_SLEEPING,
    SPAN_ENGINE_SLEEP,
    SPAN_ENGINE_WAKE_UP,
)

__all__ = ["DEFAULT_MAX_BODY_BYTES", "START_MODES", "SimStarlette", "create_app"]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
START_MODES = ("ready", "asleep", "cold")
_PROPAGATOR = TraceContextTextMapPropagator()
_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})
_INFERENCE_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
_GETTER = DefaultGetter()


def _dump(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


_UNAUTHORIZED = _dump({"error": "Unauthorized"})
_ABORTED = _dump(api.error_body(503, "the request was aborted because the engine was put to sleep or restarted"))


class SimStarlette(Starlette):
    """Starlette for every route but the two inference paths, which go straight to the raw handler."""

    sim: _SimApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in _INFERENCE_PATHS and scope["method"] == "POST":
            await self.sim.inference(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, separators=(",", ":")), status_code=status, media_type="application/json", headers=headers
    )


def _error(status: int, message: str, *, param: str | None = None, error_type: str | None = None) -> Response:
    return _json(api.error_body(status, message, param=param, error_type=error_type), status)


class _SimApp:
    def __init__(
        self,
        config: EngineConfig,
        *,
        model_name: str,
        tracer_provider: TracerProvider | None,
        enable_sleep_mode: bool,
        start_mode: str,
        max_body_bytes: int,
        api_key: str | None,
        seed: int,
    ) -> None:
        self.config = config
        self.model_name = model_name
        self.tracer_provider = tracer_provider
        self.tracer: Tracer | None = tracer_provider.get_tracer("restorelens.sim") if tracer_provider else None
        self.max_body_bytes = max_body_bytes
        self.api_key = api_key
        self._bearer = None if api_key is None else f"Bearer {api_key}".encode("latin-1")
        self._ids = random.Random()  # request ids; its own generator so a seeded global one cannot repeat them
        self.created = int(time.time())
        clock = WallClock()
        now_s = clock.now_s()
        if start_mode == "asleep":
            # The engine fell asleep (level 1) before the app started: begin at the end of the offload.
            core = EngineCore(config, seed=seed, now_s=now_s - config.level1_offload_s())
            core.sleep(1, core.now_s)
            core.advance_to(now_s)
        else:
            core = EngineCore(config, seed=seed, now_s=now_s)
            if start_mode == "cold":
                core.cold_start(now_s)
        self.core = core
        self.engine_metrics = EngineMetrics(core, model_name)
        self.engine = LiveEngine(core, clock=clock, tracer=self.tracer, metrics=self.engine_metrics, model_name=model_name)
        self.clock = clock
        self.enable_sleep_mode = enable_sleep_mode

    # --- plumbing -----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.engine.start()
        try:
            yield
        finally:
            await self.engine.stop()
            if self.tracer_provider is not None:
                # uvicorn re-raises SIGTERM/SIGINT after shutdown, so a caller's `finally` may never
                # run: flush the spans of the last requests here.
                self.tracer_provider.force_flush()

    def _unauthorized(self, request: Request) -> Response | None:
        if self.api_key is None:
            return None
        assert self._bearer is not None
        given = request.headers.get("authorization", "").encode("latin-1")  # Starlette decoded it as latin-1
        if hmac.compare_digest(given, self._bearer):  # constant time: no key-guessing by response timing
            return None
        return _json({"error": "Unauthorized"}, 401)

    # --- inference ----------------------------------------------------------------------------

    async def inference(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Raw ASGI ``POST /v1/completions`` and ``/v1/chat/completions``: the hot path skips
        Starlette's request, response and middleware objects (they were a fifth of the CPU)."""
        kind = api.CHAT if scope["path"].endswith("/chat/completions") else api.COMPLETIONS
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
            if self._bearer is not None and not hmac.compare_digest(authorization, self._bearer):
                await reply(401, _UNAUTHORIZED)
                return
            try:
                raw = await self._receive_body(receive, declared)
                if raw is None:
                    return  # the client left before sending its body
                parsed = api.parse_request(raw, kind, config=self.config, model_name=self.model_name)
            except api.ApiError as exc:
                await reply(exc.status, _dump(exc.body()))
                return
            prefix = "cmpl" if kind == api.COMPLETIONS else "chatcmpl"
            if not request_id or self.engine.is_in_flight(request_id):
                request_id = f"{prefix}-{self._ids.getrandbits(128):032x}"
            sim_request = SimRequest(
                request_id,
                parsed.prompt_tokens,
                parsed.max_tokens,
                priority=parsed.priority,
                output_tokens=parsed.output_tokens,
                emit_tokens=parsed.stream,
            )
            try:
                in_flight = self.engine.submit(
                    sim_request, parent_context=_PROPAGATOR.extract(carrier), span_params=parsed.span_params()
                )
            except RequestRejectedError as exc:
                await reply(400, _dump(api.error_body(400, str(exc), param=exc.param)))
                return
            except EngineNotReadyError as exc:
                await reply(503, _dump(api.error_body(503, str(exc))))
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
            record = await in_flight.done
            if record.finish_reason == "abort":
                await reply(503, _ABORTED)
                return
            build = api.completion_body if kind == api.COMPLETIONS else api.chat_body
            body = build(response_id, self.created, parsed.model, record.prompt_tokens, record.completion_tokens, record.finish_reason)
            await reply(200, body, [(b"x-request-id", request_id.encode("latin-1"))])
        except Exception as exc:
            if not started:
                # The class name helps a bug report; the traceback stays in the server log only.
                error = api.error_body(500, f"internal error ({type(exc).__name__})", error_type="InternalServerError")
                await reply(500, _dump(error))
            raise

    async def _receive_body(self, receive: Receive, declared: bytes) -> bytes | None:
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise api.ApiError(413, f"request body is larger than {self.max_body_bytes} bytes")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise api.ApiError(413, f"request body is larger than {self.max_body_bytes} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _stream(
        self, parsed: api.ParsedRequest, tokens: Any, request_id: str, response_id: str
    ) -> AsyncIterator[str]:
        kind, created, model = parsed.kind, self.created, parsed.model
        finished = False
        try:
            while True:
                item: TokenEvent | RequestRecord = await tokens.get()
                if isinstance(item, TokenEvent):
                    text = api.token_text(item.index)
                    if item.index == 0 and kind == api.CHAT:
                        yield api.stream_chunk(kind, response_id, created, model, role=True, text="")
                    yield api.stream_chunk(kind, response_id, created, model, text=text)
                    continue
                finished = True
                if item.finish_reason == "abort":
                    error = api.error_body(503, "the request was aborted because the engine was put to sleep")
                    yield f"data: {json.dumps(error)}\n\n"
                else:
                    yield api.stream_chunk(
                        kind, response_id, created, model, text="" if kind == api.COMPLETIONS else None,
                        finish_reason=item.finish_reason,
                    )
                    if parsed.include_usage:
                        usage = (item.prompt_tokens, item.completion_tokens)
                        yield api.stream_chunk(kind, response_id, created, model, usage_tokens=usage)
                yield api.STREAM_DONE
                return
        finally:
            if not finished:
                self.engine.abort(request_id)

    # --- other endpoints ----------------------------------------------------------------------

    async def models(self, request: Request) -> Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.config.max_model_len,
        }
        return _json({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        if self.core.state == "loading" and not self.core.is_ready(self.clock.now_s()):
            return _error(503, "the engine is still loading (cold start)")
        return Response(status_code=200)

    async def metrics(self, request: Request) -> Response:
        return Response(self.engine_metrics.render(), media_type=EngineMetrics.CONTENT_TYPE)

    # --- sleep API (vLLM dev-mode endpoints) ----------------------------------------------------

    def _control_span(self, request: Request, name: str, attributes: dict[str, Any]) -> Any:
        if self.tracer is None:
            return None
        return self.tracer.start_span(
            name,
            context=_PROPAGATOR.extract(request.headers, getter=_GETTER),
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=to_ns(self.clock.now_s()),
        )

    def _end_span(self, span: Any, response: Response) -> Response:
        if span is not None:
            span.set_attribute(ATTR_HTTP_STATUS_CODE, response.status_code)
            if response.status_code >= 400:
                span.set_attribute(ATTR_ERROR_TYPE, str(response.status_code))
            span.end(end_time=to_ns(self.clock.now_s()))
        return response

    async def sleep(self, request: Request) -> Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        level_raw = request.query_params.get("level", "1")
        mode = request.query_params.get("mode", "abort")
        level = int(level_raw) if level_raw.isdigit() else -1
        span = self._control_span(request, SPAN_ENGINE_SLEEP, {ATTR_ENGINE_SLEEP_LEVEL: level})
        if level not in (0, 1, 2):
            return self._end_span(span, _error(400, f"level must be 0, 1 or 2, got {level_raw!r}", param="level"))
        if mode not in ("abort", "wait"):
            return self._end_span(span, _error(400, f"mode must be 'abort' or 'wait', got {mode!r}", param="mode"))
        try:
            self.core.sleep(level, self.clock.now_s(), mode=mode)
        except EngineNotReadyError as exc:
            return self._end_span(span, _error(409, str(exc), error_type="ConflictError"))
        self.engine.kick()
        await self.engine.wait_until(lambda: self.core.state == "asleep")
        return self._end_span(span, _json({"status": "sleeping", "level": level}))

    async def wake_up(self, request: Request) -> Response:
        denied = self._unauthorized(request)
        if denied is not None:
            return denied
        tags = request.query_params.getlist("tags")
        span = self._control_span(request, SPAN_ENGINE_WAKE_UP, {ATTR_ENGINE_WAKE_TAGS: tags})
        try:
            self.core.wake_up(self.clock.now_s(), tags or None)
        except ValueError as exc:
            return self._end_span(span, _error(400, str(exc), param="tags"))
        self.engine.kick()
        await self.engine.wait_until(lambda: self.core.state not in ("waking", "loading"))
        status = "sleeping" if self.core.is_sleeping else "awake"
        return self._end_span(span, _json({"status": status, "tags_woken": tags or ["weights", "kv_cache"]}))

    async def is_sleeping(self, request: Request) -> Response:
        span = self._control_span(request, SPAN_ENGINE_IS_SLEEPING, {})
        return self._end_span(span, _json({"is_sleeping": self.core.is_sleeping}))


class _InferenceEndpoint:
    """The raw handler as a Starlette route (an ASGI app, not a request/response function).

    ``SimStarlette`` calls the handler before any middleware; the route keeps the usual answers
    for other methods (405) and serves any request the shortcut does not recognise.
    """

    def __init__(self, sim: _SimApp) -> None:
        self.sim = sim

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.sim.inference(scope, receive, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")


async def _server_error(request: Request, exc: Exception) -> Response:
    # The class name helps a bug report; the traceback stays in the server log only.
    return _error(500, f"internal error ({type(exc).__name__})", error_type="InternalServerError")


def create_app(
    config_or_preset: EngineConfig | str,
    *,
    model_name: str = "tiny",
    tracer_provider: TracerProvider | None = None,
    time_scale: float = 1.0,
    enable_sleep_mode: bool = False,
    start_mode: str = "ready",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    api_key: str | None = None,
    seed: int = 0,
) -> SimStarlette:
    """An OpenAI-compatible app serving one simulated engine.

    ``time_scale`` > 1 divides every modelled duration (steps, wake-up, cold start) by it.
    ``start_mode``: "ready", "asleep" (level 1) or "cold" (loading for ``cold_start_s``).
    ``api_key``: when set, /v1/* and the sleep API need ``Authorization: Bearer <key>``.
    Spans (``llm_request``, sleep API) go to ``tracer_provider``; none are made without one.
    """
    config = get_preset(config_or_preset) if isinstance(config_or_preset, str) else config_or_preset
    if start_mode not in START_MODES:
        raise SettingError("start_mode", f"unknown start mode {start_mode!r}; choose one of {', '.join(START_MODES)}")
    if max_body_bytes < 1:
        raise SettingError("max_body_bytes", f"must be >= 1, got {max_body_bytes}")
    if api_key is not None and not (api_key.isascii() and api_key.isprintable()):
        raise SettingError("api_key", "must be printable ASCII: it is compared with an HTTP Authorization header")
    sim = _SimApp(
        config.scaled(time_scale),
        model_name=model_name,
        tracer_provider=tracer_provider,
        enable_sleep_mode=enable_sleep_mode,
        start_mode=start_mode,
        max_body_bytes=max_body_bytes,
        api_key=api_key,
        seed=seed,
    )
    routes = [
        Route("/v1/completions", _InferenceEndpoint(sim), methods=["POST"]),
        Route("/v1/chat/completions", _InferenceEndpoint(sim), methods=["POST"]),
        Route("/v1/models", sim.models, methods=["GET"]),
        Route("/health", sim.health, methods=["GET"]),
        Route("/metrics", sim.metrics, methods=["GET"]),
    ]
    if enable_sleep_mode:
        routes += [
            Route("/sleep", sim.sleep, methods=["POST"]),
            Route("/wake_up", sim.wake_up, methods=["POST"]),
            Route("/is_sleeping", sim.is_sleeping, methods=["GET"]),
        ]
    app = SimStarlette(
        routes=routes,
        lifespan=sim.lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
    )
    app.sim = sim
    app.state.sim = sim
    return app
