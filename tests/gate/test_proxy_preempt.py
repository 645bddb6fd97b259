"""lend-preempt (and lend) behind the real proxy: a loan taken back mid-stream or before its answer started.

The engine is test_proxy's STAND-IN (it can hold a stream open midway, or answer late), since the
point is what the gate does to a request still running when interactive demand returns. The
simulator-backed runs of the same policy are in tests/experiments (virtual and live).
"""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from restorelens import spans as S
from restorelens.gate import GateSettings
from restorelens.gate.app import create_gate_app
from restorelens.gate.grants import Grant
from restorelens.gate.policies.interface import RequestSize
from restorelens.gate.forwarding import token_events
from restorelens.gate.policies.interface import request_size_of
from restorelens.protocol import PREEMPTED, parse_preempted_event

from .test_proxy import TOKEN, engine, gate_state, start_gate, wait_until  # noqa: F401  (engine: a fixture)

#: A budget no running request fits: every loan is preempted when demand returns.
TINY_BUDGET_S = 0.001
LEND_PREEMPT = {"policy": "lend-preempt", "floors": {"interactive": 2, "batch": 0}, "lendable_slots": 1,
                "restore_budget_s": TINY_BUDGET_S}
PROMPT = "x" * 400  # 100 tokens as the gate estimates them (4 characters a token)


def _interactive(gate) -> httpx.Response:
    return httpx.post(gate.url + "/v1/completions", json={"model": "tiny", "prompt": "q", "max_tokens": 1},
                      headers={"x-traffic-class": "interactive", "x-request-id": "i1"}, timeout=30)


def test_a_loan_caught_mid_stream_ends_with_the_preemption_event(serve_asgi, engine, tracer_provider,
                                                                 span_exporter) -> None:
    gate = start_gate(serve_asgi, engine.url, tracer_provider, **LEND_PREEMPT)
    loan = {"model": "tiny", "prompt": PROMPT, "max_tokens": 500, "tokens": 2, "stream": True, "hold": True}
    lines: list[str] = []
    with httpx.Client(timeout=30) as client, client.stream(
            "POST", gate.url + "/v1/completions", json=loan,
            headers={"x-traffic-class": "batch", "x-request-id": "b1"}) as response:
        assert response.status_code == 200
        reader = response.iter_lines()
        while len([line for line in lines if line.startswith("data:")]) < 2:
            lines.append(next(reader))
        assert gate_state(gate, TOKEN)["in_flight_borrowed"] == 1
        assert _interactive(gate).status_code == 200  # demand returns: the floor is back, the loan is taken
        lines += list(reader)  # the stream ends after the preemption event, though the engine still holds b1
    events = [line for line in lines if line.startswith("data:")]
    assert len(events) == 3 and "[DONE]" not in events[-1]
    hint = dict(parse_preempted_event(events[-1]) or ())
    assert json.loads(events[-1][len("data: "):])["error"]["type"] == PREEMPTED
    assert int(hint["x-restorelens-retry-after-ms"]) >= 1 and int(hint["retry-after"]) >= 1

    state = gate_state(gate, TOKEN)
    assert state["in_flight_borrowed"] == 0 and state["in_flight_own"]["batch"] == 0
    wait_until(lambda: any(s.name == S.SPAN_GATE_REQUEST and s.attributes[S.ATTR_REQUEST_ID] == "b1"
                           for s in span_exporter.get_finished_spans()))
    spans = span_exporter.get_finished_spans()
    loan_span = next(s for s in spans if s.name == S.SPAN_GATE_REQUEST and s.attributes[S.ATTR_REQUEST_ID] == "b1")
    preempted = [e for e in loan_span.events if e.name == S.EVENT_LOAN_PREEMPTED]
    assert len(preempted) == 1
    # The prompt (all of it: the first token came) and the two streamed tokens are lost.
    assert preempted[0].attributes[S.ATTR_GATE_PREEMPT_LOST_TOKENS] == 100 + 2
    assert preempted[0].attributes[S.ATTR_GATE_PREEMPT_REMAINING_S] > TINY_BUDGET_S
    assert loan_span.attributes[S.ATTR_HTTP_STATUS_CODE] == 503
    restore = next(s for s in spans if s.name == S.SPAN_GATE_RESTORE)
    assert restore.attributes[S.ATTR_GATE_RESTORE_BUDGET_S] == TINY_BUDGET_S
    # The gate closed its upstream stream: the engine's request ended (its span did) without [DONE].
    wait_until(lambda: any(s.name == S.SPAN_LLM_REQUEST and s.attributes.get(S.ATTR_GEN_AI_REQUEST_ID) == "b1"
                           for s in span_exporter.get_finished_spans()))


def test_a_loan_taken_back_before_its_answer_started_is_a_503_with_retry_after(serve_asgi, engine) -> None:
    gate = start_gate(serve_asgi, engine.url, **LEND_PREEMPT)
    answers: list[httpx.Response] = []
    # "slow": the stand-in answers after 0.6 s, so the loan is still waiting for its headers.
    loan = threading.Thread(target=lambda: answers.append(httpx.post(
        gate.url + "/v1/completions", json={"model": "slow", "prompt": PROMPT, "max_tokens": 50},
        headers={"x-traffic-class": "batch", "x-request-id": "b2"}, timeout=30)))
    loan.start()
    wait_until(lambda: gate_state(gate, TOKEN)["in_flight_borrowed"] == 1)
    assert _interactive(gate).status_code == 200
    loan.join(timeout=30)
    (answer,) = answers
    assert answer.status_code == 503
    assert answer.json()["error"]["type"] == PREEMPTED
    assert int(answer.headers["retry-after"]) >= 1 and int(answer.headers["x-restorelens-retry-after-ms"]) >= 1
    assert gate_state(gate, TOKEN)["in_flight_borrowed"] == 0


def test_a_loan_within_the_budget_is_not_taken_back(serve_asgi, engine) -> None:
    gate = start_gate(serve_asgi, engine.url, **{**LEND_PREEMPT, "restore_budget_s": 600.0})
    loan = {"model": "tiny", "prompt": PROMPT, "max_tokens": 3, "tokens": 2, "stream": True, "hold": True}
    with httpx.Client(timeout=30) as client, client.stream(
            "POST", gate.url + "/v1/completions", json=loan,
            headers={"x-traffic-class": "batch", "x-request-id": "b3"}) as response:
        reader = response.iter_lines()
        seen = 0
        while seen < 2:
            seen += next(reader).startswith("data:")
        assert _interactive(gate).status_code == 200
        assert gate_state(gate, TOKEN)["in_flight_borrowed"] == 1  # still running: it fits the budget
        httpx.post(engine.url + "/release/b3")
        rest = [line for line in reader if line.startswith("data:")]
    assert rest[-1] == "data: [DONE]" and all(parse_preempted_event(line) is None for line in rest)


@pytest.mark.parametrize(("payload", "prompt_tokens", "max_tokens"), [
    ({"prompt": "x" * 401, "max_tokens": 64}, 101, 64),
    ({"prompt": ["x" * 40, "y" * 40, 7], "max_tokens": 8}, 20, 8),
    ({"messages": [{"role": "user", "content": "x" * 80}, {"content": [{"type": "text", "text": "y" * 40}]}],
      "max_completion_tokens": 16}, 30, 16),
    ({"prompt": "x" * 8, "max_tokens": True}, 2, 0),  # a boolean is no token count
    ({"messages": "not a list"}, 0, 0),
    ({"prompt": list(range(300)), "max_tokens": 10}, 300, 10),  # token ids count one each
    ({"prompt": "x" * 40, "max_tokens": 1, "max_completion_tokens": 400}, 10, 400),  # vLLM reads this one first
    ({"prompt": "x" * 40, "max_tokens": 8, "n": 2, "best_of": 4}, 40, 32),  # four sequences decode
])
def test_the_size_the_lenders_see_comes_from_the_prompt_characters_and_max_tokens(payload, prompt_tokens,
                                                                                   max_tokens) -> None:
    assert request_size_of(payload) == RequestSize(prompt_tokens, max_tokens)


@pytest.mark.parametrize(("chunk", "tokens"), [
    (b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n', 1),
    (b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":"b"}]}\n\n', 2),
    (b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n', 0),  # chat's first event
    (b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n', 0),  # chat's last event
    (b'data: {"choices":[],"usage":{"completion_tokens":3}}\n\ndata: [DONE]\n\n', 0),
    (b"", 0),
])
def test_streamed_tokens_are_the_events_that_carry_one(chunk: bytes, tokens: int) -> None:
    assert token_events(chunk) == tokens


def test_a_loan_granted_taken_back_and_left_before_its_task_resumed_leaves_no_pending_preemption(
        tracer_provider) -> None:
    """White-box: a queued loan is granted by a release, taken back by returning demand in the same
    loop iteration (its task has not resumed: the preemption waits in ``_pending_preemptions``),
    and its client leaves before the task resumes. Nothing of it may stay behind in the endpoint."""

    async def scenario() -> None:
        settings = GateSettings(upstreams={"*": "http://127.0.0.1:9"}, admin_token=TOKEN, **LEND_PREEMPT)
        proxy = create_gate_app(settings, tracer_provider=tracer_provider).proxy
        admission = proxy.admission
        first_loan = admission.request("b0", "batch", proxy.clock.now_s(), size=RequestSize(100, 50))
        assert isinstance(first_loan, Grant) and first_loan.slot == "borrowed"

        gone = asyncio.Event()
        body = json.dumps({"model": "tiny", "prompt": PROMPT, "max_tokens": 50}).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict:
            if messages:
                return messages.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        sent: list[dict] = []

        async def send(message: dict) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/v1/completions",
                 "headers": [(b"x-traffic-class", b"batch"), (b"x-request-id", b"b1")]}
        task = asyncio.create_task(proxy(scope, receive, send))
        while admission.queued == 0:  # b1 waits for the one loan there is
            await asyncio.sleep(0)
        # One loop iteration: b0 ends (b1 gets the loan), demand returns (the loan is taken back
        # before b1's task resumed), b1's client leaves.
        now_s = proxy.clock.now_s()
        admission.release(first_loan, now_s)
        interactive = admission.request("i1", "interactive", now_s)
        assert isinstance(interactive, Grant)
        assert len(proxy._pending_preemptions) == 1  # the sequence under test happened
        gone.set()
        await task

        assert proxy._pending_preemptions == {} and proxy._watches == {}
        assert sent == []  # the client had left: nothing was answered
        assert admission.in_flight == 1  # only the interactive request: b1's grant was given back
        admission.release(interactive, proxy.clock.now_s())

    asyncio.run(scenario())


def test_a_control_period_too_short_to_tick_is_refused_at_run_time_and_a_returning_request_is_served(
        serve_asgi, engine) -> None:
    """``PUT /admin/policy`` took ``control_period_s`` 1e-320; then an interactive request arriving
    while capacity was lent got a 500 (OverflowError computing the controller's next tick)."""
    gate = start_gate(serve_asgi, engine.url, policy="lend", floors={"interactive": 2, "batch": 0}, lendable_slots=1)
    answers: list[httpx.Response] = []
    loan = threading.Thread(target=lambda: answers.append(httpx.post(
        gate.url + "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1, "hold": True},
        headers={"x-traffic-class": "batch", "x-request-id": "b4"}, timeout=30)))
    loan.start()
    try:
        wait_until(lambda: gate_state(gate, TOKEN)["in_flight_borrowed"] == 1)
        change = httpx.put(gate.url + "/admin/policy", json={"control_period_s": 1e-320},
                           headers={"authorization": f"Bearer {TOKEN}"})
        returning = _interactive(gate)
    finally:
        httpx.post(engine.url + "/release/b4")
        loan.join(timeout=30)
    assert (change.status_code, returning.status_code) == (400, 200)
    error = change.json()["error"]
    assert error["param"] == "control_period_s" and ">= 0.001" in error["message"]
    assert "\n" not in error["message"]
    assert [answer.status_code for answer in answers] == [200]
