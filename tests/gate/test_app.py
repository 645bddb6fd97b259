"""The gate app's own routes (admin, models, errors) on a real uvicorn server."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest
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


def test_a_deeply_nested_body_is_400_not_500_at_the_proxy_and_the_admin_endpoint(gate) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    inference = httpx.post(gate.url + "/v1/completions", content=deep, headers={"content-type": "application/json"})
    assert inference.status_code == 400 and "nested too deeply" in inference.json()["error"]["message"]
    admin = httpx.put(gate.url + "/admin/policy", content=deep, headers={**AUTH, "content-type": "application/json"})
    assert admin.status_code == 400 and "nested too deeply" in admin.json()["error"]["message"]
    # and the gate serves on: its state is readable and the policy unchanged
    assert httpx.get(gate.url + "/admin/state", headers=AUTH).json()["policy"] == "lend"


def test_the_lend_policys_control_period_can_be_changed_at_run_time(gate) -> None:
    answer = httpx.put(gate.url + "/admin/policy", json={"control_period_s": 0.25}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    state = httpx.get(gate.url + "/admin/state", headers=AUTH).json()
    assert state["control_period_s"] == 0.25
