"""The live shell: an OpenAI-compatible Starlette app in front of one simulated engine.

Endpoints as vLLM serves them: ``POST /v1/completions``, ``POST /v1/chat/completions`` (JSON or
SSE), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` and, with ``enable_sleep_mode``,
``POST /sleep``, ``POST /wake_up``, ``GET /is_sleeping``. Errors are OpenAI error objects.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from restorelens.errors import SettingError
from restorelens.sim.config import EngineConfig, get_preset
from restorelens.sim.control_routes import SleepRoutes
from restorelens.sim.inference_asgi import InferenceHandler
from restorelens.sim.json_responses import error_response
from restorelens.sim.state import SimState
from restorelens.sim.status_routes import StatusRoutes

__all__ = ["DEFAULT_MAX_BODY_BYTES", "START_MODES", "SimStarlette", "create_app"]

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
START_MODES = ("ready", "asleep", "cold")
_INFERENCE_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})


class SimStarlette(Starlette):
    """Starlette for every route but the two inference paths, which go straight to the raw handler."""

    sim: SimState
    inference: InferenceHandler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in _INFERENCE_PATHS and scope["method"] == "POST":
            await self.inference(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


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
        start_mode=start_mode,
        max_body_bytes=max_body_bytes,
        api_key=api_key,
        seed=seed,
    )
    inference, status = InferenceHandler(sim), StatusRoutes(sim)
    routes = [
        Route("/v1/completions", inference, methods=["POST"]),
        Route("/v1/chat/completions", inference, methods=["POST"]),
        Route("/v1/models", status.models, methods=["GET"]),
        Route("/health", status.health, methods=["GET"]),
        Route("/metrics", status.metrics, methods=["GET"]),
    ]
    if enable_sleep_mode:
        sleep_routes = SleepRoutes(sim)
        routes += [
            Route("/sleep", sleep_routes.sleep, methods=["POST"]),
            Route("/wake_up", sleep_routes.wake_up, methods=["POST"]),
            Route("/is_sleeping", sleep_routes.is_sleeping, methods=["GET"]),
        ]
    app = SimStarlette(
        routes=routes,
        lifespan=sim.lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _server_error},
    )
    app.sim = sim
    app.inference = inference
    app.state.sim = sim
    return app
