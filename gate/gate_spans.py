"""The gate's spans with explicit timestamps: ``gate.request``, ``gate.lend`` and ``gate.restore``.

The live proxy and the virtual-time loop both drive this emitter with the times their clock gives,
so a virtual run produces the same spans with virtual timestamps. ``GateSpans`` is also a
``RestorationListener``: pass it to ``Admission(listeners=[spans])`` and lending periods and
restoration episodes become spans. ``gate.lend`` and ``gate.restore`` are roots of their own traces;
``gate.restore`` links to the ``gate.request`` of the request whose arrival opened the episode, so the
analysis crosses from the episode into that request's trace (client -> gate -> engine).
"""

from __future__ import annotations

import math

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TracerProvider

from restorelens import spans as S
from restorelens.clock import to_ns
from restorelens.fast_spans import FastTracer

from .client_identity import ClientFacts
from .grants import Grant, Rejection
from .policies.budget import LoanCheck, Preemption
from .restoration import LendingPeriod, RestorationEpisode
from .retry_hint import retry_after_header
from .routing import NotReady

__all__ = ["GateSpans"]

_ROOT = Context()


class GateSpans:
    def __init__(self, tracer_provider: TracerProvider | None = None, *, policy_name: str = "",
                 restore_budget_s: float | None = None) -> None:
        self._tracer = trace.get_tracer("restorelens.gate", tracer_provider=tracer_provider)
        #: The per-request spans (gate.request, the upstream calls' CLIENT spans) in the same scope,
        #: recorded as plain data until they end: a quarter of an SDK span's cost.
        self.tracer = FastTracer(self._tracer)
        self.policy_name = policy_name
        self.restore_budget_s = restore_budget_s
        self._request_contexts: dict[str, SpanContext] = {}
        #: Open ``gate.request`` spans by request id: the core's lending decisions become their events.
        self._request_spans: dict[str, Span] = {}
        self._lend_spans: dict[int, Span] = {}
        self._restore_spans: dict[int, Span] = {}

    # --- gate.request --------------------------------------------------------------------------

    def start_request(
        self,
        request_id: str,
        traffic_class: str,
        now_s: float,
        *,
        model: str | None = None,
        parent: Context | None = None,
        client: ClientFacts | None = None,
    ) -> Span:
        """Start ``gate.request`` (SERVER); ``parent`` is the caller's extracted trace context,
        ``client`` who sent it (``gate.client.*``)."""
        attributes: dict[str, str | int | bool] = {
            S.ATTR_REQUEST_ID: request_id,
            S.ATTR_TRAFFIC_CLASS: traffic_class,
            S.ATTR_GATE_POLICY: self.policy_name,
        }
        if model:
            attributes[S.ATTR_GEN_AI_REQUEST_MODEL] = model
        if client is not None:
            attributes.update(client.attributes())
        span = self.tracer.start_span(
            S.SPAN_GATE_REQUEST,
            context=parent if parent is not None else _ROOT,
            kind=SpanKind.SERVER,
            attributes=attributes,
            start_time=to_ns(now_s),
        )
        self._request_contexts[request_id] = span.get_span_context()
        self._request_spans[request_id] = span
        return span

    def granted(self, span: Span, grant: Grant, *, upstream: str | None = None) -> None:
        """Admitted; ``upstream`` is the engine URL the request goes to."""
        attributes: dict[str, str | float] = {
            S.ATTR_GATE_DECISION: "admitted", S.ATTR_GATE_SLOT: grant.slot, S.ATTR_GATE_WAIT_S: grant.wait_s
        }
        if upstream is not None:
            attributes[S.ATTR_GATE_UPSTREAM] = upstream
        span.set_attributes(attributes)  # one lock and one validation pass instead of one per key
        span.add_event(S.EVENT_GRANT_ACQUIRED, {S.ATTR_GATE_SLOT: grant.slot}, timestamp=to_ns(grant.granted_at_s))

    def rejected(self, span: Span, rejection: Rejection, status_code: int = 429) -> None:
        span.set_attribute(S.ATTR_GATE_DECISION, "rejected")
        span.set_attribute(S.ATTR_GATE_WAIT_S, rejection.wait_s)
        span.set_attribute(S.ATTR_ERROR_TYPE, rejection.reason)
        span.set_attribute(S.ATTR_HTTP_STATUS_CODE, status_code)
        if rejection.retry_after_ms is not None:
            span.set_attribute(S.ATTR_GATE_RETRY_AFTER_MS, rejection.retry_after_ms)
            header = retry_after_header(rejection.retry_after_ms)
            if header is not None:
                span.set_attribute(S.ATTR_HTTP_RETRY_AFTER, [header])
                span.set_attribute(S.ATTR_RETRY_AFTER_S, float(header))

    def not_ready(self, span: Span, route: NotReady) -> None:
        """The lifecycle's answer to a model that cannot serve: the 503, its hint and where the hint came from."""
        span.set_attribute(S.ATTR_GATE_DECISION, "not_ready")
        span.set_attribute(S.ATTR_MODELCLAIM_PHASE, route.phase)
        span.set_attribute(S.ATTR_MODELCLAIM_REASON, route.reason)
        span.set_attribute(S.ATTR_HTTP_STATUS_CODE, route.status_code)
        if route.retry_after_s is not None:
            span.set_attribute(S.ATTR_HTTP_RETRY_AFTER, [str(route.retry_after_s)])
            span.set_attribute(S.ATTR_RETRY_AFTER_S, float(route.retry_after_s))
        self._hint(span, route)

    def held(self, span: Span, route: NotReady, hold_s: float, released_s: float | None = None) -> None:
        """The request was held ``hold_s`` while its model woke, until ``released_s`` (then forwarded,
        or answered by ``not_ready``)."""
        span.set_attribute(S.ATTR_GATE_HOLD_S, hold_s)
        if released_s is not None:
            span.add_event(S.EVENT_HOLD_RELEASED, timestamp=to_ns(released_s))
        self._hint(span, route)

    @staticmethod
    def _hint(span: Span, route: NotReady) -> None:
        if route.hint_mode is not None:
            span.set_attribute(S.ATTR_MODELCLAIM_HINT_MODE, route.hint_mode)
        if route.hint_source is not None:
            span.set_attribute(S.ATTR_MODELCLAIM_HINT_SOURCE, route.hint_source)
        if route.retry_after_ms is not None:
            span.set_attribute(S.ATTR_GATE_RETRY_AFTER_MS, route.retry_after_ms)
        if route.predicted_ready_in_s is not None:
            span.set_attribute(S.ATTR_MODELCLAIM_PREDICTED_READY_IN_S, route.predicted_ready_in_s)
        if route.hint_capped:
            span.set_attribute(S.ATTR_MODELCLAIM_HINT_CAPPED, True)

    def failed(self, span: Span, error_type: str, status_code: int) -> None:
        """The gate answered an error of its own (bad input, upstream unreachable or timed out)."""
        span.set_attribute(S.ATTR_GATE_DECISION, "error")
        span.set_attribute(S.ATTR_ERROR_TYPE, error_type)
        span.set_attribute(S.ATTR_HTTP_STATUS_CODE, status_code)

    @staticmethod
    def first_byte(span: Span, now_s: float) -> None:
        span.add_event(S.EVENT_UPSTREAM_FIRST_BYTE, timestamp=to_ns(now_s))

    def end_request(self, span: Span, request_id: str, now_s: float, status_code: int | None = None) -> None:
        if status_code is not None:
            span.set_attribute(S.ATTR_HTTP_STATUS_CODE, status_code)
            if status_code >= 500:
                span.set_status(Status(StatusCode.ERROR))
        span.end(end_time=to_ns(now_s))
        if self._request_contexts.get(request_id) == span.get_span_context():
            del self._request_contexts[request_id]
        if self._request_spans.get(request_id) is span:
            del self._request_spans[request_id]

    # --- the lenders' decisions (gate/policies/budget.py), as events on the request's span -------

    def loan_refused(self, request_id: str, check: LoanCheck, now_s: float) -> None:
        self._loan_event(request_id, S.EVENT_LOAN_REFUSED, check, now_s)

    def lending_resumed(self, request_id: str, check: LoanCheck, now_s: float) -> None:
        self._loan_event(request_id, S.EVENT_LENDING_RESUMED, check, now_s)

    def _loan_event(self, request_id: str, name: str, check: LoanCheck, now_s: float) -> None:
        span = self._request_spans.get(request_id)
        if span is None:
            return
        attributes: dict[str, str | float] = {S.ATTR_GATE_LOAN_REASON: check.reason or ""}
        if check.predicted_s is not None and math.isfinite(check.predicted_s):
            attributes[S.ATTR_GATE_LOAN_PREDICTED_S] = check.predicted_s
        if check.limit_s is not None:
            attributes[S.ATTR_GATE_LOAN_LIMIT_S] = check.limit_s
        span.add_event(name, attributes, timestamp=to_ns(now_s))

    def preempted(self, request_id: str, preemption: Preemption, now_s: float) -> None:
        span = self._request_spans.get(request_id)
        if span is not None:
            attributes: dict[str, float | int] = {S.ATTR_GATE_PREEMPT_LOST_TOKENS: preemption.lost_tokens}
            if math.isfinite(preemption.remaining_s):  # unknown length: no figure to give
                attributes[S.ATTR_GATE_PREEMPT_REMAINING_S] = preemption.remaining_s
            span.add_event(S.EVENT_LOAN_PREEMPTED, attributes, timestamp=to_ns(now_s))

    # --- gate.lend / gate.restore (RestorationListener) ---------------------------------------

    def lend_started(self, period: LendingPeriod) -> None:
        self._lend_spans[period.period_id] = self._tracer.start_span(
            S.SPAN_GATE_LEND,
            context=_ROOT,
            attributes={S.ATTR_GATE_POLICY: self.policy_name, S.ATTR_GATE_LENDABLE_SLOTS: period.lendable_slots},
            start_time=to_ns(period.start_s),
        )

    def lend_finished(self, period: LendingPeriod) -> None:
        span = self._lend_spans.pop(period.period_id, None)
        if span is not None:
            self._end_lend(span, period, None)

    @staticmethod
    def _end_lend(span: Span, period: LendingPeriod, end_s: float | None) -> None:
        span.set_attribute(S.ATTR_GATE_BORROWED_PEAK, period.peak_borrowed)
        last_s = period.start_s
        if period.lend_stopped_s is not None:
            span.add_event(S.EVENT_LEND_STOPPED, timestamp=to_ns(period.lend_stopped_s))
            last_s = max(last_s, period.lend_stopped_s)
        if period.borrowed_drained_s is not None:
            span.add_event(S.EVENT_BORROWED_DRAINED, timestamp=to_ns(period.borrowed_drained_s))
            last_s = max(last_s, period.borrowed_drained_s)
        span.end(end_time=to_ns(last_s if end_s is None else max(end_s, last_s)))

    def restore_started(self, episode: RestorationEpisode) -> None:
        returning = self._request_contexts.get(episode.returning_request_id)
        self._restore_spans[episode.episode_id] = self._tracer.start_span(
            S.SPAN_GATE_RESTORE,
            context=_ROOT,
            attributes={
                S.ATTR_GATE_POLICY: self.policy_name,
                S.ATTR_GATE_BORROWED_AT_RETURN: episode.borrowed_at_return,
                S.ATTR_REQUEST_ID: episode.returning_request_id,
                **({} if self.restore_budget_s is None else {S.ATTR_GATE_RESTORE_BUDGET_S: self.restore_budget_s}),
            },
            links=[Link(returning)] if returning is not None else None,
            start_time=to_ns(episode.t0_s),
        )

    def restore_finished(self, episode: RestorationEpisode) -> None:
        span = self._restore_spans.pop(episode.episode_id, None)
        if span is not None:
            self._end_restore(span, episode, None)

    def flush(self, periods: list[LendingPeriod], episodes: list[RestorationEpisode], now_s: float) -> None:
        """End spans of records still open at ``now_s`` (end of a run), with the events they have."""
        for period in periods:
            lend_span = self._lend_spans.pop(period.period_id, None)
            if lend_span is not None:
                self._end_lend(lend_span, period, now_s)
        for episode in episodes:
            span = self._restore_spans.pop(episode.episode_id, None)
            if span is not None:
                self._end_restore(span, episode, now_s)

    @staticmethod
    def _end_restore(span: Span, episode: RestorationEpisode, end_s: float | None) -> None:
        last_s = episode.t0_s
        if episode.grant_restored_s is not None:
            span.add_event(S.EVENT_GRANT_RESTORED, timestamp=to_ns(episode.grant_restored_s))
            last_s = max(last_s, episode.grant_restored_s)
        if episode.borrowed_drained_s is not None:
            span.add_event(S.EVENT_BORROWED_DRAINED, timestamp=to_ns(episode.borrowed_drained_s))
            last_s = max(last_s, episode.borrowed_drained_s)
        span.end(end_time=to_ns(last_s if end_s is None else max(end_s, last_s)))
