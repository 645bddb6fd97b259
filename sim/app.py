"""The live shell: an OpenAI-compatible Starlette app in front of one simulated engine.

Endpoints as vLLM serves them: ``POST /v1/completions``, ``POST /v1/chat/completions`` (JSON or
SSE), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` and, with ``enable_sleep_mode``,
``POST /sleep``, ``POST /wake_up``, ``GET /is_sleeping``. Errors are OpenAI error objects.
"""

from __future__ import annotations

import contextlib
import hmac
import random
import time
from collections.abc import AsyncIterator

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from restorelens.clock import WallClock
from restorelens.errors import SettingError
from restorelens.sim.config import EngineConfig, get_preset
from restorelens.sim.control_routes import SleepRoutes, error_response, json_response
from restorelens.sim.core import EngineCore
from restorelens.sim.inference_asgi import InferenceHandler
from restorelens.sim.live_engine import LiveEngine
from restorelens.sim.metrics import EngineMetrics

__all__ = ["DEFAULT_MAX_BODY_BYTES", "START_MODES", "SimStarlette", "SimState", "create_app"]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
START_MODES = ("ready", "asleep", "cold")
_INFERENCE_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})


class SimStarlette(Starlette):
    """Starlette for every route but the two inference paths, which go straight to the raw handler."""

    sim: SimState

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in _INFERENCE_PATHS and scope["method"] == "POST":
            await self.sim.inference(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


class SimState:
    """One simulated engine's live state (core, engine task, metrics, key), shared by the handlers."""

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
        self.bearer = None if api_key is None else f"Bearer {api_key}".encode("latin-1")
        self.request_ids = random.Random()  # request ids; its own generator so a seeded global one cannot repeat them
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
        self.inference = InferenceHandler(self)
        self.sleep_routes = SleepRoutes(self)

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

    def unauthorized(self, request: Request) -> Response | None:
        if self.api_key is None:
            return None
        assert self.bearer is not None
        given = request.headers.get("authorization", "").encode("latin-1")  # Starlette decoded it as latin-1
        if hmac.compare_digest(given, self.bearer):  # constant time: no key-guessing by response timing
            return None
        return json_response({"error": "Unauthorized"}, 401)

    # --- endpoints besides inference (inference_asgi) and the sleep API (control_routes) ----

    async def models(self, request: Request) -> Response:
        denied = self.unauthorized(request)
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
        return json_response({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        if self.core.state == "loading" and not self.core.is_ready(self.clock.now_s()):
            return error_response(503, "the engine is still loading (cold start)")
        return Response(status_code=200)

    async def metrics(self, request: Request) -> Response:
        return Response(self.engine_metrics.render(), media_type=EngineMetrics.CONTENT_TYPE)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_response(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}")


async def _server_error(request: Request, exc: Exception) -> Response:
    # The class name helps a bug report; the traceback stays in the server log only.
    return error_response(500, f"internal error ({type(exc).__name__})", error_type="InternalServerError")


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
    sim = SimState(
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
        Route("/v1/completions", sim.inference, methods=["POST"]),
        Route("/v1/chat/completions", sim.inference, methods=["POST"]),
        Route("/v1/models", sim.models, methods=["GET"]),
        Route("/health", sim.health, methods=["GET"]),
        Route("/metrics", sim.metrics, methods=["GET"]),
    ]
    if enable_sleep_mode:
        routes += [
            Route("/sleep", sim.sleep_routes.sleep, methods=["POST"]),
            Route("/wake_up", sim.sleep_routes.wake_up, methods=["POST"]),
            Route("/is_sleeping", sim.sleep_routes.is_sleeping, methods=["GET"]),
        ]
    app = SimStarlette(
        routes=routes,
        lifespan=sim.lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
    )
    app.sim = sim
    app.state.sim = sim
    return app
