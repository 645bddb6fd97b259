"""vLLM's dev-mode sleep API on the simulator: ``POST /sleep``, ``POST /wake_up``, ``GET /is_sleeping``.

Each call is a SERVER span (child of the caller's traceparent) stamped with the simulator's clock;
the wake-up span lasts the modelled wake time.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.propagators.textmap import DefaultGetter
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.requests import Request
from starlette.responses import Response

from restorelens.clock import to_ns
from restorelens.sim.json_responses import error_response, json_response
from restorelens.sim.records import EngineNotReadyError
from restorelens.sim.state import SimState
from restorelens.spans import (
    ATTR_ENGINE_SLEEP_LEVEL,
    ATTR_ENGINE_WAKE_TAGS,
    ATTR_ERROR_TYPE,
    ATTR_HTTP_STATUS_CODE,
    SPAN_ENGINE_IS_SLEEPING,
    SPAN_ENGINE_SLEEP,
    SPAN_ENGINE_WAKE_UP,
)

__all__ = ["SleepRoutes"]

_PROPAGATOR = TraceContextTextMapPropagator()
_GETTER = DefaultGetter()


class SleepRoutes:
    """The sleep API's request handlers over one simulator's core and live engine."""

    def __init__(self, sim: SimState) -> None:
        self.sim = sim

    def _control_span(self, request: Request, name: str, attributes: dict[str, Any]) -> Any:
        if self.sim.tracer is None:
            return None
        return self.sim.tracer.start_span(
            name,
            context=_PROPAGATOR.extract(request.headers, getter=_GETTER),
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=to_ns(self.sim.clock.now_s()),
        )

    def _end_span(self, span: Any, response: Response) -> Response:
        if span is not None:
            span.set_attribute(ATTR_HTTP_STATUS_CODE, response.status_code)
            if response.status_code >= 400:
                span.set_attribute(ATTR_ERROR_TYPE, str(response.status_code))
            span.end(end_time=to_ns(self.sim.clock.now_s()))
        return response

    async def sleep(self, request: Request) -> Response:
        denied = self.sim.unauthorized(request)
        if denied is not None:
            return denied
        level_raw = request.query_params.get("level", "1")
        mode = request.query_params.get("mode", "abort")
        level = int(level_raw) if level_raw.isdigit() else -1
        span = self._control_span(request, SPAN_ENGINE_SLEEP, {ATTR_ENGINE_SLEEP_LEVEL: level})
        if level not in (0, 1, 2):
            return self._end_span(span, error_response(400, f"level must be 0, 1 or 2, got {level_raw!r}", param="level"))
        if mode not in ("abort", "wait"):
            return self._end_span(span, error_response(400, f"mode must be 'abort' or 'wait', got {mode!r}", param="mode"))
        try:
            self.sim.core.sleep(level, self.sim.clock.now_s(), mode=mode)
        except EngineNotReadyError as exc:
            return self._end_span(span, error_response(409, str(exc), error_type="ConflictError"))
        self.sim.engine.kick()
        await self.sim.engine.wait_until(lambda: self.sim.core.state == "asleep")
        return self._end_span(span, json_response({"status": "sleeping", "level": level}))

    async def wake_up(self, request: Request) -> Response:
        denied = self.sim.unauthorized(request)
        if denied is not None:
            return denied
        tags = request.query_params.getlist("tags")
        span = self._control_span(request, SPAN_ENGINE_WAKE_UP, {ATTR_ENGINE_WAKE_TAGS: tags})
        try:
            self.sim.core.wake_up(self.sim.clock.now_s(), tags or None)
        except ValueError as exc:
            return self._end_span(span, error_response(400, str(exc), param="tags"))
        self.sim.engine.kick()
        await self.sim.engine.wait_until(lambda: self.sim.core.state not in ("waking", "loading"))
        status = "sleeping" if self.sim.core.is_sleeping else "awake"
        return self._end_span(span, json_response({"status": status, "tags_woken": tags or ["weights", "kv_cache"]}))

    async def is_sleeping(self, request: Request) -> Response:
        span = self._control_span(request, SPAN_ENGINE_IS_SLEEPING, {})
        return self._end_span(span, json_response({"is_sleeping": self.sim.core.is_sleeping}))
