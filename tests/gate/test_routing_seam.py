"""The proxy side of the ModelRouter seam.

``ScriptedRouter`` is a test double of the lifecycle driver (issue 5 implements the real one): it
answers from a script so each proxy behaviour (503 + Retry-After, forward, 400) is checked alone.
"""

from __future__ import annotations

import httpx
from prometheus_client import Counter
from starlette.responses import JSONResponse
from starlette.routing import Route

from restorelens import spans as S
from restorelens.gate import GateSettings, create_gate_app
from restorelens.gate.routing import ModelRouter, NotReady, Routed, UnknownModel


class ScriptedRouter:
    def __init__(self, answers: list) -> None:
        self.answers = answers
        self.calls: list[tuple] = []

    def models(self):
        return ["sleepy"]

    def route(self, model, now_s, trigger=None, retries_taken=None):
        self.calls.append(("route", model, trigger is not None and trigger.is_valid))
        return self.answers.pop(0) if self.answers else UnknownModel(model)

    async def wait_routable(self, model, timeout_s):
        self.calls.append(("wait", model))
        return False

    def request_started(self, model, now_s):
        self.calls.append(("started", model))

    def request_finished(self, model, now_s):
        self.calls.append(("finished", model))

    async def start(self):
        self.calls.append(("start",))

    async def stop(self):
        self.calls.append(("stop",))

    def register_metrics(self, registry):
        Counter("modelclaim_wakes", "wakes", registry=registry).inc()

    def routes(self):
        return [Route("/modelclaim/status", lambda request: JSONResponse({"ok": True}))]


def tiny_engine():
    # A minimal stand-in engine: this test is about the router seam, not about forwarding.
    from starlette.applications import Starlette

    async def completions(request):
        return JSONResponse({"choices": [{"text": "ok"}]})

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])


def test_not_ready_then_routed_then_unknown(serve_asgi, tracer_provider, span_exporter) -> None:
    engine = serve_asgi(tiny_engine())
    router = ScriptedRouter([
        NotReady("Sleeping", "EngineSleeping", 10),
        NotReady("Pending", "InvalidPerGPU", None),
        Routed(engine.url),
    ])
    assert isinstance(router, ModelRouter)
    app = create_gate_app(GateSettings(upstreams={"tiny": engine.url}, policy="lend"), tracer_provider=tracer_provider, router=router)
    gate = serve_asgi(app)
    body = {"model": "sleepy", "prompt": "x"}

    asleep = httpx.post(gate.url + "/v1/completions", json=body)
    assert asleep.status_code == 503 and asleep.headers["retry-after"] == "10"
    assert asleep.json()["error"]["type"] == "not_ready"
    held_back = httpx.post(gate.url + "/v1/completions", json=body)
    assert held_back.status_code == 503 and "retry-after" not in held_back.headers
    ok = httpx.post(gate.url + "/v1/completions", json=body)
    assert ok.status_code == 200
    unknown = httpx.post(gate.url + "/v1/completions", json={"model": "nope", "prompt": "x"})
    assert unknown.status_code == 400  # a lifecycle-managed gateway answers 400, as AIBrix's does
    static = httpx.post(gate.url + "/v1/completions", json={"model": "tiny", "prompt": "x"})
    assert static.status_code == 200  # models outside the router still use the static table

    assert httpx.get(gate.url + "/modelclaim/status").json() == {"ok": True}
    assert "modelclaim_wakes_total 1.0" in httpx.get(gate.url + "/metrics").text
    assert router.calls[0] == ("start",)
    assert [c for c in router.calls if c[0] in ("started", "finished")] == [("started", "sleepy"), ("finished", "sleepy")]
    assert all(c[2] for c in router.calls if c[0] == "route")  # the gate.request span context is the trigger

    not_ready = [s for s in span_exporter.get_finished_spans()
                 if s.name == S.SPAN_GATE_REQUEST and s.attributes.get(S.ATTR_GATE_DECISION) == "not_ready"]
    assert len(not_ready) == 2
    first = min(not_ready, key=lambda s: s.start_time)
    assert first.attributes[S.ATTR_MODELCLAIM_PHASE] == "Sleeping"
    assert first.attributes[S.ATTR_MODELCLAIM_REASON] == "EngineSleeping"
    assert first.attributes[S.ATTR_HTTP_STATUS_CODE] == 503
    assert list(first.attributes[S.ATTR_HTTP_RETRY_AFTER]) == ["10"]
    assert app.state.admission.in_flight == 0  # not-ready answers never took a grant


def test_router_stops_with_the_app(serve_asgi) -> None:
    router = ScriptedRouter([])
    gate = serve_asgi(create_gate_app(GateSettings(upstreams={"tiny": "http://127.0.0.1:9"}), router=router))
    assert httpx.get(gate.url + "/health").status_code == 200
    gate.stop()
    assert router.calls[-1] == ("stop",)
