"""The gate's own answers are the same live and in virtual time: status and headers, row by row.

Live: the real gate app on loopback, answering over HTTP. Virtual: the runners' wire, handing the
answer to the virtual client. Both get their decision from ``restorelens.gate.decision``; these tests
feed each shell the same route or admission answer and compare what reaches the client. The
inputs are set at the seams (a ``ModelRouter`` that answers one row of the 503 table; admission
answering one ``Rejection``), because no real deployment can be put into every row on demand.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import httpx
import pytest

from restorelens.experiments import VirtualModelClaimRun, VirtualMofluxRun, get_modelclaim_scenario, get_scenario
from restorelens.gate import GateSettings, Rejection
from restorelens.gate.app import create_gate_app
from restorelens.gate.modelclaim.phases import (
    ACTIVATING,
    FAILED,
    LOADING,
    PENDING,
    REASON_ENGINE_FAILED,
    REASON_ENGINE_SLEEPING,
    REASON_ENGINE_STARTING,
    REASON_INVALID_ENGINE_CONFIG,
    REASON_INVALID_PER_GPU,
    REASON_MOVING,
    REASON_NOT_PLACED,
    REASON_TOO_LARGE_FOR_ANY_CARD,
    REASON_WAITING_FOR_ROOM,
    SLEEPING,
    AnswerTable,
)
from restorelens.gate.routing import NotReady, RouteAnswer
from restorelens.serving import ServerThread

#: Every row of the 503 table: (phase, reason) as the lifecycle reports them.
NOT_READY_ROWS = [
    (LOADING, REASON_ENGINE_STARTING),
    (SLEEPING, REASON_ENGINE_SLEEPING),
    (FAILED, REASON_ENGINE_FAILED),
    (PENDING, REASON_NOT_PLACED),
    (ACTIVATING, REASON_WAITING_FOR_ROOM),
    (LOADING, REASON_MOVING),
    (FAILED, REASON_INVALID_ENGINE_CONFIG),
    (FAILED, REASON_INVALID_PER_GPU),
    (PENDING, REASON_TOO_LARGE_FOR_ANY_CARD),
]
#: The gate's estimate: none, under a second (no Retry-After), over a second (rounded up).
RETRY_AFTER_MS = [None, 400, 2_500]
GATE_HEADERS = ("retry-after", "x-restorelens-retry-after-ms", "retry-after-ms", "x-should-retry")
#: The gate answers these requests itself: nothing is ever forwarded here (port 9 is discard).
NO_ENGINE = "http://127.0.0.1:9"


class OneAnswerRouter:
    """A ``ModelRouter`` whose every request gets ``answer``."""

    def __init__(self, model: str, answer: RouteAnswer) -> None:
        self.model, self.answer = model, answer

    def models(self) -> Collection[str]:
        return (self.model,)

    def route(self, model: str, now_s: float, trigger: Any = None, retries_taken: int | None = None) -> RouteAnswer:
        return self.answer

    async def wait_routable(self, model: str, timeout_s: float) -> bool:
        return False

    def request_started(self, model: str, now_s: float) -> None:
        pass

    def request_finished(self, model: str, now_s: float) -> None:
        pass

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def register_metrics(self, registry: Any) -> None:
        pass

    def routes(self) -> Sequence[Any]:
        return ()


def _live(app: Any, model: str) -> tuple[int, dict[str, str]]:
    with ServerThread(app) as gate:
        response = httpx.post(f"{gate.url}/v1/completions", json={"model": model, "prompt": "x", "max_tokens": 1},
                              headers={"x-traffic-class": "interactive"}, timeout=10)
    return response.status_code, {name: response.headers[name] for name in GATE_HEADERS if name in response.headers}


def _first_virtual_answer(run: Any) -> tuple[int, dict[str, str]]:
    seen: list[tuple[int, dict[str, str]]] = []
    answer = run._answer

    def spy(flight: Any, status: int, headers: list[tuple[str, str]]) -> None:
        seen.append((status, dict(headers)))
        answer(flight, status, headers)

    run._answer = spy
    run.run()
    return seen[0]


def _rejecting(retry_after_ms: int | None):
    def request(request_id: str, traffic_class: str, now_s: float, **_: object) -> Rejection:
        return Rejection(request_id, traffic_class, "queue_full", now_s, now_s, retry_after_ms=retry_after_ms)

    return request


@pytest.mark.parametrize(("phase", "reason"), NOT_READY_ROWS)
def test_a_not_ready_model_gets_the_same_answer_live_and_virtual(phase: str, reason: str) -> None:
    scenario = get_modelclaim_scenario("modelclaim-in-place")
    not_ready: NotReady = AnswerTable().answer(scenario.model, phase, reason)
    settings = GateSettings(upstreams={"*": [NO_ENGINE]}, tracing=False)
    live = _live(create_gate_app(settings, router=OneAnswerRouter(scenario.model, not_ready)), scenario.model)

    run = VirtualModelClaimRun(scenario)
    run.lifecycle.route = lambda model, now_s, trigger=None, retries_taken=None: not_ready
    virtual = _first_virtual_answer(run)

    assert live == virtual
    expected = ({"x-should-retry": "false"} if not_ready.retry_after_s is None
                else {"retry-after": str(not_ready.retry_after_s), "x-should-retry": "true"})
    assert live == (503, expected)


@pytest.mark.parametrize("retry_after_ms", RETRY_AFTER_MS)
def test_a_rejected_request_gets_the_same_answer_live_and_virtual(retry_after_ms: int | None) -> None:
    scenario = get_scenario("moflux-balanced", "lend")
    app = create_gate_app(GateSettings(upstreams={"*": [NO_ENGINE]}, tracing=False))
    app.proxy.admission.request = _rejecting(retry_after_ms)
    live = _live(app, "tiny")

    run = VirtualMofluxRun(scenario)
    run.admission.request = _rejecting(retry_after_ms)
    virtual = _first_virtual_answer(run)

    assert live == virtual
    assert live[0] == 429
    assert live[1]["x-should-retry"] == "true"
    if retry_after_ms is None:
        assert live[1] == {"x-should-retry": "true"}
    else:
        assert live[1]["x-restorelens-retry-after-ms"] == live[1]["retry-after-ms"] == str(retry_after_ms)
        assert live[1].get("retry-after") == (None if retry_after_ms < 1000 else str(-(-retry_after_ms // 1000)))
