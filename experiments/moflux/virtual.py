"""The MoFlux scenario in virtual time: client, gate admission and engine cores on one event loop.

Each piece is the same object the live servers run: the client's ``RetryLoop`` and policy, the
gate's ``Admission`` + ``GateSpans``, the simulator's ``EngineCore`` + ``emit_llm_request_span``.
This module plays the wire between them with zero network delay (the part shared with the
ModelClaim runner is ``experiments.wire.VirtualWire``), emitting the spans the live chain emits
(client.request -> POST -> gate.request -> POST -> llm_request) with virtual times:

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

from restorelens.clock import VirtualClock
from restorelens.experiments.event_loop import EventLoop, TimeSource
from restorelens.experiments.providers import ServiceProviders
from restorelens.experiments.wire import Flight, VirtualWire
from restorelens.gate import preempted
from restorelens.loadgen import Arrival, RequestResult, RequestSpan, RetryLoop, RunLabels, Workload, make_policy

__all__ = ["VIRTUAL_UPSTREAM_URL", "VirtualMofluxRun"]

#: What the virtual gate records as its upstream (there is no socket).
VIRTUAL_UPSTREAM_URL = "http://virtual-engine"


@dataclass
class VirtualMofluxRun(VirtualWire):
    scenario: Any
    seed: int = 0
    providers: ServiceProviders = field(default_factory=ServiceProviders)
    run_id: str = ""
    results: list[RequestResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        from restorelens.gate import assemble_gate
        from restorelens.sim import EngineCore

        self.workload: Workload = self.scenario.workload(self.seed)
        self.clock = VirtualClock()
        self.t0_s = self.clock.now_s()
        config = self.scenario.engine_config(self.seed)
        self.engine = EngineCore(config, seed=self.seed, now_s=self.t0_s)
        settings = self.scenario.gate_settings(VIRTUAL_UPSTREAM_URL, self.workload.model)
        policy = self.scenario.adjust_policy(settings.build_policy())
        self.gate = assemble_gate(
            settings, self.providers.gate, policy=policy,
            on_preempt=lambda grant, preemption: self.loop.at(self.clock.now_s(),
                                                              lambda: self._preempt(grant, preemption)),
        )
        self.gate_spans, self.admission = self.gate.spans, self.gate.admission
        from restorelens.gate import Routed

        # One engine behind the gate: every request routes to it, as through a one-URL upstream table.
        self._route = Routed(VIRTUAL_UPSTREAM_URL)
        # A streamed answer's tokens pass the gate live; the budget-aware lenders count them, so the
        # engine reports each one here too (other arms skip the events: nothing reads them).
        self._emit_tokens = self.scenario.stream and policy.restore_budget_s is not None
        self.policy = make_policy(self.scenario.retry_policy, max_attempts=self.scenario.max_attempts, seed=self.seed)
        self.labels = RunLabels(self.scenario.name, self.workload.name, self.seed, self.run_id, policy=self.scenario.arm)
        self._tracers(self.providers)
        self._waiting: dict[str, Flight] = {}
        self.loop = EventLoop(
            self.clock,
            [
                TimeSource("engine", self.engine.next_event_s, self._engine_due),
                TimeSource("gate", lambda: self.admission.next_deadline_s(self.clock.now_s()), self._gate_due),
            ],
        )

    # --- driving -----------------------------------------------------------------------------

    def run(self) -> list[RequestResult]:
        for arrival in self.workload.arrivals:
            self.loop.at(self.t0_s + arrival.at_s, lambda a=arrival: self._arrive(a))
        end_s = self.loop.run()
        self.gate.close(end_s)
        return self.results

    def _arrive(self, arrival: Arrival) -> None:
        request = self.workload.client_request(arrival, self.labels, stream=self.scenario.stream,
                                               priority=self.scenario.client_priority(arrival.traffic_class))
        self._arrive_as(arrival, request, self.policy)

    def _attempt(self, arrival: Arrival, loop: RetryLoop, request_span: RequestSpan) -> None:
        if self.scenario.direct:  # straight to the engine, with the priority the client set
            flight = self._open_attempt(arrival, loop, request_span, self.workload.model, gate=False)
            self._reach_engine(flight, self.engine, VIRTUAL_UPSTREAM_URL, loop.request.priority or 0)
            return
        from restorelens.gate.policies import request_size

        flight = self._open_attempt(arrival, loop, request_span, self.workload.model)
        decision = self.admission.request(arrival.request_id, arrival.traffic_class, self.clock.now_s(),
                                          size=request_size(arrival.prompt_chars, arrival.max_tokens))
        self._decided(flight, decision)

    def _decided(self, flight: Flight, admitted: Any) -> None:
        """Admission answered (at once, or later from the queue): the gate's decision, as live."""
        from restorelens.gate import Respond, Waiter, decide

        if isinstance(admitted, Waiter):
            self._waiting[flight.arrival.request_id] = flight
            return
        answer = decide(self._route, admitted, model=self.workload.model, traffic_class=flight.arrival.traffic_class,
                        policy=self.admission.policy, lifecycle=False)
        if isinstance(answer, Respond):
            self.gate_spans.rejected(flight.gate_span, admitted)
            self.gate_spans.end_request(flight.gate_span, flight.arrival.request_id, self.clock.now_s(), answer.status)
            self._answer(flight, answer.status, list(answer.headers))
            return
        flight.grant = admitted
        self.gate_spans.granted(flight.gate_span, admitted)
        self._reach_engine(flight, self.engine, answer.upstream, answer.priority or 0)

    def _request_done(self, flight: Flight, at_s: float) -> None:
        self._finish_client(flight)
        if flight.grant is None:
            return  # it went straight to the engine: no grant to give back
        self._queued_answered(self.admission.release(flight.grant, at_s))

    def _first_byte(self, flight: Flight, at_s: float) -> None:
        if flight.grant is not None:
            self._queued_answered(self.admission.first_byte(flight.grant, at_s))

    def _token(self, flight: Flight, at_s: float) -> None:
        if flight.grant is not None:
            self._queued_answered(self.admission.streamed(flight.grant, at_s))

    def _preempt(self, grant: Any, preemption: Any) -> None:
        """The gate takes a loan back: abort it in the engine, end its stream with the retry hint."""
        flight = self._by_request.get(grant.request_id)
        if flight is None or flight.grant is not grant:
            return  # it finished in the same instant
        now_s = self.clock.now_s()
        event = self.engine.abort(grant.request_id, now_s)
        answer = preempted(preemption.retry_after_ms)
        if event is not None:
            self._end_engine_request(flight, event, self.workload.model, answer.status)
        decision = flight.loop.preempted(now_s, answer.headers)
        if flight.loop.done:
            self._finish_client(flight)
        else:
            flight.request_span.retry_wait(now_s, decision, answer.status)
            self.loop.at(now_s + decision.wait_s, lambda: self._attempt(flight.arrival, flight.loop, flight.request_span))
        self._queued_answered(self.admission.release(grant, now_s, completed=False))

    # --- time sources --------------------------------------------------------------------------

    def _engine_due(self, now_s: float) -> None:
        self._engine_events(self.engine.advance_to(now_s), self.workload.model)

    def _gate_due(self, now_s: float) -> None:
        rejections, grants = self.admission.expire(now_s)
        self._queued_answered([*rejections, *grants])

    def _queued_answered(self, answers: Any) -> None:
        """Queued requests the core answered (a grant, or a timeout): the gate decides for each, as live."""
        for answer in answers:
            self._decided(self._waiting.pop(answer.request_id), answer)
