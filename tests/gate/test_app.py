"""The gate app's own routes (admin, models, errors) on a real uvicorn server."""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from restorelens.gate import GateSettings
from restorelens.gate.app import create_gate_app
from restorelens.sim import create_app

TOKEN = "test-admin-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def gate(serve_asgi):
    # The upstream is never contacted by these routes; port 9 (discard) is closed on loopback.
    settings = GateSettings(upstreams={"*": "http://127.0.0.1:9"}, admin_token=TOKEN, tracing=False)
    return serve_asgi(create_gate_app(settings))


@pytest.mark.parametrize(("body", "field"), [
    ({"policy": "lend", "floors": 5}, "floors"),
    ({"lendable_slots": "x"}, "lendable_slots"),
    ({"capacity": True, "policy": "fcfs"}, "capacity"),
    ({"floors": {"interactive": 2.5}}, "floors"),
    ({"policy": ["lend"]}, "policy"),
    ({"floors": {"interactive": None}}, "floors"),
])
def test_admin_policy_body_of_the_wrong_type_is_400_naming_the_field(gate, body, field) -> None:
    answer = httpx.post(gate.url + "/admin/policy", json=body, headers=AUTH)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["param"] == field and f"gate.{field}" in error["message"]
    assert error["type"] == "invalid_request_error"
    # Nothing changed: the policy in force is still the default.
    assert httpx.get(gate.url + "/admin/state", headers=AUTH).json()["policy"] == "lend"


def test_unknown_path_and_wrong_method_answer_the_json_error_shape(gate) -> None:
    missing = httpx.get(gate.url + "/nope")
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/json"
    assert missing.json()["error"]["code"] == 404 and missing.json()["error"]["type"] == "not_found"
    wrong = httpx.delete(gate.url + "/admin/state", headers=AUTH)
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "method_not_allowed"
    assert "GET" in wrong.headers["allow"]
    assert httpx.get(gate.url + "/v1/completions").json()["error"]["code"] == 405


def _barrier_engine(barrier: threading.Barrier, model: str) -> Starlette:
    # A STAND-IN engine: it answers /v1/models only once every engine of the test was asked, which
    # a gate asking one engine after another never achieves.
    def models(request: Request) -> Response:  # sync: Starlette runs it in a worker thread
        barrier.wait()
        return JSONResponse({"object": "list", "data": [{"id": model, "object": "model"}]})

    return Starlette(routes=[Route("/v1/models", models)])


def test_models_asks_every_upstream_at_once(serve_asgi) -> None:
    barrier = threading.Barrier(2, timeout=60)
    one, two = (serve_asgi(_barrier_engine(barrier, m)) for m in ("a", "b"))
    settings = GateSettings(upstreams={"a": one.url, "b": two.url}, tracing=False, connect_timeout_s=60)
    gate = serve_asgi(create_gate_app(settings))
    listed = httpx.get(gate.url + "/v1/models", timeout=120).json()
    assert sorted(m["id"] for m in listed["data"]) == ["a", "b"] and listed["unreachable"] == []


def test_models_forwards_credentials_and_reports_what_it_could_not_list(serve_asgi) -> None:
    keyed = serve_asgi(create_app("tiny-cpu", model_name="keyed", api_key="engine-key"))
    with socket.socket() as silent:  # accepts connections (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent_url = "http://127.0.0.1:%d" % silent.getsockname()[1]
        with socket.socket() as closed:
            closed.bind(("127.0.0.1", 0))
            closed_url = "http://127.0.0.1:%d" % closed.getsockname()[1]  # bound, not listening: refused
        upstreams = {"keyed": keyed.url, "silent": silent_url, "closed": closed_url}
        gate = serve_asgi(create_gate_app(GateSettings(upstreams=upstreams, tracing=False, connect_timeout_s=0.2)))
        with_key = httpx.get(gate.url + "/v1/models", headers={"authorization": "Bearer engine-key"}, timeout=30).json()
        without_key = httpx.get(gate.url + "/v1/models", timeout=30).json()
    assert [m["id"] for m in with_key["data"]] == ["keyed"]
    problems = {p["upstream"]: p["error"] for p in with_key["unreachable"]}
    assert problems == {silent_url: "no answer within 0.2 s", closed_url: "unreachable (ConnectError)"}
    assert without_key["data"] == []
    assert {p["upstream"]: p["error"] for p in without_key["unreachable"]}[keyed.url] == "answered 401"


def test_admin_endpoints_need_the_bearer_token(gate, serve_asgi) -> None:
    for headers in ({}, {"authorization": "Bearer wrong-token"}, {"authorization": f"Basic {TOKEN}"}):
        denied = httpx.get(gate.url + "/admin/state", headers=headers)
        assert denied.status_code == 401 and denied.headers["www-authenticate"] == "Bearer"
        assert denied.json()["error"]["type"] == "unauthorized"
    assert httpx.get(gate.url + "/admin/state", headers={"authorization": f"bearer {TOKEN}"}).status_code == 200
    tokenless = serve_asgi(create_gate_app(GateSettings(upstreams={"*": "http://127.0.0.1:9"}, tracing=False)))
    disabled = httpx.put(tokenless.url + "/admin/policy", json={"policy": "static"})
    assert disabled.status_code == 403 and disabled.json()["error"]["type"] == "admin_disabled"


def test_a_policy_change_is_in_force_at_once(gate) -> None:
    changed = httpx.put(gate.url + "/admin/policy", json={"policy": "static"}, headers=AUTH)
    assert changed.status_code == 200 and changed.json()["policy"] == "static"
    assert httpx.get(gate.url + "/health").json() == {"status": "ok", "policy": "static"}
    assert "restorelens_gate_admitted" in httpx.get(gate.url + "/metrics").text


def _refused(gate) -> dict[str, float]:
    """restorelens_gate_refused_total by limit, read off /metrics."""
    found = {}
    for line in httpx.get(gate.url + "/metrics").text.splitlines():
        if line.startswith("restorelens_gate_refused_total{"):
            found[line.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    return found


def test_a_deeply_nested_body_is_400_not_500_at_the_proxy_and_the_admin_endpoint(gate) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    inference = httpx.post(gate.url + "/v1/completions", content=deep, headers={"content-type": "application/json"})
    message = "request body nests JSON deeper than 64 levels"
    assert inference.status_code == 400 and inference.json()["error"]["message"] == message
    admin = httpx.put(gate.url + "/admin/policy", content=deep, headers={**AUTH, "content-type": "application/json"})
    assert admin.status_code == 400 and admin.json()["error"]["message"] == "body nests JSON deeper than 64 levels"
    # Deeper than gate.max_json_depth but well within what the parser could take: refused the same way.
    payload = {"model": "tiny", "prompt": "hi", "x": json.loads("[" * 65 + "]" * 65)}
    assert httpx.post(gate.url + "/v1/completions", json=payload).json()["error"]["message"] == message
    # and the gate serves on: its state is readable and the policy unchanged
    assert httpx.get(gate.url + "/admin/state", headers=AUTH).json()["policy"] == "lend"
    assert _refused(gate) == {"max_body_bytes": 0, "max_header_bytes": 0, "max_json_depth": 3}


def test_oversize_heads_and_bodies_are_refused_in_the_gates_error_shape_and_counted(serve_asgi) -> None:
    settings = GateSettings(upstreams={"tiny": "http://127.0.0.1:9"}, tracing=False, max_header_bytes=4096, max_body_bytes=1000)
    gate = serve_asgi(create_gate_app(settings))
    head = httpx.post(gate.url + "/v1/completions", json={"model": "tiny"}, headers={"x-pad": "p" * 5000})
    assert head.status_code == 431
    assert head.json() == {"error": {"message": "request line and headers exceed 4096 bytes", "type": "request_too_large", "code": 431}}
    body = httpx.post(gate.url + "/v1/completions", json={"model": "tiny", "prompt": "p" * 2000})
    assert body.status_code == 413 and body.json()["error"]["type"] == "request_too_large"
    assert _refused(gate) == {"max_body_bytes": 1, "max_header_bytes": 1, "max_json_depth": 0}


def test_a_slow_listing_neither_holds_inference_nor_multiplies_engine_calls(serve_asgi) -> None:
    """1,000 concurrent GET /v1/models with a hung engine once pushed inference on a healthy one from
    3 ms to 7 s (the listing shared the proxy's pool); now they share one fan-out and their own pool."""
    hung = threading.Event()
    asked = []

    def models(request: Request) -> Response:  # sync: runs in a worker thread, so it can block
        asked.append(1)
        hung.wait(30)
        return JSONResponse({"object": "list", "data": []})

    silent = serve_asgi(Starlette(routes=[Route("/v1/models", models)]))
    healthy = serve_asgi(create_app("tiny-cpu", model_name="tiny"))
    settings = GateSettings(upstreams={"tiny": healthy.url, "other": silent.url}, tracing=False, connect_timeout_s=5,
                            max_connections=4)
    gate = serve_asgi(create_gate_app(settings))

    async def storm() -> tuple[list[int], list[int]]:
        async with httpx.AsyncClient(base_url=gate.url, timeout=60, limits=httpx.Limits(max_connections=300)) as client:
            listings = [asyncio.create_task(client.get("/v1/models")) for _ in range(200)]
            await asyncio.sleep(0.5)  # the listings are all waiting on the hung engine now
            inference = [await client.post("/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 1})
                         for _ in range(10)]
            done_before_listings = sum(not t.done() for t in listings)
            hung.set()
            answers = await asyncio.gather(*listings)
            assert done_before_listings > 0  # the inference ran while listings were still hanging
            return [r.status_code for r in inference], [r.status_code for r in answers]

    inference, listings = asyncio.run(storm())
    assert inference == [200] * 10
    assert set(listings) == {200}
    assert len(asked) == 1  # one fan-out in flight per credential, not one per caller


def test_the_lend_policys_control_period_can_be_changed_at_run_time(gate) -> None:
    answer = httpx.put(gate.url + "/admin/policy", json={"control_period_s": 0.25}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    state = httpx.get(gate.url + "/admin/state", headers=AUTH).json()
    assert state["control_period_s"] == 0.25


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(depth=st.integers(0, 3000), kinds=st.lists(st.sampled_from(["[", "{"]), min_size=1, max_size=8),
       where=st.sampled_from(["proxy", "admin"]))
def test_fuzz_nesting_depth_is_400_past_the_limit_and_never_500(gate, depth: int, kinds: list[str], where: str) -> None:
    """Nesting of any depth, objects and arrays mixed, at both JSON endpoints: 400 exactly past
    gate.max_json_depth (64), whatever the parser's own recursion limit; never a 5xx."""
    opening = "".join(kinds[i % len(kinds)] if kinds[i % len(kinds)] == "[" else '{"k":' for i in range(depth))
    closing = "".join("]" if kinds[i % len(kinds)] == "[" else "}" for i in reversed(range(depth)))
    if where == "proxy":
        body = '{"model": "tiny", "prompt": "x", "extra": ' + opening + "1" + closing + "}"
        answer = httpx.post(gate.url + "/v1/completions", content=body, headers={"content-type": "application/json"})
    else:
        body = '{"policy": "lend", "x": ' + opening + "1" + closing + "}"
        answer = httpx.put(gate.url + "/admin/policy", content=body, headers={**AUTH, "content-type": "application/json"})
    too_deep = depth + 1 > 64  # the body's own object is one level
    assert answer.status_code != 500  # the gate's own failure; a 502 is its upstream (port 9) refusing
    message = answer.json()["error"]["message"]
    assert ("deeper than 64 levels" in message) == too_deep
    if too_deep:
        assert answer.status_code == 400


def test_an_integer_past_pythons_digit_limit_is_a_400_not_a_500(gate) -> None:
    body = '{"model": "tiny", "prompt": "x", "n": ' + "1" * 5000 + "}"
    answer = httpx.post(gate.url + "/v1/completions", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 400 and "not valid JSON" in answer.json()["error"]["message"]


def test_models_passes_a_latin_1_credential_through_instead_of_failing(serve_asgi) -> None:
    seen = []

    def models(request: Request) -> Response:
        seen.append(request.headers.get("authorization"))
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})

    engine = serve_asgi(Starlette(routes=[Route("/v1/models", models)]))
    gate = serve_asgi(create_gate_app(GateSettings(upstreams={"m": engine.url}, tracing=False)))
    answer = httpx.get(gate.url + "/v1/models", headers={"authorization": "Bearer caf\xe9".encode("latin-1")})
    assert answer.status_code == 200 and [m["id"] for m in answer.json()["data"]] == ["m"]
    assert seen == ["Bearer caf\xe9"]
