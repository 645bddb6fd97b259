"""Every row of the 503 / Retry-After table, through the running gate (real uvicorn, real httpx).

Engines: one real simulator app (the Active row is proxied to it over HTTP); the other models use
in-process engines whose latencies are chosen per pod so that each state lasts through the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx
import pytest

from restorelens.gate.app import create_gate_app
from restorelens.gate.modelclaim.backends import BackendByModel, FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.router import ModelClaimRouter
from restorelens.gate.modelclaim.vllm_backend import VllmSleepBackend
from restorelens.gate.settings import GateSettings
from restorelens.sim.app import create_app

GIB = 2**30
TOKEN = "test-admin-token-123"
AUTH = {"authorization": f"Bearer {TOKEN}"}
HOUR_S = 3600.0


def spec(model: str, *, pods: tuple[str, ...], total_gib: int = 16, **kw) -> ClaimSpec:  # noqa: ANN003
    return ClaimSpec(model, (total_gib - 4) * GIB, 4 * GIB, weight_bytes=GIB, pods=pods, **kw)


class BrokenEngine(FixedLatencyEngine):
    def cold_start(self, now_s: float) -> float:
        raise RuntimeError("engine binary missing")


def engine_for(model: str, pod: str) -> FixedLatencyEngine:
    if model == "broken":
        return BrokenEngine()
    if model == "starting" or pod == "moved-to":
        return FixedLatencyEngine(cold_start_s=HOUR_S)
    return FixedLatencyEngine(cold_start_s=0.0, wake_s=HOUR_S, sleep_s=0.0)


def build_router(sim_url: str) -> ModelClaimRouter:
    pods = [Pod("big", (80 * GIB,)), Pod("shared", (24 * GIB,)), Pod("moved-from", (24 * GIB,)),
            Pod("moved-to", (24 * GIB,))]
    claims = [
        spec("active", pods=("big",)),
        spec("starting", pods=("big",)),
        spec("asleep", pods=("big",)),
        spec("broken", pods=("big",)),
        spec("waits-a", pods=("shared",)),
        spec("waits-b", pods=("shared",)),
        spec("unplaced", pods=("shared",)),
        spec("mover", pods=("moved-from", "moved-to")),
        spec("blocker", pods=("moved-from",)),
        spec("bad-args", pods=("big",), engine_args={"port": "1"}),
        ClaimSpec("bad-pergpu", None, 4 * GIB),
        spec("huge", pods=("big",), total_gib=200),
    ]
    core = ModelClaimCore(
        pods, claims, PoolPolicy(sleep_after_s=HOUR_S, no_wake_reserve_while_asleep=True),
        restart_backoff_s=(0.01,) * 5,
    )
    in_process = InProcessBackend(engine_for)
    backends = {c.model: in_process for c in claims}
    backends["active"] = VllmSleepBackend({"active": sim_url}, poll_interval_s=0.02)
    return ModelClaimRouter(core, BackendByModel(backends), admin_token=TOKEN, health_interval_s=3600)


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def gate(serve_asgi, tracer_provider):  # noqa: ANN001, ANN201
    sim = serve_asgi(create_app("tiny-cpu", model_name="active", enable_sleep_mode=True))
    router = build_router(sim.url)
    server = serve_asgi(create_gate_app(GateSettings(admin_token=TOKEN, modelclaim={}), router=router,
                                        tracer_provider=tracer_provider))
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        yield client, router


def phase_of(client: httpx.Client, model: str) -> tuple[str, str]:
    status = {m["model"]: m for m in client.get("/modelclaim/status").json()["models"]}[model]
    return status["phase"], status["reason"]


def ask(client: httpx.Client, model: str) -> httpx.Response:
    return client.post("/v1/completions", json={"model": model, "prompt": "hi", "max_tokens": 2})


def test_every_row_of_the_503_table(gate) -> None:  # noqa: ANN001
    client, router = gate
    wait_for(lambda: phase_of(client, "active")[0] == "Active", "the simulator to be attached")
    wait_for(lambda: phase_of(client, "broken")[0] == "Failed", "the broken engine's restarts to run out")
    # Orchestrate the sleeping rows through the control API (bearer token).
    for model in ("asleep", "waits-a", "mover"):
        wait_for(lambda m=model: phase_of(client, m)[0] == "Active", f"{model} to start")
        assert client.post(f"/modelclaim/models/{model}/sleep", headers=AUTH).status_code == 202
    wait_for(lambda: phase_of(client, "waits-b")[0] == "Active", "waits-b to take the freed GPU")
    wait_for(lambda: phase_of(client, "blocker")[0] == "Active", "blocker to take the freed GPU")

    rows = {
        "starting": (503, "10", "Loading", "EngineStarting"),
        "asleep": (503, "10", "Activating", "EngineSleeping"),  # room at once: the wake is triggered
        "broken": (503, None, "Failed", "EngineFailed"),  # not retried until restarted: no Retry-After
        "unplaced": (503, "10", "Scheduling", "NotPlaced"),
        "waits-a": (503, "20", "Sleeping", "WaitingForRoom"),  # waits-b idle < 30 s, no other pod
        "mover": (503, "30", "Loading", "Moving"),
        "bad-args": (503, None, "Pending", "InvalidEngineConfig"),
        "bad-pergpu": (503, None, "Pending", "InvalidPerGPU"),
        "huge": (503, None, "Pending", "TooLargeForAnyCard"),
    }
    for model, (status, retry_after, phase, reason) in rows.items():
        response = ask(client, model)
        assert (response.status_code, response.headers.get("retry-after")) == (status, retry_after), model
        assert phase_of(client, model) == (phase, reason), model
        assert response.json()["error"]["message"], model
    failed = ask(client, "broken").json()["error"]["message"]
    assert "engine binary missing" in failed and "/modelclaim/models/broken/restart" in failed
    assert "retry shortly" not in failed
    status = {m["model"]: m for m in client.get("/modelclaim/status").json()["models"]}["broken"]
    assert (status["retry_after_s"], status["last_error"]) == (None, "engine binary missing")
    assert ask(client, "no-such-model").status_code == 400
    ok = ask(client, "active")
    assert ok.status_code == 200 and ok.json()["choices"]


def test_status_is_public_and_control_needs_the_bearer_token(gate) -> None:  # noqa: ANN001
    client, _ = gate
    assert client.get("/modelclaim/status").status_code == 200
    assert client.post("/modelclaim/models/active/sleep").status_code == 401
    assert client.post("/modelclaim/models/active/sleep", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert client.post("/modelclaim/models/nope/sleep", headers=AUTH).status_code == 404
    assert client.post("/modelclaim/models/active/explode", headers=AUTH).status_code == 404
    assert client.post("/modelclaim/models/huge/wake", headers=AUTH).status_code == 409
    assert "restorelens_modelclaim_phase" in client.get("/metrics").text
