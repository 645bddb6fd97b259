"""The gate app's own routes (admin, models, errors) on a real uvicorn server."""

from __future__ import annotations

import httpx
import pytest

from restorelens.gate import GateSettings
from restorelens.gate.app import create_gate_app

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
