"""Requests and attempts: client, gate and engine spans of one trace joined into one row."""

from __future__ import annotations

from builders import VLLM_SERVICE, Traces

from restorelens import spans as sc
from restorelens.analysis import Analysis


def test_a_request_straight_to_real_vllm_is_joined_by_name_not_service() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 2.0, first_chunk_s=0.75, request_id="r-direct")
    attempt = traces.attempt(trace, client, 0.0, 2.0, status=200)
    # no gate: vLLM's llm_request is the attempt's child, under vLLM's default service name
    traces.engine(trace, attempt, 0.0625, time_in_queue_s=0.25, ttft_s=0.5, e2e_s=1.5)

    analysis = Analysis(traces.store())
    request = analysis.requests().row(0, named=True)
    attempt_row = analysis.attempts().row(0, named=True)

    assert request["reached_engine"] is True
    assert request["engine_service_name"] == VLLM_SERVICE
    assert request["policy"] is None and request["decision"] is None
    assert (request["e2e_s"], request["ttft_s"]) == (2.0, 0.75)
    # scheduled at 0.0625 + 0.25
    assert request["engine_schedule_s"] == 0.3125
    assert (request["engine_time_in_queue_s"], request["engine_ttft_s"], request["engine_e2e_s"]) == (0.25, 0.5, 1.5)
    assert (request["prompt_tokens"], request["completion_tokens"]) == (16, 32)
    assert attempt_row["engine_schedule_s"] == 0.3125
    assert attempt_row["clock_skew"] is False


def test_an_llm_request_without_vllm_attributes_is_not_an_engine_span() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 1.0)
    attempt = traces.attempt(trace, client, 0.0, 1.0, status=200)
    traces.span(trace, sc.SPAN_LLM_REQUEST, 0.125, 0.5, parent=attempt, kind="Server", attributes={"foo": "bar"})

    assert Analysis(traces.store()).requests()["reached_engine"].to_list() == [False]


def test_attempts_are_ordered_with_waits_and_the_last_one_decides() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 7.0, outcome="rejected", attempts=3, retry_policy="backoff")
    for index, (start, end) in enumerate(((0.0, 0.25), (1.25, 1.5), (5.5, 7.0))):
        attempt = traces.attempt(trace, client, start, end, status=429, resend_count=index or None,
                                 retry_after_s=1.0)
        traces.gate_request(trace, attempt, start + 0.0625, end - 0.0625, status=429, decision="rejected",
                            policy="static", wait_s=0.125)

    analysis = Analysis(traces.store())
    attempts = analysis.attempts()
    request = analysis.requests().row(0, named=True)

    assert attempts["attempt_index"].to_list() == [1, 2, 3]
    assert attempts["is_last"].to_list() == [False, False, True]
    assert attempts["wait_before_next_s"].to_list() == [1.0, 4.0, None]
    assert attempts["resend_count"].to_list() == [None, 1, 2]
    assert attempts["decision"].to_list() == ["rejected"] * 3
    assert attempts["reached_engine"].to_list() == [False] * 3
    assert request["attempts"] == 3 and request["attempts_reported"] == 3
    assert (request["final_status_code"], request["decision"], request["policy"]) == (429, "rejected", "static")
    assert request["ttft_s"] is None
    assert request["gate_wait_s"] == 0.125


def test_a_gate_clock_behind_the_client_is_flagged_on_the_attempt_and_request() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 10.0, 12.0, first_chunk_s=11.0)
    attempt = traces.attempt(trace, client, 10.0, 12.0, status=200)
    traces.served_via_gate(trace, attempt, 9.5, 11.5, upstream_s=9.625, engine_arrival_s=9.75,
                           time_in_queue_s=0.125, ttft_s=0.25, e2e_s=1.0)

    analysis = Analysis(traces.store())
    attempt_row = analysis.attempts().row(0, named=True)

    assert attempt_row["negative_gaps"] == ["gate_before_attempt"]
    assert attempt_row["clock_skew"] is True
    # engine scheduled at 9.875: before the attempt started, kept as it is
    assert attempt_row["engine_schedule_s"] == -0.125
    assert analysis.requests()["clock_skew"].to_list() == [True]
