"""The gate as a real server in front of a real (stand-in) engine: forwarding, streaming, faults.

The live restoration test runs against the real simulator (``restorelens.sim.create_app``). The fault
and disconnect tests use a STAND-IN engine (a few lines of Starlette) because they need what no real
engine offers on demand: hold a request open until the test releases it, fail with a 500, stall past
the gate's timeout. It emits ``llm_request`` under the propagated traceparent like vLLM does.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from restorelens import spans as S
from restorelens.clock import ScaledClock
from restorelens.gate import GateSettings
from restorelens.gate.app import create_gate_app
from restorelens.serving import ServerThread

BOUNDED_POLLS = 400


def standin_engine(tracer_provider=None) -> Starlette:
    tracer = tracer_provider.get_tracer("standin-engine") if tracer_provider is not None else None
    holds: dict[str, asyncio.Event] = {}
    seen: list[dict] = []

    async def completions(request: Request) -> Response:
        payload = await request.json()
        request_id = request.headers.get("x-request-id", "")
        seen.append({"request_id": request_id, "priority": payload.get("priority"), "traceparent": request.headers.get("traceparent")})
        model = payload.get("model")
        if model == "boom":
            return JSONResponse({"error": {"message": "engine exploded", "code": 500}}, 500)
        if model == "slow":
            await asyncio.sleep(0.6)
        parent = TraceContextTextMapPropagator().extract(dict(request.headers))
        span = tracer.start_span(S.SPAN_LLM_REQUEST, context=parent) if tracer else None
        hold = holds.setdefault(request_id, asyncio.Event()) if payload.get("hold") else None

        async def chunks():
            try:
                # "tokens": stream fewer than max_tokens before holding (a long answer caught midway).
                for i in range(int(payload.get("tokens", payload.get("max_tokens", 3)))):
                    yield f"data: {json.dumps({'choices': [{'text': f't{i}'}]})}\n\n".encode()
                    await asyncio.sleep(0.001)
                if hold is not None:
                    await hold.wait()
                yield b"data: [DONE]\n\n"
            finally:
                if span is not None:
                    span.set_attribute(S.ATTR_GEN_AI_REQUEST_ID, request_id)
                    span.end()

        if payload.get("stream"):
            return StreamingResponse(chunks(), media_type="text/event-stream")
        body = b"".join([c async for c in chunks()])
        return Response(body, media_type="text/plain")

    async def release(request: Request) -> Response:
        holds.setdefault(request.path_params["request_id"], asyncio.Event()).set()
        return JSONResponse({"released": True})

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    app = Starlette(routes=[
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/v1/models", models),
        Route("/release/{request_id}", release, methods=["POST"]),
    ])
    app.state.seen = seen
    return app


def wait_until(check: Callable[[], bool]) -> None:
    for _ in range(BOUNDED_POLLS):
        if check():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def gate_state(gate: ServerThread, token: str) -> dict:
    return httpx.get(gate.url + "/admin/state", headers={"authorization": f"Bearer {token}"}).json()


TOKEN = "test-admin-token"


@pytest.fixture
def engine(serve_asgi, tracer_provider) -> ServerThread:
    app = standin_engine(tracer_provider)
    server = serve_asgi(app)
    server.seen = app.state.seen  # type: ignore[attr-defined]
    return server


def start_gate(serve_asgi, engine_url: str, tracer_provider=None, **options) -> ServerThread:
    settings = GateSettings(upstreams={"*": engine_url}, admin_token=TOKEN, **options)
    return serve_asgi(create_gate_app(settings, tracer_provider=tracer_provider))


def test_streams_sse_through_and_propagates_trace(serve_asgi, engine, tracer_provider, span_exporter) -> None:
    gate = start_gate(serve_asgi, engine.url, tracer_provider, policy="priority")
    body = {"model": "tiny", "prompt": "secret prompt text", "max_tokens": 4, "stream": True}
    with httpx.stream("POST", gate.url + "/v1/completions", json=body, headers={"x-traffic-class": "batch", "x-request-id": "r1"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line.startswith("data:")]
    assert len(events) == 5 and events[-1] == "data: [DONE]"
    assert engine.seen[-1]["priority"] == 10  # priority policy tags vLLM's field

    spans = {s.name: s for s in span_exporter.get_finished_spans()}
    gate_span, llm, post = spans[S.SPAN_GATE_REQUEST], spans[S.SPAN_LLM_REQUEST], spans[S.SPAN_HTTP_POST]
    assert llm.context.trace_id == gate_span.context.trace_id == post.context.trace_id
    assert post.parent.span_id == gate_span.context.span_id and llm.parent.span_id == post.context.span_id
    assert gate_span.attributes[S.ATTR_REQUEST_ID] == "r1"
    assert gate_span.attributes[S.ATTR_TRAFFIC_CLASS] == "batch"
    assert gate_span.attributes[S.ATTR_GATE_DECISION] == "admitted"
    assert gate_span.attributes[S.ATTR_HTTP_STATUS_CODE] == 200
    assert [e.name for e in gate_span.events] == [S.EVENT_GRANT_ACQUIRED, S.EVENT_UPSTREAM_FIRST_BYTE]
    for span in span_exporter.get_finished_spans():  # prompt text never lands on a span
        assert "secret" not in json.dumps(dict(span.attributes or {}))


def test_faults_answer_json_errors(serve_asgi, engine) -> None:
    gate = start_gate(serve_asgi, engine.url, upstream_timeout_s=0.1)
    seen_before = len(engine.seen)
    bad = httpx.post(gate.url + "/v1/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    assert len(engine.seen) == seen_before  # the upstream was never touched

    boom = httpx.post(gate.url + "/v1/completions", json={"model": "boom", "prompt": "x"})
    assert boom.status_code == 500 and boom.json()["error"]["message"] == "engine exploded"

    slow = httpx.post(gate.url + "/v1/completions", json={"model": "slow", "prompt": "x"})
    assert slow.status_code == 504 and slow.json()["error"]["type"] == "upstream_timeout"

    bad_class = httpx.post(gate.url + "/v1/completions", json={"model": "tiny"}, headers={"x-traffic-class": "vip"})
    assert bad_class.status_code == 400

    state = gate_state(gate, TOKEN)
    assert state["in_flight_own"] == {"interactive": 0, "batch": 0} and state["in_flight_borrowed"] == 0


def test_refused_upstream_is_502_and_unknown_model_404(serve_asgi) -> None:
    dead = ServerThread(standin_engine())  # bind a port, then close it: nobody listens there
    dead_url = dead.url
    dead.start()
    dead.stop()
    gate = serve_asgi(create_gate_app(GateSettings(upstreams={"tiny": dead_url}, policy="lend", admin_token=TOKEN)))
    refused = httpx.post(gate.url + "/v1/completions", json={"model": "tiny", "prompt": "x"})
    assert refused.status_code == 502 and refused.json()["error"]["type"] == "upstream_error"
    unknown = httpx.post(gate.url + "/v1/completions", json={"model": "nope", "prompt": "x"})
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "model_not_found"
    assert gate_state(gate, TOKEN)["in_flight_own"]["interactive"] == 0


def test_rejection_is_429_with_retry_hint_headers(serve_asgi, engine) -> None:
    gate = start_gate(serve_asgi, engine.url, policy="static", floors={"interactive": 1, "batch": 1}, wait_timeout_s=0.05)
    held = {"model": "tiny", "prompt": "x", "max_tokens": 1, "stream": True, "hold": True}
    with httpx.Client() as client, client.stream("POST", gate.url + "/v1/completions", json=held, headers={"x-request-id": "h1"}) as first:
        assert first.status_code == 200
        rejected = httpx.post(gate.url + "/v1/completions", json={"model": "tiny", "prompt": "x"})
        assert rejected.status_code == 429
        assert rejected.json()["error"]["type"] == "admission_rejected"
        assert "retry-after" not in rejected.headers  # no estimate before three completions: none invented
        httpx.post(engine.url + "/release/h1")
        first.read()
    assert gate_state(gate, TOKEN)["rejected"]["interactive"] == 1


def test_queue_timeout_runs_on_the_gate_clock_not_the_wall(serve_asgi, engine) -> None:
    """With a clock 600x faster than the wall (``restorelens run --time-scale 600``), a 60-s queue wait is 0.1 s real."""
    settings = GateSettings(upstreams={"*": engine.url}, admin_token=TOKEN, policy="static",
                            floors={"interactive": 1, "batch": 1}, wait_timeout_s=60.0, tracing=False)
    gate = serve_asgi(create_gate_app(settings, clock=ScaledClock(600.0)))
    held = {"model": "tiny", "prompt": "x", "max_tokens": 1, "stream": True, "hold": True}
    with httpx.Client() as client, client.stream("POST", gate.url + "/v1/completions", json=held, headers={"x-request-id": "s1"}) as first:
        assert first.status_code == 200
        # Read as clock seconds by asyncio, the 60-s wait would outlast this 30-s client timeout.
        rejected = httpx.post(gate.url + "/v1/completions", json={"model": "tiny", "prompt": "x"}, timeout=30)
        assert rejected.status_code == 429 and "timeout" in rejected.json()["error"]["message"]
        httpx.post(engine.url + "/release/s1")
        first.read()


def test_client_disconnect_mid_stream_and_while_queued_release_the_grant(serve_asgi, engine) -> None:
    gate = start_gate(serve_asgi, engine.url, policy="static", floors={"interactive": 1, "batch": 1})
    held = {"model": "tiny", "prompt": "x", "max_tokens": 2, "stream": True, "hold": True}
    first = httpx.Client()
    response = first.send(first.build_request("POST", gate.url + "/v1/completions", json=held, headers={"x-request-id": "d1"}), stream=True)
    assert response.status_code == 200
    # A raw socket, so the client leaves exactly once it is queued (a client timeout races the queueing).
    body = json.dumps({"model": "tiny", "prompt": "x"}).encode()
    with socket.create_connection((gate.host, gate.port)) as queued:
        queued.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: gate\r\ncontent-type: application/json\r\n"
                       b"content-length: %d\r\n\r\n%s" % (len(body), body))
        wait_until(lambda: gate_state(gate, TOKEN)["queued"]["interactive"] == 1)
    wait_until(lambda: gate_state(gate, TOKEN)["queued"]["interactive"] == 0)
    response.close()  # mid-stream: the engine still holds d1 open
    first.close()
    wait_until(lambda: gate_state(gate, TOKEN)["in_flight_own"]["interactive"] == 0)
    ok = httpx.post(gate.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1})
    assert ok.status_code == 200
    # The client that left while queued was refused nothing: withdrawn, not rejected.
    state = gate_state(gate, TOKEN)
    assert state["rejected"]["interactive"] == 0 and state["withdrawn"]["interactive"] == 1
    metrics = httpx.get(gate.url + "/metrics").text
    assert 'restorelens_gate_rejected_total{traffic_class="interactive"} 0.0' in metrics
    assert 'restorelens_gate_withdrawn_total{traffic_class="interactive"} 1.0' in metrics


def test_proxied_answers_carry_one_date_and_one_server_header(serve_asgi, engine) -> None:
    gate = start_gate(serve_asgi, engine.url)
    for body in ({"model": "tiny", "prompt": "x", "max_tokens": 1}, {"model": "tiny", "prompt": "x", "stream": True}):
        answer = httpx.post(gate.url + "/v1/completions", json=body)
        assert answer.status_code == 200
        names = [name.lower() for name, _ in answer.headers.raw]
        assert names.count(b"date") == 1 and names.count(b"server") == 1


def test_admin_needs_token_and_metrics_are_prometheus(serve_asgi, engine) -> None:
    closed = serve_asgi(create_gate_app(GateSettings(upstreams={"*": engine.url})))
    disabled = httpx.get(closed.url + "/admin/state")
    assert disabled.status_code == 403 and "admin_token" in disabled.json()["error"]["message"]
    gate = start_gate(serve_asgi, engine.url)
    assert httpx.get(gate.url + "/admin/state").status_code == 401
    assert httpx.get(gate.url + "/admin/state", headers={"authorization": "Bearer wrong-token"}).status_code == 401
    changed = httpx.put(gate.url + "/admin/policy", json={"policy": "static", "floors": {"interactive": 2, "batch": 2}},
                        headers={"authorization": f"Bearer {TOKEN}"})
    assert changed.status_code == 200 and changed.json()["policy"] == "static"
    bad = httpx.put(gate.url + "/admin/policy", json={"policy": "nope"}, headers={"authorization": f"Bearer {TOKEN}"})
    assert bad.status_code == 400 and "gate.policy" in bad.json()["error"]["message"]
    httpx.post(gate.url + "/v1/completions", json={"model": "tiny", "prompt": "x"}, headers={"x-traffic-class": "batch"})
    metrics = httpx.get(gate.url + "/metrics").text
    assert 'restorelens_gate_admitted_total{traffic_class="batch"} 1.0' in metrics
    assert "restorelens_gate_in_flight_borrowed 0.0" in metrics
    assert "restorelens_gate_restoration_episodes_total 0.0" in metrics
    models = httpx.get(gate.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["tiny"]


def test_live_restore_span_matches_what_the_client_saw(serve_asgi, tracer_provider, span_exporter) -> None:
    """client -> gate (lend, 2/1 floors, 1 lendable) -> the real simulator; interactive returns while b2 borrows."""
    from restorelens.sim import create_app

    engine = serve_asgi(create_app("tiny-cpu", model_name="tiny", tracer_provider=tracer_provider))
    gate = start_gate(serve_asgi, engine.url, tracer_provider, policy="lend", floors={"interactive": 2, "batch": 1}, lendable_slots=1)
    tracer = tracer_provider.get_tracer("test-client")
    propagator = TraceContextTextMapPropagator()
    client_seen: dict[str, float] = {}

    def send(request_id: str, traffic_class: str, max_tokens: int) -> None:
        with tracer.start_as_current_span(S.SPAN_CLIENT_REQUEST) as span:
            span.set_attribute(S.ATTR_REQUEST_ID, request_id)
            headers = {"x-request-id": request_id, "x-traffic-class": traffic_class}
            propagator.inject(headers)
            body = {"model": "tiny", "prompt": "x", "max_tokens": max_tokens, "stream": True, "ignore_eos": True}
            with httpx.stream("POST", gate.url + "/v1/completions", json=body, headers=headers, timeout=30) as response:
                assert response.status_code == 200
                response.read()
            client_seen[request_id] = time.time()

    # Batch runs long (~300 engine steps), the returning interactive request short (2 tokens).
    batch = [threading.Thread(target=send, args=(rid, "batch", 300)) for rid in ("b1", "b2")]
    batch[0].start()
    wait_until(lambda: gate_state(gate, TOKEN)["in_flight_own"]["batch"] == 1)
    batch[1].start()
    wait_until(lambda: gate_state(gate, TOKEN)["in_flight_borrowed"] == 1)
    send("i1", "interactive", 2)  # demand returns; served on the never-lent slot
    assert gate_state(gate, TOKEN)["in_flight_borrowed"] == 1  # i1 done, the loan still out
    for thread in batch:
        thread.join(30)
    wait_until(lambda: gate_state(gate, TOKEN)["restoration_episodes"][-1]["borrowed_drained_s"] is not None)

    finished = span_exporter.get_finished_spans()
    [restore] = [s for s in finished if s.name == S.SPAN_GATE_RESTORE]
    gate_requests = {s.attributes[S.ATTR_REQUEST_ID]: s for s in finished if s.name == S.SPAN_GATE_REQUEST}
    clients = {s.attributes[S.ATTR_REQUEST_ID]: s for s in finished if s.name == S.SPAN_CLIENT_REQUEST}
    i1 = gate_requests["i1"]
    [link] = restore.links
    assert link.context.span_id == i1.context.span_id
    # One trace for the returning request across client, gate and engine.
    engine_spans = [s for s in finished if s.name == S.SPAN_LLM_REQUEST and s.context.trace_id == i1.context.trace_id]
    assert clients["i1"].context.trace_id == i1.context.trace_id and len(engine_spans) == 1
    assert restore.attributes[S.ATTR_GATE_BORROWED_AT_RETURN] == 1
    assert restore.attributes[S.ATTR_REQUEST_ID] == "i1"

    events = {e.name: e.timestamp for e in restore.events}
    grant_acquired = {e.name: e.timestamp for e in i1.events}[S.EVENT_GRANT_ACQUIRED]
    assert restore.start_time <= events[S.EVENT_GRANT_RESTORED] == grant_acquired
    b2 = gate_requests["b2"]
    assert b2.attributes[S.ATTR_GATE_SLOT] == "borrowed"
    # Drained when b2, the borrowed request, finished: after i1 was served, within b2's gate span,
    # and the client saw i1 complete before b2.
    b2_grant = {e.name: e.timestamp for e in b2.events}[S.EVENT_GRANT_ACQUIRED]
    assert b2_grant < events[S.EVENT_BORROWED_DRAINED] <= b2.end_time
    assert events[S.EVENT_BORROWED_DRAINED] > i1.end_time
    assert client_seen["i1"] < client_seen["b2"]


def test_untraced_gate_forwards_streams_and_maps_faults(serve_asgi, engine) -> None:
    """tracing=False takes the raw path (no httpx models): same answers as the traced one."""
    gate = start_gate(serve_asgi, engine.url, tracing=False, policy="priority", upstream_timeout_s=0.1)
    body = {"model": "tiny", "prompt": "x", "max_tokens": 3, "stream": True}
    with httpx.stream("POST", gate.url + "/v1/completions?x=1", json=body, headers={"x-traffic-class": "batch"}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        assert [line for line in response.iter_lines() if line.startswith("data:")][-1] == "data: [DONE]"
    assert engine.seen[-1]["priority"] == 10 and engine.seen[-1]["traceparent"] is None
    plain = httpx.post(gate.url + "/v1/chat/completions", json={"model": "tiny", "max_tokens": 2})
    assert plain.status_code == 200 and plain.text.count("data:") == 3
    assert httpx.post(gate.url + "/v1/completions", json={"model": "boom"}).status_code == 500
    slow = httpx.post(gate.url + "/v1/completions", json={"model": "slow", "prompt": "x"})
    assert slow.status_code == 504 and slow.json()["error"]["type"] == "upstream_timeout"
    assert gate_state(gate, TOKEN)["in_flight_own"] == {"interactive": 0, "batch": 0}
