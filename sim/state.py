"""One simulated engine's live state (core, engine task, metrics, key), shared by the route handlers."""

from __future__ import annotations

import contextlib
import hmac
import random
import time
from collections.abc import AsyncIterator

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from restorelens.clock import WallClock
from restorelens.sim.config import EngineConfig
from restorelens.sim.core import EngineCore
from restorelens.sim.json_responses import json_response
from restorelens.sim.live_engine import LiveEngine
from restorelens.sim.metrics import EngineMetrics
from restorelens.sim.tracing import environment_trace_context

__all__ = ["SimState"]


class SimState:
    """One simulated engine's live state (core, engine task, metrics, key), shared by the handlers."""

    def __init__(
        self,
        config: EngineConfig,
        *,
        model_name: str,
        tracer_provider: TracerProvider | None,
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
        #: The trace this process was started in (TRACEPARENT/TRACESTATE), as vLLM reads it: its
        #: startup spans, and requests without a traceparent header, join it.
        self.environment_context = environment_trace_context()
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
        if start_mode == "cold":
            self.engine.cold_start = (now_s, self.environment_context)
            self.engine.flush = tracer_provider.force_flush if tracer_provider is not None else None
        self.clock = clock

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
