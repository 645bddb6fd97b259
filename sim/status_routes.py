"""The simulator's endpoints that report on its engine: ``GET /v1/models``, ``/health``, ``/metrics``."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from restorelens.sim.json_responses import error_response, json_response
from restorelens.sim.metrics import EngineMetrics
from restorelens.sim.state import SimState

__all__ = ["StatusRoutes"]


class StatusRoutes:
    """The model card, readiness and Prometheus metrics of one simulator."""

    def __init__(self, sim: SimState) -> None:
        self.sim = sim

    async def models(self, request: Request) -> Response:
        denied = self.sim.unauthorized(request)
        if denied is not None:
            return denied
        card = {
            "id": self.sim.model_name,
            "object": "model",
            "created": self.sim.created,
            "owned_by": "vllm",
            "root": self.sim.model_name,
            "parent": None,
            "max_model_len": self.sim.config.max_model_len,
        }
        return json_response({"object": "list", "data": [card]})

    async def health(self, request: Request) -> Response:
        if self.sim.core.state == "loading" and not self.sim.core.is_ready(self.sim.clock.now_s()):
            return error_response(503, "the engine is still loading (cold start)")
        return Response(status_code=200)

    async def metrics(self, request: Request) -> Response:
        return Response(self.sim.engine_metrics.render(), media_type=EngineMetrics.CONTENT_TYPE)
