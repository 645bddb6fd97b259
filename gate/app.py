"""``create_gate_app``: the gate as a Starlette app (proxy routes, /metrics, admin, the router's routes)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
from opentelemetry.trace import NoOpTracerProvider, TracerProvider
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from restorelens.clock import Clock, WallClock
from restorelens.errors import SettingError
from restorelens.serving import HeadLimit

from .admission import Admission
from .assembly import GateAssembly, assemble_gate, lifecycle_router
from .grants import Grant, Rejection, Waiter
from .metrics import new_registry
from .model_listing import ModelListing
from .policies.registry import OPTIONS
from .proxy import ProxyEndpoint, Receive, Scope, Send
from .proxy_asgi import REFUSAL_LIMITS, JsonTooDeep, error_body, load_json
from .routing import ModelRouter, UpstreamTable
from .settings import GateSettings
from .upstream_transport import UpstreamTransport

__all__ = ["GateApp", "GateEndpoints", "create_gate_app"]

INFERENCE_PATHS = ("/v1/completions", "/v1/chat/completions")


class GateApp(Starlette):
    """Starlette for the admin, metrics and router routes; proxied requests skip its middleware.

    The proxy is a raw ASGI endpoint that answers every error itself, so the exception middleware and
    router layers only added cost (about a tenth of the gate's CPU per request).
    """

    proxy: ProxyEndpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] in INFERENCE_PATHS and scope["method"] == "POST":
            await self.proxy(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _error(
    status: int, message: str, error_type: str, headers: dict[str, str] | None = None, *, param: str | None = None
) -> JSONResponse:
    error: dict[str, Any] = {"message": message, "type": error_type, "code": status}
    if param is not None:
        error["param"] = param  # OpenAI's error shape names the offending field here
    return JSONResponse({"error": error}, status, headers=headers)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404/405 in the gate's JSON error shape (plain text otherwise)."""
    assert isinstance(exc, HTTPException)
    error_type = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "invalid_request_error")
    return _error(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}", error_type, exc.headers)


def _wake(waiters: dict[Waiter, asyncio.Future[Grant | Rejection]], waiter: Waiter) -> None:
    """Admission's ``on_waiter_granted``: resolve the proxy's future of a waiter that got its grant."""
    future = waiters.get(waiter)
    if future is not None and not future.done() and waiter.grant is not None:
        future.set_result(waiter.grant)


@dataclass(frozen=True)
class GateEndpoints:
    """The gate's own endpoints (models, metrics, health, admin) and its lifespan; the proxy is apart."""

    settings: GateSettings
    gate: GateAssembly
    registry: CollectorRegistry
    listing: ModelListing
    transport: UpstreamTransport  # the proxy's connection pool, closed with the app
    clock: Clock
    refusals: dict[str, int]

    def routes(self) -> list[Route]:
        return [
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/admin/state", self.admin_state, methods=["GET"]),
            Route("/admin/policy", self.admin_policy, methods=["PUT", "POST"]),
        ]

    @property
    def admission(self) -> Admission:
        return self.gate.admission

    @property
    def router(self) -> ModelRouter | None:
        return self.gate.router

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        if self.router is not None:
            await self.router.start()
        try:
            yield
        finally:
            if self.router is not None:
                await self.router.stop()
            self.gate.close(self.clock.now_s())
            await self.listing.aclose()
            await self.transport.aclose()

    async def models(self, request: Request) -> Response:
        listing = await self.listing.get(request.headers.get("authorization"))
        listed = dict(listing.models)
        for name in self.router.models() if self.router is not None else ():
            listed.setdefault(name, {"id": name, "object": "model", "owned_by": "restorelens"})
        return JSONResponse({"object": "list", "data": list(listed.values()), "unreachable": listing.unreachable})

    async def metrics(self, request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "policy": self.admission.policy.name})

    async def admin_state(self, request: Request) -> Response:
        if (denied := self._admin_denied(request)) is not None:
            return denied
        return JSONResponse(_state(self.admission))

    async def admin_policy(self, request: Request) -> Response:
        if (denied := self._admin_denied(request)) is not None:
            return denied
        try:
            change = load_json(await request.body(), self.settings.max_json_depth)
        except JsonTooDeep:
            self.refusals["max_json_depth"] += 1
            return _error(400, f"body nests JSON deeper than {self.settings.max_json_depth} levels", "invalid_request_error")
        except ValueError:
            return _error(400, "body must be JSON, e.g. {\"policy\": \"static\"}", "invalid_request_error")
        if not isinstance(change, dict):
            return _error(400, "body must be a JSON object", "invalid_request_error")
        allowed = {"policy", *OPTIONS}
        if unknown := sorted(set(change) - allowed):
            return _error(400, f"unknown field {unknown[0]!r}; valid: {', '.join(sorted(allowed))}", "invalid_request_error")
        try:
            # From the start settings, not the last change: a body names every field it sets apart from them.
            new_policy = self.settings.with_changes(**change).build_policy()
        except SettingError as exc:
            # Every field is type-checked before use, so a wrong type is this one-line 400, never a 500.
            return _error(400, str(exc), "invalid_request_error", param=exc.setting.removeprefix("gate."))
        self.gate.set_policy(new_policy, self.clock.now_s())  # waiters it admits wake via on_waiter_granted
        return JSONResponse(_state(self.admission))

    def _admin_denied(self, request: Request) -> Response | None:
        token = self.settings.admin_token
        if token is None:
            return _error(403, "admin endpoints are disabled: set gate.admin_token (RESTORELENS_GATE_ADMIN_TOKEN)", "admin_disabled")
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(), token.encode()):
            return _error(401, "admin endpoints need 'Authorization: Bearer <gate.admin_token>'", "unauthorized", {"www-authenticate": "Bearer"})
        return None


def create_gate_app(
    settings: GateSettings,
    *,
    tracer_provider: TracerProvider | None = None,
    router: ModelRouter | None = None,
    clock: Clock | None = None,
) -> GateApp:
    """The gate app. ``tracer_provider=None`` uses the global provider; ``settings.tracing=False`` none."""
    settings = settings.validate()
    clock = clock or WallClock()
    if not settings.tracing:
        tracer_provider = NoOpTracerProvider()
    if router is None:
        router = lifecycle_router(settings, tracer_provider, clock)
    waiters: dict[Waiter, asyncio.Future[Grant | Rejection]] = {}
    gate = assemble_gate(settings, tracer_provider, router=router, on_waiter_granted=functools.partial(_wake, waiters))
    admission, emitter = gate.admission, gate.spans
    pool = UpstreamTransport(max_connections=settings.max_connections)
    timeout = httpx.Timeout(settings.upstream_timeout_s, connect=settings.connect_timeout_s)
    upstreams = UpstreamTable(settings.upstream_urls())
    refusals = dict.fromkeys(REFUSAL_LIMITS, 0)
    proxy = ProxyEndpoint(
        settings=settings, admission=admission, emitter=emitter, upstream=pool, timeout=timeout,
        upstreams=upstreams, clock=clock, router=router, waiters=waiters, refusals=refusals,
    )
    admission.on_preempt = proxy.preempt
    registry = new_registry(admission, lambda: proxy.upstream_errors, refusals, tracer_provider if settings.tracing else None)
    if router is not None:
        router.register_metrics(registry)
    # Briefly: one hung engine must not hold the listing for upstream_timeout_s.
    listing = ModelListing([u for urls in upstreams.urls.values() for u in urls], timeout_s=settings.connect_timeout_s)
    endpoints = GateEndpoints(settings, gate, registry, listing, pool, clock, refusals)
    routes = [Route(path, proxy, methods=["POST"]) for path in INFERENCE_PATHS] + endpoints.routes()
    routes += router.routes() if router is not None else []
    app = GateApp(routes=routes, lifespan=endpoints.lifespan, exception_handlers={HTTPException: _http_error})
    app.proxy = proxy
    app.state.head_limit = HeadLimit(settings.max_header_bytes, _head_refusal, functools.partial(_count, refusals, "max_header_bytes"))
    app.state.admission = admission
    app.state.settings = settings
    app.state.registry = registry
    app.state.spans = emitter
    app.state.begin_drain = proxy.begin_drain  # the server's shutdown answers held and queued requests first
    app.state.cut_requests = proxy.cut_requests  # and tells the proxy when its drain deadline passed
    return app


def _head_refusal(status: int, message: str) -> tuple[bytes, bytes]:
    return b"application/json", error_body(status, message, "request_too_large")


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] += 1


def _state(admission: Admission) -> dict[str, Any]:
    occupancy = admission.occupancy()
    return {
        **admission.policy.describe(),
        "in_flight_own": dict(occupancy.own),
        "in_flight_borrowed": occupancy.borrowed,
        "queued": dict(occupancy.queued),
        "lending": admission.tracker.lending,
        "admitted": dict(admission.counters.admitted),
        "rejected": dict(admission.counters.rejected),
        "withdrawn": dict(admission.counters.withdrawn),
        "lending_periods": admission.tracker.periods_started,
        "restoration_episodes": [
            {
                "t0_s": e.t0_s,
                "returning_request_id": e.returning_request_id,
                "borrowed_at_return": e.borrowed_at_return,
                "grant_restored_s": e.grant_restored_s,
                "borrowed_drained_s": e.borrowed_drained_s,
                "first_byte_seen_s": e.first_byte_seen_s,
                "budget_s": e.budget_s,
                "over_budget": e.over_budget,
            }
            for e in itertools.islice(admission.episodes, max(0, len(admission.episodes) - 20), None)
        ],
    }
