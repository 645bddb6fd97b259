"""Hold instead of 503, through the running gate (real uvicorn, real httpx): a request for a waking
model is held and forwarded once the wake ends; a wake predicted longer than ``hold_s`` is answered
at once; a client that leaves while held frees its place; at most ``queue_limit`` are held at once.

The lifecycle's engines are in-process stand-ins with chosen wake times (so the test controls
how long a wake lasts); the requests they route go to one real simulator over HTTP.
"""

from __future__ import annotations

import threading

import httpx
import pytest

from restorelens import spans as S
from restorelens.gate.app import create_gate_app
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.estimates import WAKE, DeclaredDurations
from restorelens.gate.modelclaim.hints import RetryHints
from restorelens.gate.modelclaim.phases import AnswerTable
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.router import ModelClaimRouter
from restorelens.gate.settings import GateSettings
from restorelens.serving import ServerThread
from restorelens.sim.app import create_app

from .test_http import wait_for

GIB = 2**30
TOKEN = "test-admin-token-456"
AUTH = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def clients():  # noqa: ANN201
    opened: list[httpx.Client] = []
    yield opened
    for client in opened:
        client.close()


def gate_with(serve_asgi, tracer_provider, clients, *, wake_s: float, hold_s: float,  # noqa: ANN001, ANN202
              queue_limit: int = 256, declared_wake_s: float | None = None):
    sim = serve_asgi(create_app("tiny-cpu", model_name="m"))
    priors = () if declared_wake_s is None else (DeclaredDurations({"m": {WAKE: declared_wake_s}}),)
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB)],
                          PoolPolicy(sleep_after_s=3600),
                          hints=RetryHints(AnswerTable(), "calibrated", hold_s, priors=priors))
    backend = InProcessBackend(lambda model, pod: FixedLatencyEngine(cold_start_s=0.0, wake_s=wake_s, sleep_s=0.0),
                               url_template=sim.url)
    router = ModelClaimRouter(core, backend, admin_token=TOKEN, health_interval_s=3600,
                              tracer_provider=tracer_provider)
    app = create_gate_app(GateSettings(admin_token=TOKEN, modelclaim={}, queue_limit=queue_limit), router=router,
                          tracer_provider=tracer_provider)
    server = serve_asgi(app)
    client = httpx.Client(base_url=server.url, timeout=30.0)
    clients.append(client)
    phase = lambda: client.get("/modelclaim/status").json()["models"][0]["phase"]  # noqa: E731
    wait_for(lambda: phase() == "Active", "the model to start")
    assert client.post("/modelclaim/models/m/sleep", headers=AUTH).status_code == 202
    wait_for(lambda: phase() == "Sleeping" and router.core.claims_view()["m"].op is None, "the model to sleep")
    return client, router


def ask(client: httpx.Client, **options) -> httpx.Response:  # noqa: ANN003
    return client.post("/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 2}, **options)


def gate_spans(exporter) -> list:  # noqa: ANN001
    return [s for s in exporter.get_finished_spans() if s.name == S.SPAN_GATE_REQUEST]


def test_a_held_request_is_forwarded_once_the_wake_ends(serve_asgi, tracer_provider, span_exporter, clients) -> None:
    client, _ = gate_with(serve_asgi, tracer_provider, clients, wake_s=0.4, hold_s=30.0)

    response = ask(client)

    assert response.status_code == 200 and "retry-after" not in response.headers
    spans = gate_spans(span_exporter)
    assert len(spans) == 1, [(s.name, dict(s.attributes)) for s in spans]
    (gate,) = spans
    (wake,) = [s for s in span_exporter.get_finished_spans() if s.name == S.SPAN_MODELCLAIM_WAKE and s.links]
    observed_ns = {e.name: e.timestamp for e in wake.events}[S.EVENT_READY_OBSERVED]
    held_s = gate.attributes[S.ATTR_GATE_HOLD_S]
    # Let through no earlier than the lifecycle saw the engine ready, and only because of it: the
    # hold ended long before its 30 s.
    assert gate.start_time + held_s * 1e9 >= observed_ns - 1e6
    assert 0.3 < held_s < 30.0
    assert gate.attributes[S.ATTR_GATE_DECISION] == "admitted"
    released_ns = {e.name: e.timestamp for e in gate.events}[S.EVENT_HOLD_RELEASED]
    assert released_ns == gate.start_time + round(held_s * 1e9) or abs(released_ns - gate.start_time - held_s * 1e9) < 5e6
    assert (gate.attributes[S.ATTR_MODELCLAIM_HINT_MODE], gate.attributes[S.ATTR_MODELCLAIM_HINT_SOURCE]) == (
        "hold", "elapsed")  # nothing known of this wake yet: a hint of 0.25 s, so held
    assert [link.context.span_id for link in wake.links] == [gate.context.span_id]  # the held request woke it


def test_a_wake_predicted_longer_than_the_hold_is_answered_at_once(serve_asgi, tracer_provider, span_exporter, clients) -> None:
    client, _ = gate_with(serve_asgi, tracer_provider, clients, wake_s=3600.0, hold_s=5.0, declared_wake_s=100.0)

    response = ask(client)

    # The declared wake (100 s) is longer than the 5 s hold: no hold, the hint now, back half the
    # hold before the predicted end (to be held then). The wake began a moment before the answer.
    assert response.status_code == 503
    hint_ms = int(response.headers["x-restorelens-retry-after-ms"])
    assert 90_000 < hint_ms <= 97_500 and response.headers["retry-after"] == str(-(-hint_ms // 1000))
    assert response.headers["retry-after-ms"] == str(hint_ms) and response.headers["x-should-retry"] == "true"
    (gate,) = gate_spans(span_exporter)
    assert S.ATTR_GATE_HOLD_S not in gate.attributes
    assert gate.attributes[S.ATTR_GATE_DECISION] == "not_ready"
    assert S.ATTR_MODELCLAIM_HINT_CAPPED not in gate.attributes


def test_a_wait_longer_than_a_client_follows_is_hinted_at_the_cap_then_held(
        serve_asgi, tracer_provider, span_exporter, clients) -> None:
    client, _ = gate_with(serve_asgi, tracer_provider, clients, wake_s=3600.0, hold_s=5.0, declared_wake_s=3600.0)

    response = ask(client)

    # An hour to go, past the 120 s the OpenAI SDK follows: the longest hint it follows, both
    # millisecond headers and Retry-After within it, re-estimated when the client is back.
    assert response.status_code == 503
    assert (response.headers["retry-after-ms"], response.headers["x-restorelens-retry-after-ms"],
            response.headers["retry-after"]) == ("120000", "120000", "120")
    (gate,) = gate_spans(span_exporter)
    assert gate.attributes[S.ATTR_MODELCLAIM_HINT_CAPPED] is True
    assert gate.attributes[S.ATTR_GATE_RETRY_AFTER_MS] == 120_000 and S.ATTR_GATE_HOLD_S not in gate.attributes


def test_a_held_request_whose_wake_outlasts_the_hold_is_answered_with_a_fresh_hint(
        serve_asgi, tracer_provider, span_exporter, clients) -> None:
    # Predicted within the hold (declared 0.2 s), but the wake takes an hour: held 0.5 s, then
    # answered 503 with the hint of a wake past its prediction, never a hold a second time.
    client, _ = gate_with(serve_asgi, tracer_provider, clients, wake_s=3600.0, hold_s=0.5, declared_wake_s=0.2)

    response = ask(client)

    assert response.status_code == 503 and response.headers["x-should-retry"] == "true"
    assert response.headers["retry-after-ms"] == response.headers["x-restorelens-retry-after-ms"] == "250"
    (gate,) = gate_spans(span_exporter)
    assert 0.45 < gate.attributes[S.ATTR_GATE_HOLD_S] < 5.0
    assert gate.attributes[S.ATTR_GATE_DECISION] == "not_ready" and gate.attributes[S.ATTR_GEN_AI_REQUEST_MODEL] == "m"


def test_a_client_that_leaves_while_held_frees_its_place(serve_asgi, tracer_provider, span_exporter, clients) -> None:
    client, router = gate_with(serve_asgi, tracer_provider, clients, wake_s=3.0, hold_s=30.0, queue_limit=1)

    def impatient() -> None:
        try:
            ask(client, timeout=0.3)
        except httpx.TimeoutException:
            pass

    leaver = threading.Thread(target=impatient)
    leaver.start()
    leaver.join()
    wait_for(lambda: any(s.attributes.get(S.ATTR_ERROR_TYPE) == "client_disconnected"
                         for s in gate_spans(span_exporter)), "the gate to see the client leave")
    (gone,) = gate_spans(span_exporter)
    assert gone.attributes[S.ATTR_GATE_HOLD_S] < 3.0
    # Its place is free again: the next request is held (queue_limit 1) and served after the wake.
    response = ask(client)
    assert response.status_code == 200
    assert router.core.status("m").phase == "Active"


def test_no_more_than_queue_limit_requests_are_held_at_once(serve_asgi, tracer_provider, span_exporter, clients) -> None:
    client, router = gate_with(serve_asgi, tracer_provider, clients, wake_s=2.0, hold_s=30.0, queue_limit=1)
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(ask(client)))
    first.start()
    wait_for(lambda: bool(router._held.get("m")), "the first request to be held")
    second = ask(client)
    first.join()

    held = [s for s in gate_spans(span_exporter) if S.ATTR_GATE_HOLD_S in s.attributes]
    assert len(held) == 1 and answers[0].status_code == 200
    assert second.status_code == 503 and "x-restorelens-retry-after-ms" in second.headers


def test_a_server_shutting_down_answers_its_held_requests_at_once(serve_asgi, tracer_provider, span_exporter,
                                                                   clients) -> None:  # noqa: ANN001
    sim = serve_asgi(create_app("tiny-cpu", model_name="m"))
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB)],
                          PoolPolicy(sleep_after_s=3600), hints=RetryHints(AnswerTable(), "calibrated", 30.0))
    backend = InProcessBackend(lambda model, pod: FixedLatencyEngine(cold_start_s=3600.0), url_template=sim.url)
    router = ModelClaimRouter(core, backend, health_interval_s=3600)
    # Not the serve_asgi fixture: this server is stopped inside the test.
    gate = ServerThread(create_gate_app(GateSettings(modelclaim={}), router=router, tracer_provider=tracer_provider))
    gate.start()
    answers: list[httpx.Response] = []
    client = httpx.Client(base_url=gate.url, timeout=60.0)
    clients.append(client)
    held = threading.Thread(target=lambda: answers.append(ask(client)))
    held.start()
    wait_for(lambda: bool(router._held.get("m")), "the request to be held (a 1-hour start, a 30-s hold)")
    gate.stop()
    held.join()
    # Answered by the gate with its hint, not cancelled by the graceful timeout (which answers 500).
    # Nothing is known of the start: come back at once, to be held again while it runs.
    assert answers[0].status_code == 503 and answers[0].headers["x-restorelens-retry-after-ms"] == "250"
    (span,) = gate_spans(span_exporter)
    assert span.attributes[S.ATTR_GATE_DECISION] == "not_ready" and span.attributes[S.ATTR_GATE_HOLD_S] < 30.0
