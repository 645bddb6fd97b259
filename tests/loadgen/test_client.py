from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from restorelens.clock import VirtualClock, to_ns
from restorelens.loadgen.client import TracedClient
from restorelens.loadgen.request import ClientRequest, RunLabels
from restorelens.loadgen.retry import FixedInterval, HonourRetryAfter, make_policy
from restorelens.spans import (
    ATTR_ARRIVAL_PHASE,
    ATTR_ATTEMPTS,
    ATTR_HTTP_RESEND_COUNT,
    ATTR_HTTP_RETRY_AFTER,
    ATTR_HTTP_STATUS_CODE,
    ATTR_OUTCOME,
    ATTR_REQUEST_ID,
    ATTR_RETRY_AFTER_INVALID,
    ATTR_RETRY_AFTER_S,
    ATTR_RETRY_POLICY,
    ATTR_RETRY_WAIT_S,
    ATTR_RUN_ID,
    ATTR_SCENARIO,
    ATTR_SEED,
    ATTR_TRAFFIC_CLASS,
    EVENT_RESPONSE_FIRST_CHUNK,
    EVENT_RETRY_WAIT,
    SPAN_CLIENT_REQUEST,
    SPAN_HTTP_POST,
)

from .conftest import SleepAdvancesClock

PROMPT = "filler " * 10


def _request(stream: bool = False) -> ClientRequest:
    return ClientRequest(
        "req-1", "tiny", PROMPT, 4, traffic_class="interactive", stream=stream, arrival_phase="return",
        labels=RunLabels(scenario="unit", workload="balanced", seed=3, run_id="run-1"),
    )


def _run(base_url: str, provider: TracerProvider, clock: VirtualClock, policy=None, stream: bool = False):
    sleep = SleepAdvancesClock(clock)

    async def go():
        async with TracedClient(base_url, policy=policy or HonourRetryAfter(), tracer_provider=provider, clock=clock, sleep=sleep) as client:
            return await client.request(_request(stream))

    return asyncio.run(go()), sleep


def _split(spans: tuple[ReadableSpan, ...]) -> tuple[ReadableSpan, list[ReadableSpan]]:
    (logical,) = [s for s in spans if s.name == SPAN_CLIENT_REQUEST]
    attempts = sorted((s for s in spans if s.name == SPAN_HTTP_POST), key=lambda s: s.start_time)
    return logical, attempts


def test_503_retry_after_10_at_t0_next_attempt_at_t10(scripted_gateway, tracer_provider, span_exporter: InMemorySpanExporter) -> None:
    script, url = scripted_gateway((503, {"Retry-After": "10"}), (200, {}))
    clock = VirtualClock(1000.0)
    result, sleep = _run(url, tracer_provider, clock)

    assert result.outcome == "ok" and result.statuses == (503, 200)
    assert [a.start_s for a in result.attempts] == [1000.0, 1010.0]
    assert sleep.waits_s == [10.0]
    logical, attempts = _split(span_exporter.get_finished_spans())
    (wait,) = [e for e in logical.events if e.name == EVENT_RETRY_WAIT]
    assert wait.timestamp == to_ns(1000.0)
    assert dict(wait.attributes) == {ATTR_RETRY_WAIT_S: 10.0, ATTR_RETRY_AFTER_S: 10.0, ATTR_HTTP_STATUS_CODE: 503}
    assert logical.start_time == to_ns(1000.0) and logical.end_time == to_ns(1010.0)
    # both attempts went out with the same logical id and class
    assert [s["headers"]["x-request-id"] for s in script.seen] == ["req-1", "req-1"]
    assert {s["headers"]["x-traffic-class"] for s in script.seen} == {"interactive"}


def test_attempts_are_child_client_spans_with_resend_counts_and_retry_after(scripted_gateway, tracer_provider, span_exporter) -> None:
    script, url = scripted_gateway((503, {"Retry-After": "10"}), (503, {"Retry-After": "20"}), (200, {}))
    result, _ = _run(url, tracer_provider, VirtualClock(0.0))
    logical, attempts = _split(span_exporter.get_finished_spans())

    assert result.attempts[-1].number == 3
    assert [s.kind for s in attempts] == [SpanKind.CLIENT] * 3
    assert all(s.parent.span_id == logical.context.span_id for s in attempts)
    assert all(s.context.trace_id == logical.context.trace_id for s in attempts)
    assert [s.attributes.get(ATTR_HTTP_RESEND_COUNT) for s in attempts] == [None, 1, 2]
    assert [s.attributes.get(ATTR_HTTP_STATUS_CODE) for s in attempts] == [503, 503, 200]
    assert [s.attributes.get(ATTR_HTTP_RETRY_AFTER) for s in attempts] == [("10",), ("20",), None]
    assert [s.attributes.get(ATTR_RETRY_AFTER_S) for s in attempts] == [10.0, 20.0, None]
    assert [s.status.status_code for s in attempts][:2] == [StatusCode.ERROR, StatusCode.ERROR]
    # W3C trace context reached the server on every attempt, naming that attempt's span
    for seen, span in zip(script.seen, attempts, strict=True):
        assert seen["headers"]["traceparent"].split("-")[2] == format(span.context.span_id, "016x")

    attrs = logical.attributes
    assert logical.kind == SpanKind.INTERNAL
    assert attrs[ATTR_ATTEMPTS] == 3 and attrs[ATTR_OUTCOME] == "ok" and attrs[ATTR_RETRY_POLICY] == "honour-retry-after"
    assert attrs[ATTR_REQUEST_ID] == "req-1" and attrs[ATTR_TRAFFIC_CLASS] == "interactive"
    assert attrs[ATTR_SCENARIO] == "unit" and attrs[ATTR_SEED] == 3 and attrs[ATTR_RUN_ID] == "run-1"
    assert attrs[ATTR_ARRIVAL_PHASE] == "return"
    assert [e.attributes[ATTR_RETRY_WAIT_S] for e in logical.events if e.name == EVENT_RETRY_WAIT] == [10.0, 20.0]


def test_invalid_retry_after_is_recorded_and_falls_back(scripted_gateway, tracer_provider, span_exporter) -> None:
    _, url = scripted_gateway((503, {"Retry-After": "soon-ish"}), (200, {}))
    policy = HonourRetryAfter(fallback=FixedInterval(interval_s=3.0))
    result, sleep = _run(url, tracer_provider, VirtualClock(0.0), policy)
    assert result.outcome == "ok" and sleep.waits_s == [3.0]
    _, attempts = _split(span_exporter.get_finished_spans())
    assert attempts[0].attributes[ATTR_RETRY_AFTER_INVALID] == "soon-ish"
    assert ATTR_RETRY_AFTER_S not in attempts[0].attributes


def test_huge_retry_after_is_clamped_to_the_deadline_and_gives_up(scripted_gateway, tracer_provider, span_exporter) -> None:
    _, url = scripted_gateway((503, {"Retry-After": "99999999999999999999"}))
    result, sleep = _run(url, tracer_provider, VirtualClock(0.0), HonourRetryAfter(max_attempts=5, deadline_s=30.0))
    assert result.outcome == "gave_up" and sleep.waits_s == [30.0] and len(result.attempts) == 2
    logical, attempts = _split(span_exporter.get_finished_spans())
    assert attempts[0].attributes[ATTR_RETRY_AFTER_INVALID] == "99999999999999999999"
    assert logical.attributes[ATTR_OUTCOME] == "gave_up" and logical.status.status_code == StatusCode.ERROR


@pytest.mark.parametrize(("status", "outcome"), [(400, "rejected"), (500, "error")])
def test_final_statuses_are_not_retried(scripted_gateway, tracer_provider, status: int, outcome: str) -> None:
    _, url = scripted_gateway((status, {}))
    result, sleep = _run(url, tracer_provider, VirtualClock(0.0))
    assert result.outcome == outcome and len(result.attempts) == 1 and sleep.waits_s == []


def test_streaming_records_first_chunk(scripted_gateway, tracer_provider, span_exporter) -> None:
    script, url = scripted_gateway((200, {}))
    result, _ = _run(url, tracer_provider, VirtualClock(5.0), stream=True)
    assert result.outcome == "ok" and result.first_chunk_s == 5.0
    assert script.seen[0]["body"]["stream"] is True
    logical, _ = _split(span_exporter.get_finished_spans())
    assert [e.name for e in logical.events] == [EVENT_RESPONSE_FIRST_CHUNK]


def test_connection_failure_is_a_retryable_attempt(tracer_provider, span_exporter) -> None:
    from restorelens.serving import bind_socket

    sock = bind_socket()  # a port nobody accepts on: connection refused, every attempt
    port = sock.getsockname()[1]
    sock.close()
    result, sleep = _run(f"http://127.0.0.1:{port}", tracer_provider, VirtualClock(0.0), make_policy("fixed", max_attempts=3))
    assert result.outcome == "gave_up" and result.statuses == (None, None, None) and sleep.waits_s == [1.0, 1.0]
    _, attempts = _split(span_exporter.get_finished_spans())
    assert [s.attributes.get(ATTR_HTTP_RESEND_COUNT) for s in attempts] == [None, 1, 2]


def test_no_prompt_text_on_any_span(scripted_gateway, tracer_provider, span_exporter) -> None:
    _, url = scripted_gateway((503, {"Retry-After": "1"}), (200, {}))
    _run(url, tracer_provider, VirtualClock(0.0))
    for span in span_exporter.get_finished_spans():
        values = [str(v) for v in span.attributes.values()] + [str(v) for e in span.events for v in e.attributes.values()]
        assert not any("filler" in v for v in values)


def test_a_stream_the_gate_took_back_is_retried_without_spending_an_attempt(scripted_gateway, tracer_provider,
                                                                           span_exporter) -> None:
    # The study's client makes one attempt; a preemption is no refusal, so it still comes back.
    _, url = scripted_gateway((200, {"preempt-after-ms": "2500"}), (200, {}))
    result, sleep = _run(url, tracer_provider, VirtualClock(), policy=HonourRetryAfter(max_attempts=1), stream=True)
    assert result.outcome == "ok" and result.statuses == (200, 200)
    assert [a.error_type for a in result.attempts] == ["preempted", None]
    assert sleep.waits_s == [3.0]  # Retry-After: 2,500 ms in whole seconds, rounded up
    assert result.first_chunk_s is not None and result.first_chunk_s >= 3.0  # the retry's, not the lost one's
    logical, _ = _split(span_exporter.get_finished_spans())
    assert [e.attributes[ATTR_HTTP_STATUS_CODE] for e in logical.events if e.name == EVENT_RETRY_WAIT] == [503]


def test_a_second_preemption_is_also_retried_but_a_refusal_after_it_is_final(scripted_gateway, tracer_provider) -> None:
    _, url = scripted_gateway((200, {"preempt-after-ms": "1000"}), (200, {"preempt-after-ms": "1000"}), (429, {}))
    result, _ = _run(url, tracer_provider, VirtualClock(), policy=HonourRetryAfter(max_attempts=1), stream=True)
    assert result.statuses == (200, 200, 429) and result.outcome == "gave_up"


def test_a_503_that_says_preempted_is_retried_without_spending_an_attempt(scripted_gateway, tracer_provider) -> None:
    _, url = scripted_gateway((503, {"error-type": "preempted", "retry-after": "2"}), (200, {}))
    result, sleep = _run(url, tracer_provider, VirtualClock(), policy=HonourRetryAfter(max_attempts=1))
    assert result.outcome == "ok" and result.statuses == (503, 200)
    assert [a.error_type for a in result.attempts] == ["preempted", None] and sleep.waits_s == [2.0]
    # Any other 503 still spends the client's one attempt.
    _, url = scripted_gateway((503, {"retry-after": "2"}), (200, {}))
    result, _ = _run(url, tracer_provider, VirtualClock(), policy=HonourRetryAfter(max_attempts=1))
    assert result.outcome == "gave_up" and result.statuses == (503,)
