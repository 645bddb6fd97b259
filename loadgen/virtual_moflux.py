"""The MoFlux scenario in virtual time: client, gate admission and engine cores on one event loop.

Each piece is the same object the live servers run: the client's ``RetryLoop`` and policy, the
gate's ``Admission`` + ``GateSpans``, the simulator's ``EngineCore`` + ``emit_llm_request_span``.
This module only plays the wire between them with zero network delay, emitting the spans the live
chain emits (client.request -> POST -> gate.request -> POST -> llm_request) with virtual times:

- an attempt opens the client's ``POST`` and the gate's ``gate.request`` at once;
- the gate grants at once, queues (grant later, from a release) or rejects (429 with its
  Retry-After estimate, at once or when the wait times out);
- on a grant the request reaches the engine; the engine accepts it and the answer's headers (200)
  go back at once, closing both ``POST`` spans, as a streaming answer's headers do live;
- the engine's first token is the client's ``response.first_chunk``; its finish ends the
  ``llm_request``, releases the grant (which may grant queued requests) and ends the request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span

from restorelens._version import __version__
from restorelens.clock import VirtualClock
from restorelens.loadgen.event_loop import EventLoop, TimeSource
from restorelens.loadgen.request import RequestResult, RetryLoop, RunLabels
from restorelens.loadgen.retry import make_policy
from restorelens.loadgen.retry_after import NO_HINT, RetryAfter
from restorelens.loadgen.tracing import TRACER_NAME, RequestSpan, end_attempt_span, start_attempt_span
from restorelens.loadgen.workloads import Arrival, Workload
from restorelens.spans import ATTR_GATE_UPSTREAM

__all__ = ["VIRTUAL_UPSTREAM_URL", "ServiceProviders", "VirtualMofluxRun"]

#: What the virtual gate records as its upstream (there is no socket).
VIRTUAL_UPSTREAM_URL = "http://virtual-engine"


@dataclass(frozen=True)
class ServiceProviders:
    """One tracer provider per service, as the live run has one process-side provider each."""

    client: Any = None
    gate: Any = None
    engine: Any = None
    #: The exporter the providers share (``RunTelemetry`` sets it), for providers a runner adds.
    exporter: Any = None


@dataclass(eq=False)
class _InFlight:
    """One attempt on its way through gate and engine."""

    arrival: Arrival
    loop: RetryLoop
    request_span: RequestSpan
    attempt_span: Span
    gate_span: Span
    grant: Any = None
    upstream_span: Span | None = None


@dataclass
class VirtualMofluxRun:
    scenario: Any
    seed: int = 0
    providers: ServiceProviders = field(default_factory=ServiceProviders)
    run_id: str = ""
    results: list[RequestResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        from restorelens.gate import Admission, GateSpans
        from restorelens.sim import EngineCore

        self.workload: Workload = self.scenario.workload(self.seed)
        self.clock = VirtualClock()
        self.t0_s = self.clock.now_s()
        config = self.scenario.engine_config(self.seed)
        self.engine = EngineCore(config, seed=self.seed, now_s=self.t0_s)
        settings = self.scenario.gate_settings(VIRTUAL_UPSTREAM_URL, self.workload.model)
        self.gate_spans = GateSpans(self.providers.gate, policy_name=settings.policy)
        self.admission = Admission(
            settings.build_policy(),
            wait_timeout_s=settings.wait_timeout_s,
            queue_limit=settings.queue_limit,
            listeners=[self.gate_spans],
        )
        self.policy = make_policy(self.scenario.retry_policy, max_attempts=self.scenario.max_attempts, seed=self.seed)
        self.labels = RunLabels(self.scenario.name, self.workload.name, self.seed, self.run_id)
        self._client_tracer = trace.get_tracer(TRACER_NAME, __version__, tracer_provider=self.providers.client)
        self._gate_tracer = trace.get_tracer("restorelens.gate", tracer_provider=self.providers.gate)
        self._engine_tracer = trace.get_tracer("restorelens.sim", tracer_provider=self.providers.engine)
        self._by_request: dict[str, _InFlight] = {}
        self._waiting: dict[str, _InFlight] = {}
        self.loop = EventLoop(
            self.clock,
            [
                TimeSource("engine", self.engine.next_event_s, self._engine_due),
                TimeSource("gate", self.admission.next_deadline_s, self._gate_due),
            ],
        )

    # --- driving -----------------------------------------------------------------------------

    def run(self) -> list[RequestResult]:
        for arrival in self.workload.arrivals:
            self.loop.at(self.t0_s + arrival.at_s, lambda a=arrival: self._arrive(a))
        end_s = self.loop.run()
        self.admission.close(end_s)
        self.gate_spans.flush(self.admission.periods, self.admission.episodes, end_s)
        return self.results

    def _arrive(self, arrival: Arrival) -> None:
        request = self.workload.client_request(arrival, self.labels, stream=self.scenario.stream)
        now_s = self.clock.now_s()
        loop = RetryLoop(request, self.policy, now_s)
        span = RequestSpan(self._client_tracer, request, self.policy.name, now_s)
        self._attempt(arrival, loop, span)

    def _attempt(self, arrival: Arrival, loop: RetryLoop, request_span: RequestSpan) -> None:
        now_s = self.clock.now_s()
        number = loop.begin_attempt(now_s)
        attempt_span = start_attempt_span(self._client_tracer, request_span.span, number, now_s)
        gate_span = self.gate_spans.start_request(
            arrival.request_id, arrival.traffic_class, now_s, model=self.workload.model,
            parent=trace.set_span_in_context(attempt_span),
        )
        flight = _InFlight(arrival, loop, request_span, attempt_span, gate_span)
        decision = self.admission.request(arrival.request_id, arrival.traffic_class, now_s)
        self._decided(flight, decision)

    def _decided(self, flight: _InFlight, decision: Any) -> None:
        from restorelens.gate import Grant, Rejection

        if isinstance(decision, Grant):
            self._forward(flight, decision)
        elif isinstance(decision, Rejection):
            self._reject(flight, decision)
        else:
            self._waiting[flight.arrival.request_id] = flight

    def _reject(self, flight: _InFlight, rejection: Any) -> None:
        from restorelens.gate.retry_hint import retry_after_header

        now_s = self.clock.now_s()
        self.gate_spans.rejected(flight.gate_span, rejection)
        self.gate_spans.end_request(flight.gate_span, flight.arrival.request_id, now_s, 429)
        header = retry_after_header(rejection.retry_after_ms)
        self._answer(flight, 429, [("retry-after", header)] if header is not None else [])

    def _forward(self, flight: _InFlight, grant: Any) -> None:
        from restorelens.sim import SimRequest

        now_s = self.clock.now_s()
        flight.grant = grant
        self.gate_spans.granted(flight.gate_span, grant)
        flight.gate_span.set_attribute(ATTR_GATE_UPSTREAM, VIRTUAL_UPSTREAM_URL)
        flight.upstream_span = start_attempt_span(self._gate_tracer, flight.gate_span, 1, now_s)
        arrival = flight.arrival
        priority = self.admission.policy.upstream_priority(arrival.traffic_class) or 0
        self.engine.add_request(
            SimRequest(arrival.request_id, self.engine.config.estimate_prompt_tokens(arrival.prompt_chars),
                       arrival.max_tokens, priority=priority),
            now_s,
        )
        self._by_request[arrival.request_id] = flight
        end_attempt_span(flight.upstream_span, now_s, 200, NO_HINT)
        self.gate_spans.first_byte(flight.gate_span, now_s)
        self._answer(flight, 200, [])

    def _answer(self, flight: _InFlight, status: int, headers: list[tuple[str, str]]) -> None:
        """The answer's headers reached the client: close the attempt span, maybe retry."""
        now_s = self.clock.now_s()
        decision = flight.loop.answered(status, headers, now_s)
        hint = decision.retry_after if headers else RetryAfter(None)
        end_attempt_span(flight.attempt_span, now_s, status, hint)
        if 200 <= status < 300:
            return  # the body follows from the engine's events
        if flight.loop.done:
            self._finish_client(flight)
            return
        flight.request_span.retry_wait(now_s, decision, status)
        self.loop.at(now_s + decision.wait_s, lambda: self._attempt(flight.arrival, flight.loop, flight.request_span))

    def _finish_client(self, flight: _InFlight) -> None:
        result = flight.loop.result(self.clock.now_s())
        flight.request_span.finish(result)
        self.results.append(result)

    # --- time sources --------------------------------------------------------------------------

    def _engine_due(self, now_s: float) -> None:
        from restorelens.sim import FinishedEvent, FirstTokenEvent
        from restorelens.sim.tracing import emit_llm_request_span

        for event in self.engine.advance_to(now_s):
            flight = self._by_request.get(event.request_id) if hasattr(event, "request_id") else None
            if flight is None:
                continue
            if isinstance(event, FirstTokenEvent):
                flight.loop.first_chunk(event.at_s)
                flight.request_span.first_chunk(event.at_s)
            elif isinstance(event, FinishedEvent):
                del self._by_request[event.request_id]
                emit_llm_request_span(
                    self._engine_tracer, event.record, model=self.workload.model,
                    parent_context=trace.set_span_in_context(flight.upstream_span),
                    request_params={"max_tokens": flight.arrival.max_tokens},
                )
                self.gate_spans.end_request(flight.gate_span, event.request_id, event.at_s, 200)
                self._finish_client(flight)
                for grant in self.admission.release(flight.grant, event.at_s):
                    self._granted_waiter(grant)

    def _gate_due(self, now_s: float) -> None:
        rejections, grants = self.admission.expire(now_s)
        for rejection in rejections:
            self._reject(self._waiting.pop(rejection.request_id), rejection)
        for grant in grants:
            self._granted_waiter(grant)

    def _granted_waiter(self, grant: Any) -> None:
        self._forward(self._waiting.pop(grant.request_id), grant)
