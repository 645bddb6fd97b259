"""The client's spans, stamped with explicit times so live and virtual runs emit the same spans.

- ``RequestSpan``: one ``client.request`` INTERNAL span per logical request, with the
  ``retry.wait`` and ``response.first_chunk`` events (docs/spans.md).
- ``attempt_attributes``: what each ``POST`` CLIENT span carries beyond the httpx instrumentation's
  own attributes: ``http.request.resend_count`` on resends, the status, the raw
  ``Retry-After`` and its parsed seconds, or the raw value when it could not be used.
  The live client sets these from the instrumentation's hooks; ``emit_attempt_span`` builds the
  whole span for the virtual-time runner, which has no HTTP.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from restorelens.clock import to_ns
from restorelens.loadgen.request import ClientRequest, RequestResult
from restorelens.loadgen.retry import RetryDecision
from restorelens.loadgen.retry_after import RetryAfter
from restorelens.spans import (
    ATTR_ARRIVAL_PHASE,
    ATTR_ARRIVAL_PHASE_START_S,
    ATTR_ARRIVAL_PHASE_WINDOW_S,
    ATTR_ATTEMPTS,
    ATTR_ERROR_TYPE,
    ATTR_GEN_AI_REQUEST_MODEL,
    ATTR_HTTP_RESEND_COUNT,
    ATTR_HTTP_RETRY_AFTER,
    ATTR_HTTP_STATUS_CODE,
    ATTR_OUTCOME,
    ATTR_POLICY,
    ATTR_REQUEST_ID,
    ATTR_RETRY_AFTER_INVALID,
    ATTR_RETRY_AFTER_S,
    ATTR_RETRY_POLICY,
    ATTR_RETRY_WAIT_S,
    ATTR_RUN_ID,
    ATTR_SCENARIO,
    ATTR_SEED,
    ATTR_TRAFFIC_CLASS,
    ATTR_WORKLOAD,
    EVENT_RESPONSE_FIRST_CHUNK,
    EVENT_RETRY_WAIT,
    SPAN_CLIENT_REQUEST,
    SPAN_HTTP_POST,
)

__all__ = [
    "TRACER_NAME",
    "RequestSpan",
    "attempt_attributes",
    "emit_attempt_span",
    "end_attempt_span",
    "request_attributes",
    "resend_attributes",
    "start_attempt_span",
]

TRACER_NAME = "restorelens.loadgen"


def request_attributes(request: ClientRequest, policy_name: str) -> dict[str, Any]:
    labels = request.labels
    attributes: dict[str, Any] = {
        ATTR_TRAFFIC_CLASS: request.traffic_class,
        ATTR_GEN_AI_REQUEST_MODEL: request.model,
        ATTR_REQUEST_ID: request.request_id,
        ATTR_RETRY_POLICY: policy_name,
    }
    optional = {
        ATTR_SCENARIO: labels.scenario,
        ATTR_WORKLOAD: labels.workload,
        ATTR_SEED: labels.seed,
        ATTR_RUN_ID: labels.run_id,
        ATTR_POLICY: labels.policy,
        ATTR_ARRIVAL_PHASE: request.arrival_phase,
        ATTR_ARRIVAL_PHASE_START_S: request.arrival_phase_start_s,
        ATTR_ARRIVAL_PHASE_WINDOW_S: request.arrival_phase_window_s,
    }
    attributes.update({k: v for k, v in optional.items() if v not in (None, "")})
    return attributes


def resend_attributes(attempt: int) -> dict[str, Any]:
    """Semconv: ``http.request.resend_count`` only on resends (attempt 2 is resend 1)."""
    return {ATTR_HTTP_RESEND_COUNT: attempt - 1} if attempt > 1 else {}


def attempt_attributes(status: int | None, hint: RetryAfter, error_type: str | None = None) -> dict[str, Any]:
    """Response-side attributes of one attempt's ``POST`` span."""
    attributes: dict[str, Any] = {}
    if status is not None:
        attributes[ATTR_HTTP_STATUS_CODE] = status
    if hint.raw is not None:
        attributes[ATTR_HTTP_RETRY_AFTER] = [hint.raw]
    if hint.seconds is not None:
        attributes[ATTR_RETRY_AFTER_S] = hint.seconds
    if hint.invalid is not None and hint.raw is not None:
        attributes[ATTR_RETRY_AFTER_INVALID] = hint.raw
    if error_type is not None:
        attributes[ATTR_ERROR_TYPE] = error_type
    elif status is not None and status >= 400:
        attributes[ATTR_ERROR_TYPE] = str(status)
    return attributes


def start_attempt_span(tracer: Tracer, parent: Span, attempt: int, start_s: float) -> Span:
    """Open the ``POST`` CLIENT span of one attempt (virtual time: the instrumentation's stand-in)."""
    return tracer.start_span(
        SPAN_HTTP_POST,
        context=trace.set_span_in_context(parent),
        kind=SpanKind.CLIENT,
        start_time=to_ns(start_s),
        attributes=resend_attributes(attempt),
    )


def end_attempt_span(span: Span, end_s: float, status: int | None, hint: RetryAfter, error_type: str | None = None) -> None:
    """Close an attempt span when the answer's headers arrived (as the instrumentation does)."""
    span.set_attributes(attempt_attributes(status, hint, error_type))
    if error_type is not None or (status is not None and status >= 400):
        span.set_status(Status(StatusCode.ERROR))
    span.end(end_time=to_ns(end_s))


def emit_attempt_span(
    tracer: Tracer,
    parent: Span,
    attempt: int,
    start_s: float,
    end_s: float,
    status: int | None,
    hint: RetryAfter,
    error_type: str | None = None,
) -> Span:
    """A finished ``POST`` CLIENT span for one attempt, as the instrumented client would make it."""
    span = start_attempt_span(tracer, parent, attempt, start_s)
    end_attempt_span(span, end_s, status, hint, error_type)
    return span


class RequestSpan:
    """The ``client.request`` span of one logical request, driven with explicit times."""

    def __init__(self, tracer: Tracer, request: ClientRequest, policy_name: str, start_s: float) -> None:
        self.span = tracer.start_span(
            SPAN_CLIENT_REQUEST,
            kind=SpanKind.INTERNAL,
            start_time=to_ns(start_s),
            attributes=request_attributes(request, policy_name),
        )

    def retry_wait(self, now_s: float, decision: RetryDecision, status: int | None) -> None:
        attributes: dict[str, Any] = {ATTR_RETRY_WAIT_S: decision.wait_s}
        if decision.retry_after.seconds is not None:
            attributes[ATTR_RETRY_AFTER_S] = decision.retry_after.seconds
        if status is not None:
            attributes[ATTR_HTTP_STATUS_CODE] = status
        self.span.add_event(EVENT_RETRY_WAIT, attributes, timestamp=to_ns(now_s))

    def first_chunk(self, now_s: float) -> None:
        self.span.add_event(EVENT_RESPONSE_FIRST_CHUNK, timestamp=to_ns(now_s))

    def finish(self, result: RequestResult) -> None:
        self.span.set_attribute(ATTR_ATTEMPTS, len(result.attempts))
        self.span.set_attribute(ATTR_OUTCOME, result.outcome)
        if result.outcome != "ok":
            self.span.set_status(Status(StatusCode.ERROR, result.outcome))
        self.span.end(end_time=to_ns(result.end_s))
