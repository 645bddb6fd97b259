"""The wire both virtual runners play: client attempts through the gate to an engine, no delay.

``VirtualMofluxRun`` (gate admission in front of one engine) and ``VirtualModelClaimRun`` (the
lifecycle router, then admission, in front of the engines it starts) differ in what the gate
decides; what happens around that decision is the same and lives here: an attempt opens the
client's ``POST`` and the gate's ``gate.request``; a forwarded request opens the gate's upstream
``POST`` and reaches the engine, whose acceptance sends the answer's headers (200) back at once; an
answer closes the client's ``POST`` and either waits for the body or schedules the retry; the
engine's first token is the client's first chunk and its finish ends ``llm_request`` and the
gate's request. Each runner says what a finished request releases (``_request_done``).

A runner sets, before playing: ``clock``, ``loop`` (its ``EventLoop``), ``gate_spans``,
``results`` and the three tracers (``_tracers``), and defines ``_attempt(arrival, loop, span)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span

from restorelens import __version__
from restorelens.loadgen import (
    NO_HINT,
    TRACER_NAME,
    Arrival,
    RequestResult,
    RequestSpan,
    RetryAfter,
    RetryLoop,
    end_attempt_span,
    start_attempt_span,
)
from restorelens.spans import ATTR_GATE_UPSTREAM

__all__ = ["ENGINE_ACCEPTED", "VIRTUAL_CLIENT_PEER", "Flight", "VirtualWire"]

#: The virtual client's address as the gate records it (``gate.client.identity``).
VIRTUAL_CLIENT_PEER = "127.0.0.1"
#: The engine's answer to a request it accepted (the gate's own answers come from gate.decision).
ENGINE_ACCEPTED = int(HTTPStatus.OK)  # a plain int, as span attributes and the retry loop want


@dataclass(eq=False)
class Flight:
    """One attempt on its way through gate and engine."""

    arrival: Arrival
    loop: RetryLoop
    request_span: RequestSpan
    attempt_span: Span
    #: None for a request sent straight to the engine (no gate on the way).
    gate_span: Span | None
    grant: Any = None
    upstream_span: Span | None = None
    engine: Any = None


class VirtualWire:
    """Attempts, answers, retries and engine events between the cores (see the module doc)."""

    clock: Any
    loop: Any
    gate_spans: Any
    results: list[RequestResult]
    _by_request: dict[str, Flight]
    #: Ask engines for a ``TokenEvent`` per streamed token (a runner whose gate counts them sets it).
    _emit_tokens = False

    def _tracers(self, providers: Any) -> None:
        self._client_tracer = trace.get_tracer(TRACER_NAME, __version__, tracer_provider=providers.client)
        self._gate_tracer = trace.get_tracer("restorelens.gate", tracer_provider=providers.gate)
        self._engine_tracer = trace.get_tracer("restorelens.sim", tracer_provider=providers.engine)
        self._by_request = {}

    def _attempt(self, arrival: Arrival, loop: RetryLoop, request_span: RequestSpan) -> None:
        raise NotImplementedError

    def _request_done(self, flight: Flight, at_s: float) -> None:
        """The engine finished ``flight``'s request at ``at_s``: release what it held, finish the client."""
        raise NotImplementedError

    def _arrive_as(self, arrival: Arrival, request: Any, policy: Any) -> None:
        now_s = self.clock.now_s()
        self._attempt(arrival, RetryLoop(request, policy, now_s),
                      RequestSpan(self._client_tracer, request, policy.name, now_s))

    def _open_attempt(self, arrival: Arrival, loop: RetryLoop, request_span: RequestSpan, model: str, *,
                      gate: bool = True) -> Flight:
        """The client sends its next attempt; the gate's span for it opens under the client's ``POST``
        (unless the attempt goes straight to the engine)."""
        now_s = self.clock.now_s()
        number = loop.begin_attempt(now_s)
        attempt_span = start_attempt_span(self._client_tracer, request_span.span, number, now_s)
        gate_span = None
        if gate:
            from restorelens.gate import client_facts

            # restorelens's client as the live gate sees it: one process on loopback, sending the
            # request's id as x-request-id and its trace as traceparent.
            client = client_facts(peer=VIRTUAL_CLIENT_PEER, request_id=arrival.request_id, traced=True)
            gate_span = self.gate_spans.start_request(arrival.request_id, arrival.traffic_class, now_s, model=model,
                                                      parent=trace.set_span_in_context(attempt_span), client=client)
        return Flight(arrival, loop, request_span, attempt_span, gate_span)

    def _reach_engine(self, flight: Flight, engine: Any, upstream_url: str, priority: int = 0) -> None:
        """A granted request goes upstream: the engine accepts it and the 200 headers come back."""
        from restorelens.sim import SimRequest

        now_s = self.clock.now_s()
        flight.engine = engine
        if flight.gate_span is not None:
            flight.gate_span.set_attribute(ATTR_GATE_UPSTREAM, upstream_url)
            flight.upstream_span = start_attempt_span(self._gate_tracer, flight.gate_span, 1, now_s)
        arrival = flight.arrival
        engine.add_request(SimRequest(arrival.request_id, engine.config.estimate_prompt_tokens(arrival.prompt_chars),
                                      arrival.max_tokens, priority=priority,
                                      emit_tokens=self._emit_tokens), now_s)
        self._by_request[arrival.request_id] = flight
        if flight.upstream_span is not None:
            end_attempt_span(flight.upstream_span, now_s, ENGINE_ACCEPTED, NO_HINT)
            self.gate_spans.first_byte(flight.gate_span, now_s)
        self._answer(flight, ENGINE_ACCEPTED, [])

    def _answer(self, flight: Flight, status: int, headers: list[tuple[str, str]]) -> None:
        """The answer's headers reached the client: close the attempt span, maybe retry."""
        now_s = self.clock.now_s()
        decision = flight.loop.answered(status, headers, now_s)
        end_attempt_span(flight.attempt_span, now_s, status, decision.retry_after if headers else RetryAfter(None))
        if status == ENGINE_ACCEPTED:
            return  # the body follows from the engine's events
        if flight.loop.done:
            self._finish_client(flight)
            return
        flight.request_span.retry_wait(now_s, decision, status)
        self.loop.at(now_s + decision.wait_s, lambda: self._attempt(flight.arrival, flight.loop, flight.request_span))

    def _finish_client(self, flight: Flight) -> None:
        result = flight.loop.result(self.clock.now_s())
        flight.request_span.finish(result)
        self.results.append(result)

    def _engine_events(self, events: Any, model: str) -> None:
        """An engine's first tokens and finishes, as the client, the gate and the engine record them."""
        from restorelens.sim import FinishedEvent, FirstTokenEvent, TokenEvent

        for event in events:
            flight = self._by_request.get(getattr(event, "request_id", ""))
            if flight is None:
                continue
            if isinstance(event, FirstTokenEvent):
                flight.loop.first_chunk(event.at_s)
                flight.request_span.first_chunk(event.at_s)
                self._first_byte(flight, event.at_s)
            elif isinstance(event, TokenEvent):
                self._token(flight, event.at_s)
            elif isinstance(event, FinishedEvent):
                self._end_engine_request(flight, event, model)
                self._request_done(flight, event.at_s)

    def _end_engine_request(self, flight: Flight, event: Any, model: str, gate_status: int = ENGINE_ACCEPTED) -> None:
        """The engine's request ended (finished or aborted): its ``llm_request`` and the gate's span
        end (with ``gate_status``: the gate's own answer when it took the request back)."""
        from restorelens.sim import emit_llm_request_span

        del self._by_request[event.request_id]
        # the engine's parent: the gate's upstream POST, or the client's own for a direct request
        parent = flight.upstream_span if flight.upstream_span is not None else flight.attempt_span
        emit_llm_request_span(self._engine_tracer, event.record, model=model,
                              parent_context=trace.set_span_in_context(parent),
                              request_params={"max_tokens": flight.arrival.max_tokens})
        if flight.gate_span is not None:
            self.gate_spans.end_request(flight.gate_span, event.request_id, event.at_s, gate_status)

    def _first_byte(self, flight: Flight, at_s: float) -> None:
        """The engine's first token passed the gate (a runner whose gate learns from it overrides this)."""

    def _token(self, flight: Flight, at_s: float) -> None:
        """One streamed token passed the gate (only engines asked to ``_emit_tokens`` send them)."""
