"""The traced client against the real gate and the real simulator on loopback.

The gate is asked to route through a ``ModelRouter``; the lifecycle's live router is not wired here,
so a scripted stand-in router says "not ready, Retry-After 10" twice before routing to the simulator
(the gate, the simulator, HTTP and the spans are all real). The client's clock is virtual and its
sleep advances it, so the 10-s waits cost no real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from typing import Any

from restorelens.clock import VirtualClock
from restorelens.gate.app import create_gate_app
from restorelens.gate.routing import NotReady, RouteAnswer, Routed
from restorelens.gate.settings import GateSettings
from restorelens.loadgen.client import TracedClient
from restorelens.loadgen.request import ClientRequest
from restorelens.loadgen.retry import HonourRetryAfter
from restorelens.sim.app import create_app
from restorelens.spans import (
    ATTR_GATE_DECISION,
    ATTR_HTTP_RESEND_COUNT,
    ATTR_HTTP_RETRY_AFTER,
    ATTR_HTTP_STATUS_CODE,
    ATTR_RETRY_AFTER_S,
    SPAN_CLIENT_REQUEST,
    SPAN_GATE_REQUEST,
    SPAN_HTTP_POST,
    SPAN_LLM_REQUEST,
)

from .conftest import SleepAdvancesClock

MODEL = "tiny"


class WakingRouter:
    """Stand-in for the lifecycle's router: asleep for ``not_ready`` requests, then routed."""

    def __init__(self, upstream_url: str, not_ready: int) -> None:
        self.upstream_url, self.not_ready = upstream_url, not_ready

    def models(self) -> Collection[str]:
        return [MODEL]

    def route(self, model: str, now_s: float, trigger: Any = None, retries_taken: int | None = None) -> RouteAnswer:
        if self.not_ready > 0:
            self.not_ready -= 1
            return NotReady("Sleeping", "EngineSleeping", 10)
        return Routed(self.upstream_url)

    async def wait_routable(self, model: str, timeout_s: float) -> bool:
        return False
    def request_started(self, model: str, now_s: float) -> None: ...
    def request_finished(self, model: str, now_s: float) -> None: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def register_metrics(self, registry: Any) -> None: ...
    def routes(self) -> Sequence[Any]:
        return []


def test_attempts_through_gate_and_engine_are_child_spans_with_resends_and_retry_after(serve_asgi, tracer_provider, span_exporter) -> None:
    engine = serve_asgi(create_app("tiny-cpu", model_name=MODEL, tracer_provider=tracer_provider))
    gate = serve_asgi(create_gate_app(GateSettings(upstreams={MODEL: engine.url}, policy="fcfs"), tracer_provider=tracer_provider,
                                      router=WakingRouter(engine.url, not_ready=2)))
    clock = VirtualClock(0.0)

    async def go():
        async with TracedClient(gate.url, policy=HonourRetryAfter(), tracer_provider=tracer_provider, clock=clock,
                                sleep=SleepAdvancesClock(clock)) as client:
            return await client.request(ClientRequest("wake-1", MODEL, "x" * 200, 8, stream=True))

    result = asyncio.run(go())
    assert result.outcome == "ok" and result.statuses == (503, 503, 200)
    assert [a.start_s for a in result.attempts] == [0.0, 10.0, 20.0]

    spans = span_exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    (root,) = [s for s in spans if s.name == SPAN_CLIENT_REQUEST]
    attempts = sorted((s for s in spans if s.name == SPAN_HTTP_POST and s.parent.span_id == root.context.span_id),
                      key=lambda s: s.start_time)
    assert [s.attributes.get(ATTR_HTTP_RESEND_COUNT) for s in attempts] == [None, 1, 2]
    assert [s.attributes[ATTR_HTTP_STATUS_CODE] for s in attempts] == [503, 503, 200]
    assert [s.attributes.get(ATTR_HTTP_RETRY_AFTER) for s in attempts] == [("10",), ("10",), None]
    assert [s.attributes.get(ATTR_RETRY_AFTER_S) for s in attempts] == [10.0, 10.0, None]
    # each attempt reached the gate as a child of that attempt; the last one reached the engine
    gate_spans = sorted((s for s in spans if s.name == SPAN_GATE_REQUEST), key=lambda s: s.start_time)
    assert [by_id[s.parent.span_id].context.span_id for s in gate_spans] == [a.context.span_id for a in attempts]
    assert [s.attributes[ATTR_GATE_DECISION] for s in gate_spans] == ["not_ready", "not_ready", "admitted"]
    (engine_span,) = [s for s in spans if s.name == SPAN_LLM_REQUEST]
    assert by_id[by_id[engine_span.parent.span_id].parent.span_id] is gate_spans[-1]
    assert len({s.context.trace_id for s in spans if s.name != "GET"}) == 1
