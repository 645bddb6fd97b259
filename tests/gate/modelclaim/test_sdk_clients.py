"""The real OpenAI Python SDK (its own retry code, ``max_retries`` at its default of 2) through a
real gate on loopback in front of a real simulator, on cold starts longer than the 120 s the SDK
follows; and who sent each request, as the gate records it.

The gate and its lifecycle run on a ``ScaledClock`` (a 150-s cold start takes 150 / SCALE real
seconds). The SDK waits with ``time.sleep`` in its ``_base_client`` module: that module's ``time``
is replaced by one on the same scale, so every decision (which header it reads, whether it retries,
how long it waits) is the SDK's own code, and only its waits run SCALE times faster.
"""

from __future__ import annotations

import hashlib
import json
import httpx
import openai
import pytest

from restorelens import spans as S
from restorelens.clock import ScaledClock
from restorelens.gate.app import create_gate_app
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.estimates import START, DeclaredDurations
from restorelens.gate.modelclaim.hints import RetryHints
from restorelens.gate.modelclaim.phases import AnswerTable
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.router import ModelClaimRouter
from restorelens.gate.settings import GateSettings
from restorelens.sim.app import create_app

GIB = 2**30
SCALE = 40.0
SECRET = "sk-test-0123456789abcdef-do-not-record"


def gate_with(serve_asgi, tracer_provider, *, cold_start_s: float, declared_start_s: float | None,  # noqa: ANN001, ANN202
              mode: str = "calibrated", per_gpu: int = 10 * GIB, hold_s: float | None = None):
    clock = ScaledClock(SCALE)
    sim = serve_asgi(create_app("tiny-cpu", model_name="m"))
    priors = () if declared_start_s is None else (DeclaredDurations({"m": {START: declared_start_s}}),)
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", per_gpu, 4 * GIB)],
                          PoolPolicy(sleep_after_s=3600), hints=RetryHints(AnswerTable(), mode, hold_s, priors=priors))
    backend = InProcessBackend(lambda model, pod: FixedLatencyEngine(cold_start_s=cold_start_s),
                               url_template=sim.url)
    router = ModelClaimRouter(core, backend, clock=clock, health_interval_s=3600, tracer_provider=tracer_provider)
    app = create_gate_app(GateSettings(modelclaim={}), router=router, tracer_provider=tracer_provider, clock=clock)
    return serve_asgi(app), clock


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=SECRET)  # max_retries: the SDK's default


def gate_requests(exporter) -> list:  # noqa: ANN001
    spans = [s for s in exporter.get_finished_spans() if s.name == S.SPAN_GATE_REQUEST]
    return sorted(spans, key=lambda s: s.start_time)


@pytest.mark.parametrize("cold_start_s", [45.0, 150.0])
def test_the_openai_sdk_is_served_through_a_cold_start_longer_than_it_follows(
        serve_asgi, tracer_provider, span_exporter, scaled_sdk, cold_start_s: float) -> None:
    gate, clock = gate_with(serve_asgi, tracer_provider, cold_start_s=cold_start_s, declared_start_s=cold_start_s)
    scaled_sdk(clock)

    completion = sdk(gate.url).completions.create(model="m", prompt="hi", max_tokens=2)

    assert completion.choices  # served, not failed while the model was coming
    attempts = gate_requests(span_exporter)
    assert attempts[-1].attributes[S.ATTR_GATE_DECISION] == "admitted"
    assert [a.attributes[S.ATTR_GATE_CLIENT_RETRY_COUNT] for a in attempts] == list(range(len(attempts)))
    first = attempts[0].attributes
    assert first[S.ATTR_GATE_DECISION] == "not_ready" and first[S.ATTR_GEN_AI_REQUEST_MODEL] == "m"
    if cold_start_s > 120:  # the first hint is the longest the SDK follows, then re-estimated
        assert first[S.ATTR_MODELCLAIM_HINT_CAPPED] is True and first[S.ATTR_GATE_RETRY_AFTER_MS] == 120_000
    assert len(attempts) == (2 if cold_start_s <= 120 else 3)
    # The SDK came back when the millisecond hint said (retry-after-ms), not at a whole second.
    for answered, retry in zip(attempts, attempts[1:]):
        back_s = (retry.start_time - answered.start_time) / 1e9
        assert back_s >= answered.attributes[S.ATTR_GATE_RETRY_AFTER_MS] / 1000 - 0.05


def test_with_hold_s_a_start_longer_than_the_sdk_follows_is_hinted_at_the_cap_then_held(
        serve_asgi, tracer_provider, span_exporter, scaled_sdk) -> None:
    gate, clock = gate_with(serve_asgi, tracer_provider, cold_start_s=150.0, declared_start_s=150.0, hold_s=30.0)
    scaled_sdk(clock)

    assert sdk(gate.url).completions.create(model="m", prompt="hi", max_tokens=2).choices

    first, second = [a.attributes for a in gate_requests(span_exporter)]
    # 150 s to go, past the 30-s hold: answered at once; back half the hold before the end would
    # be 135 s, past what the SDK follows, so the cap; the retry is held to the end.
    assert (first[S.ATTR_GATE_RETRY_AFTER_MS], first[S.ATTR_MODELCLAIM_HINT_CAPPED]) == (120_000, True)
    assert second[S.ATTR_GATE_DECISION] == "admitted" and 0 < second[S.ATTR_GATE_HOLD_S] <= 30.0


def test_with_nothing_known_a_budgeted_client_is_not_sent_back_before_its_retries_run_out(
        serve_asgi, tracer_provider, span_exporter, scaled_sdk) -> None:
    # No calibration, no declared start: the "elapsed" hint would send it back at 1.25, 2.5 s and
    # fail a 45-s start; the SDK says it counts its retries, so: the table's 10 s, then 120 s.
    gate, clock = gate_with(serve_asgi, tracer_provider, cold_start_s=45.0, declared_start_s=None)
    scaled_sdk(clock)

    assert sdk(gate.url).completions.create(model="m", prompt="hi", max_tokens=2).choices

    hints = [a.attributes.get(S.ATTR_GATE_RETRY_AFTER_MS) for a in gate_requests(span_exporter)]
    assert hints == [10_000, 120_000, None]


def test_the_sdk_does_not_retry_a_model_only_an_operator_can_bring_back(
        serve_asgi, tracer_provider, span_exporter, scaled_sdk) -> None:
    gate, clock = gate_with(serve_asgi, tracer_provider, cold_start_s=1.0, declared_start_s=None, per_gpu=0)
    scaled_sdk(clock)

    with pytest.raises(openai.InternalServerError) as raised:
        sdk(gate.url).completions.create(model="m", prompt="hi", max_tokens=2)

    assert raised.value.response.headers["x-should-retry"] == "false"
    assert "retry-after" not in raised.value.response.headers
    (attempt,) = gate_requests(span_exporter)  # one attempt: the SDK obeyed x-should-retry
    assert attempt.attributes[S.ATTR_MODELCLAIM_REASON] == "InvalidPerGPU"


def test_the_gate_records_who_sent_each_request_and_never_the_credential(
        serve_asgi, tracer_provider, span_exporter) -> None:
    gate, _ = gate_with(serve_asgi, tracer_provider, cold_start_s=3600.0, declared_start_s=None)
    body = {"model": "m", "prompt": "hi", "max_tokens": 2}
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with httpx.Client(base_url=gate.url, timeout=10.0) as client:
        client.post("/v1/completions", json=body, headers={"authorization": f"Bearer {SECRET}",
                                                            "x-stainless-retry-count": "1"})
        client.post("/v1/completions", json=body, headers={"api-key": SECRET, "idempotency-key": "k" * 200})
        client.post("/v1/completions", json=body, headers={"x-request-id": "req-7", "traceparent": traceparent,
                                                            "x-stainless-retry-count": "many"})

    bearer, api_key, peer = [s.attributes for s in gate_requests(span_exporter)]
    key = "key:" + hashlib.sha256(SECRET.encode()).hexdigest()[:16]
    assert bearer[S.ATTR_GATE_CLIENT_IDENTITY] == api_key[S.ATTR_GATE_CLIENT_IDENTITY] == key
    assert bearer[S.ATTR_GATE_CLIENT_RETRY_COUNT] == 1 and bearer[S.ATTR_GATE_CLIENT_TRACED] is False
    assert S.ATTR_GATE_CLIENT_REQUEST_KEY not in bearer
    assert api_key[S.ATTR_GATE_CLIENT_REQUEST_KEY] == "idempotency-key:" + "k" * 128
    assert peer[S.ATTR_GATE_CLIENT_IDENTITY] == "peer:127.0.0.1"
    assert peer[S.ATTR_GATE_CLIENT_REQUEST_KEY] == "x-request-id:req-7" and peer[S.ATTR_GATE_CLIENT_TRACED] is True
    assert S.ATTR_GATE_CLIENT_RETRY_COUNT not in peer  # "many" is no count
    exported = json.dumps([[dict(s.attributes), [dict(e.attributes or {}) for e in s.events]]
                           for s in span_exporter.get_finished_spans()])
    assert SECRET not in exported and SECRET[:12] not in exported
