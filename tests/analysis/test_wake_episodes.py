"""Wake episodes from hand-built client -> gate -> lifecycle -> engine traces, every metric exact."""

from __future__ import annotations

import polars as pl
from builders import Traces

from restorelens import spans as sc
from restorelens.analysis import Analysis


def not_ready(traces: Traces, trace: str, client: str, start: float, end: float, *, retry_after_s: float | None = 10.0,
              header: str | None = "10") -> str:
    """One attempt answered 503 by the gate for a sleeping model; returns the gate.request span id."""
    attempt = traces.attempt(trace, client, start, end, status=503, retry_after_header=header,
                             retry_after_s=retry_after_s, resend_count=None)
    return traces.gate_request(trace, attempt, start + 0.03125, end - 0.03125, status=503, decision="not_ready",
                               retry_after_s=retry_after_s, phase="Sleeping", reason="EngineSleeping")


def one(frame: pl.DataFrame) -> dict:
    assert frame.height == 1, frame
    return frame.row(0, named=True)


def test_an_honoured_retry_after_overshoots_readiness() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 12.0, first_chunk_s=10.8125, retry_policy="honour-retry-after")
    first = not_ready(traces, trace, client, 0.0, 0.125)
    retry = traces.attempt(trace, client, 10.125, 12.0, status=200, resend_count=1)
    traces.served_via_gate(trace, retry, 10.15625, 11.9, upstream_s=10.1875, engine_arrival_s=10.25,
                           time_in_queue_s=0.125, ttft_s=0.5, e2e_s=1.5, policy="fcfs")
    traces.model_wake(0.0625, 4.5625, link=(trace, first), wake_path="in-place", wake_called_s=0.0625,
                      ready_s=4.0625, observed_s=4.5625)

    episode = one(Analysis(traces.store()).wake_episodes())

    assert episode["first_status"] == 503
    assert episode["retry_after_s"] == 10.0
    assert episode["ready_s"] == 4.0625
    assert episode["observed_s"] == 4.5625
    assert episode["hint_error_s"] == 5.9375
    assert episode["overshoot_s"] == 6.0625
    assert episode["attempts"] == 2
    # engine scheduled at 10.25 + 0.125 = 10.375; the successful attempt started at 10.125
    assert episode["engine_schedule_s"] == 0.25
    # first token at 10.25 + 0.5
    assert episode["total_s"] == 10.75
    assert episode["wake_path"] == "in-place"
    assert episode["retry_policy"] == "honour-retry-after"
    assert (episode["served"], episode["censored"], episode["clock_skew"]) == (True, False, False)


def test_a_wake_that_never_becomes_ready_is_censored() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 21.0, outcome="gave_up", attempts=3)
    first = not_ready(traces, trace, client, 0.0, 0.25)
    not_ready(traces, trace, client, 10.25, 10.5)
    not_ready(traces, trace, client, 20.5, 20.75)
    traces.model_wake(0.125, 30.0, link=(trace, first), wake_path="make-room", wake_called_s=0.125)

    episode = one(Analysis(traces.store()).wake_episodes())

    assert episode["censored"] is True
    assert episode["censored_reason"] == "never_ready"
    assert episode["attempts"] == 3
    assert episode["retry_after_s"] == 10.0
    assert episode["ready_s"] is None and episode["overshoot_s"] is None and episode["total_s"] is None
    assert episode["hint_error_s"] is None
    assert episode["outcome"] == "gave_up"


def test_retries_that_give_up_after_readiness_are_censored_with_ready_known() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 3.0, outcome="gave_up", attempts=2, retry_policy="fixed")
    first = not_ready(traces, trace, client, 0.0, 0.5, retry_after_s=20.0, header="20")
    not_ready(traces, trace, client, 2.0, 2.5, retry_after_s=20.0, header="20")
    traces.model_wake(0.25, 5.5, link=(trace, first), wake_path="move", ready_s=5.0, observed_s=5.5)

    episode = one(Analysis(traces.store()).wake_episodes())

    assert episode["censored_reason"] == "not_served"
    assert episode["ready_s"] == 5.0
    assert episode["hint_error_s"] == 15.0
    assert episode["attempts"] == 2
    assert episode["overshoot_s"] is None and episode["engine_schedule_s"] is None


def test_retry_after_as_an_http_date_counts_from_the_response() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 11.0, first_chunk_s=10.75)
    # the builder's epoch is 2026-01-01T00:00:00Z; the 503 arrives at +0.5 s and names +10 s
    attempt = traces.attempt(trace, client, 0.0, 0.5, status=503, retry_after_header="Thu, 01 Jan 2026 00:00:10 GMT")
    gate = traces.gate_request(trace, attempt, 0.125, 0.375, status=503, decision="not_ready")
    retry = traces.attempt(trace, client, 10.0, 11.0, status=200, resend_count=1)
    traces.served_via_gate(trace, retry, 10.0625, 10.9, upstream_s=10.125, engine_arrival_s=10.25,
                           time_in_queue_s=0.25, ttft_s=0.5, e2e_s=0.625)
    traces.model_wake(0.25, 3.0, link=(trace, gate), ready_s=3.0, observed_s=3.0)

    analysis = Analysis(traces.store())
    episode = one(analysis.wake_episodes())
    attempts = analysis.attempts()

    assert episode["retry_after_s"] == 9.5
    assert episode["hint_error_s"] == 6.5
    assert attempts["retry_after_raw"].to_list() == ["Thu, 01 Jan 2026 00:00:10 GMT", None]
    assert attempts["retry_after_s"].to_list() == [9.5, None]
    assert attempts["wait_before_next_s"].to_list() == [9.5, None]
    assert attempts["resend_count"].to_list() == [None, 1]


def test_a_client_clock_behind_the_lifecycle_gives_a_negative_overshoot_that_is_flagged() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 4.0, first_chunk_s=3.0)
    first = not_ready(traces, trace, client, 0.0, 0.125)
    # the client's clock is 3 s behind the gate's: it stamps its retry at 2.0, the gate sees it at 5.0
    retry = traces.attempt(trace, client, 2.0, 4.0, status=200, resend_count=1)
    traces.served_via_gate(trace, retry, 5.0, 6.5, upstream_s=5.0625, engine_arrival_s=5.125,
                           time_in_queue_s=0.125, ttft_s=0.25, e2e_s=1.0)
    traces.model_wake(0.0625, 4.5625, link=(trace, first), ready_s=4.0625, observed_s=4.5625)

    episode = one(Analysis(traces.store()).wake_episodes())

    assert episode["overshoot_s"] == -2.0625
    assert episode["clock_skew"] is True
    assert episode["negative_gaps"] == ["overshoot_s"]
    assert episode["censored"] is False


def test_a_calibrated_hint_is_read_to_the_millisecond_with_its_source_and_prediction() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 6.0, first_chunk_s=4.875, retry_policy="honour-hint-ms")
    attempt = traces.attempt(trace, client, 0.0, 0.125, status=503, retry_after_header="5", retry_after_s=4.25,
                             resend_count=None)
    first = traces.gate_request(trace, attempt, 0.03125, 0.09375, status=503, decision="not_ready", retry_after_s=5.0,
                                phase="Activating", reason="EngineSleeping", extra={
                                    sc.ATTR_MODELCLAIM_HINT_MODE: "calibrated",
                                    sc.ATTR_MODELCLAIM_HINT_SOURCE: "calibrated",
                                    sc.ATTR_GATE_RETRY_AFTER_MS: 4219,
                                    sc.ATTR_MODELCLAIM_PREDICTED_READY_IN_S: 4.125,
                                })
    retry = traces.attempt(trace, client, 4.28125, 6.0, status=200, resend_count=1)
    traces.served_via_gate(trace, retry, 4.3125, 5.9, upstream_s=4.34375, engine_arrival_s=4.375,
                           time_in_queue_s=0.0, ttft_s=0.5, e2e_s=1.5, policy="fcfs")
    traces.model_wake(0.03125, 4.1875, link=(trace, first), wake_path="in-place", wake_called_s=0.03125,
                      ready_s=4.1875, observed_s=4.1875)

    episode = one(Analysis(traces.store()).wake_episodes())

    assert (episode["hint_mode"], episode["hint_source"]) == ("calibrated", "calibrated")
    assert episode["retry_after_s"] == 4.25  # the client's parse; the header said 5
    assert episode["hint_s"] == 4.219
    assert episode["hint_error_s"] == 4.219 - 4.1875
    assert episode["predicted_ready_s"] == 0.03125 + 4.125  # the gate answered 0.03125 s after t0
    assert episode["overshoot_s"] == 4.28125 - 4.1875
    assert (episode["attempts"], episode["hold_s"]) == (2, None)


def held_request(extra: dict, hold_released_s: float | None) -> dict:
    """One request the gate saw 0.5 s after the client sent it (a slow upload) and held 4.1875 s
    while the model woke (engine ready 4.65625, observed 4.6875), then served; its wake episode."""
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 6.0, first_chunk_s=4.875, retry_policy="honour-hint-ms")
    attempt = traces.attempt(trace, client, 0.0, 6.0, status=200, resend_count=None)
    gate = traces.served_via_gate(trace, attempt, 0.5, 5.9, upstream_s=4.75, engine_arrival_s=4.78125,
                                  time_in_queue_s=0.0625, ttft_s=0.5, e2e_s=1.5, policy="fcfs",
                                  extra={sc.ATTR_GATE_HOLD_S: 4.1875, **extra}, hold_released_s=hold_released_s)
    traces.model_wake(0.53125, 4.6875, link=(trace, gate), wake_path="in-place", wake_called_s=0.53125,
                      ready_s=4.65625, observed_s=4.6875)
    return one(Analysis(traces.store()).wake_episodes())


def test_a_held_request_overshoots_from_the_moment_the_gate_let_it_through() -> None:
    """From its `hold.released`, not from the client's start plus the hold (which would be 0.5 s
    early, before readiness was even observed)."""
    episode = held_request({sc.ATTR_MODELCLAIM_HINT_MODE: "hold", sc.ATTR_MODELCLAIM_HINT_SOURCE: "calibrated"},
                           hold_released_s=4.71875)

    assert (episode["hint_mode"], episode["hold_s"], episode["attempts"], episode["first_status"]) == (
        "hold", 4.1875, 1, 200)
    assert episode["overshoot_s"] == 4.71875 - 4.65625
    # engine scheduled at 4.78125 + 0.0625, from the moment the gate let it through
    assert episode["engine_schedule_s"] == 4.84375 - 4.71875
    assert episode["total_s"] == 4.78125 + 0.5
    assert (episode["censored"], episode["clock_skew"], episode["negative_gaps"]) == (False, False, [])


def test_without_its_release_event_a_held_request_counts_from_the_gate_s_start_plus_the_hold() -> None:
    assert held_request({}, hold_released_s=None)["overshoot_s"] == 0.5 + 4.1875 - 4.65625
