"""A ModelClaim wake scenario in virtual time: client, gate, lifecycle and engines on one event loop.

The same objects the live servers run: the client's ``RetryLoop`` and policy, the gate's
``Admission`` + ``GateSpans``, the lifecycle's ``ModelClaimCore`` (built from the scenario's
``[modelclaim]`` table by the gate's own config code) driven by ``VirtualLifecycle`` over an
``InProcessBackend`` whose engines are the simulator's ``EngineCore``. This module plays the wire
with zero network delay (what it shares with the MoFlux runner is ``experiments.wire.VirtualWire``)
and emits the live chain's spans with virtual times:

- each attempt opens the client's ``POST`` and the gate's ``gate.request``; the gate asks the
  lifecycle first (as the proxy does): not ready -> 503 with the arm's hint (the fixed table's
  Retry-After, or the calibrated one with ``x-restorelens-retry-after-ms``), the phase, reason and
  hint on ``gate.request``, and the lifecycle wants a wake linked to that span;
- the hold arm: a ``Hold`` keeps the attempt open, as the proxy's ``_hold`` does, until a wake of
  the model ends (a lifecycle listener) or the hold's ``until_s``, whichever comes first; then the
  gate routes again and decides without holding (forwarded, or 503 with a fresh hint), with
  ``gate.hold_s`` on the span;
- routed -> admission grant -> the engine of the routed URL accepts it (headers at once, closing
  both ``POST`` spans) -> first token -> finish (``llm_request``, release, ``request_finished``);
- the lifecycle's ``modelclaim.state`` / ``modelclaim.wake`` spans come from ``ModelClaimSpans``.

A run plays the scenario's ``cycles`` one after another on one virtual clock. Each cycle deploys
afresh (a restarted gate and lifecycle, new engines), carrying over only the lifecycle's
calibration (as JSON: what a restarted gate reads from its ``calibration_path``), and is set up
first (``SetupDirector``: cold starts, the sleep, a neighbour placed); lifecycle spans are recorded
from the cycle's t0 on, so the state intervals in progress at t0 appear whole but the setup's own
cold starts do not show up as wake episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from restorelens.clock import VirtualClock, to_ns
from restorelens.experiments.event_loop import EventLoop, TimeSource
from restorelens.experiments.modelclaim.deployment import SetupDirector, deployment_table
from restorelens.experiments.modelclaim.scenarios import ModelClaimScenario
from restorelens.experiments.providers import ServiceProviders
from restorelens.experiments.wire import Flight, VirtualWire
from restorelens.loadgen import Arrival, RequestResult, RequestSpan, RetryLoop, RunLabels, make_policy

__all__ = ["VirtualModelClaimRun", "modelclaim_client_request"]

#: Steps of the setup loop before giving up (a setup that never reaches its state is a bug).
MAX_SETUP_STEPS = 10_000


def modelclaim_client_request(scenario: ModelClaimScenario, arrival: Arrival, labels: RunLabels) -> Any:
    from restorelens.loadgen import ClientRequest, filler_prompt

    return ClientRequest(
        arrival.request_id, scenario.model, filler_prompt(arrival.prompt_chars, labels.seed or 0, arrival.request_id),
        arrival.max_tokens, traffic_class=arrival.traffic_class, stream=scenario.stream,
        arrival_phase=arrival.phase, labels=labels,
    )


@dataclass(eq=False)
class _Held:
    """An attempt the gate holds while its model wakes."""

    flight: Flight
    route: Any  # the NotReady it was held on
    since_s: float


@dataclass
class VirtualModelClaimRun(VirtualWire):
    scenario: ModelClaimScenario
    seed: int = 0
    providers: ServiceProviders = field(default_factory=ServiceProviders)
    run_id: str = ""
    results: list[RequestResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clock = VirtualClock()
        self.table = deployment_table(self.scenario)
        self.policy = make_policy(self.scenario.retry_policy, max_attempts=self.scenario.max_attempts,
                                  deadline_s=self.scenario.deadline_s, seed=self.seed)
        self.labels = RunLabels(self.scenario.name, self.scenario.workload_name, self.seed, self.run_id)
        self._tracers(self.providers)
        #: When each cycle's first request went out.
        self.cycle_t0s: list[float] = []
        self._deploy(None)
        self.t0_s = self.clock.now_s()

    def _deploy(self, learnt: str | None) -> None:
        """A fresh deployment from the clock's now: gate and lifecycle (re)started, no engine yet.
        ``learnt``: the previous cycle's calibration (``WakeCalibration.to_json``)."""
        from restorelens.gate import GateSettings, assemble_gate
        from restorelens.gate.modelclaim import InProcessBackend, VirtualLifecycle, WakeEnds, build_core

        self.core, _ = build_core(self.table)
        if learnt is not None:
            self.core.calibration.load_json(learnt, "the previous cycle's calibration")
        self.core.listeners.append(WakeEnds(lambda record: self.wake_ended(record.model, record.end_s)))
        self.engines: dict[str, Any] = {}  # routed URL -> EngineCore
        self.backend = InProcessBackend(self._new_engine, on_started=self._started)
        self.lifecycle = VirtualLifecycle(self.core, self.backend, poll_interval_s=self.scenario.poll_interval_s)
        settings = GateSettings(policy="fcfs", modelclaim=self.table)
        # The lifecycle is the virtual one above, not the live router the table would start.
        self.gate = assemble_gate(settings, self.providers.gate)
        self.gate_spans, self.admission = self.gate.spans, self.gate.admission
        #: At most this many attempts held at once, as the proxy's ``queue_limit``.
        self.hold_limit = settings.queue_limit
        self.held: list[_Held] = []
        self.loop = EventLoop(self.clock, [
            TimeSource("lifecycle", self.lifecycle.next_event_s, self.lifecycle.advance_to),
            TimeSource("engines", self._engines_next_s, self._engines_due),
        ])

    def _new_engine(self, model: str, pod: str) -> Any:
        from restorelens.sim import EngineCore, get_preset

        shape = next(c for c in self.scenario.claims if c.model == model)
        engine = EngineCore(get_preset(shape.preset), seed=self.seed, now_s=self.lifecycle.now_s)
        self.engines[self.backend.url_template.format(model=model, pod=pod)] = engine
        return engine

    def _started(self, action: Any, engine: Any, now_s: float) -> None:
        """The engine's own startup spans, in the wake's trace under its span, as a started vLLM
        (or ``restorelens sim``) told the wake's ``TRACEPARENT`` exports them."""
        if action.trace is None:
            return  # no spans: nothing minted an identity for the wake
        from opentelemetry.trace import NonRecordingSpan, set_span_in_context

        from restorelens.sim import emit_startup_spans

        parent = set_span_in_context(NonRecordingSpan(action.trace))
        emit_startup_spans(self._engine_tracer, engine.config, now_s, parent_context=parent)

    # --- driving -------------------------------------------------------------------------------

    def run(self) -> list[RequestResult]:
        for cycle in range(1, self.scenario.cycles + 1):
            if cycle > 1:
                self._deploy(self.core.calibration.to_json())
            self._play_cycle(cycle)
        self.t0_s = self.cycle_t0s[0]
        return self.results

    def _play_cycle(self, cycle: int) -> None:
        from restorelens.gate.modelclaim import ModelClaimSpans

        t0_s = self._set_up()
        self.cycle_t0s.append(t0_s)
        self.clock.advance_to(t0_s)
        self.core.listeners.append(ModelClaimSpans(self.providers.gate, core=self.core))
        if self.scenario.setup.model_state == "not-started":
            self.lifecycle.start(t0_s)
        arrivals = self.scenario.arrivals_of(cycle)
        for arrival in arrivals:
            self.loop.at(t0_s + arrival.at_s, lambda a=arrival: self._arrive(a))
        done = len(self.results) + len(arrivals)
        end_s = self.loop.run(stop=lambda: len(self.results) == done)
        for action in self.core.shutdown(end_s):
            self.backend.perform_stop(action, end_s)  # type: ignore[arg-type]
        self.gate.close(end_s)

    def _set_up(self) -> float:
        """Play the lifecycle alone from the clock's now until the scenario's state; returns t0."""
        director = SetupDirector(self.scenario)
        start_s = self.clock.now_s()
        if self.scenario.setup.model_state != "not-started":
            self.lifecycle.start(start_s)
        director.observe(self._states(), start_s)
        for _ in range(MAX_SETUP_STEPS):
            t0_s = director.t0_s()
            if t0_s is not None:
                return t0_s
            due = [t for t in (self.lifecycle.next_event_s(), director.sleep_due_s()) if t is not None]
            if not due:
                break
            now_s = min(due)
            self.lifecycle.advance_to(now_s)
            sleep_s = director.sleep_due_s()
            if sleep_s is not None and sleep_s <= now_s:
                self._sleep(self.scenario.model, now_s)
                director.sleep_sent = True
            director.observe(self._states(), now_s)
        raise RuntimeError(f"{self.scenario.name}: the deployment never reached its starting state")

    def _sleep(self, model: str, now_s: float) -> None:
        # The operator's sleep, as POST /modelclaim/models/M/sleep is live.
        self.lifecycle.sleep(model, now_s)

    def _states(self) -> dict[str, tuple[str, float]]:
        return {m: (s.phase, s.since_s) for m in self.core.models() for s in [self.core.status(m)]}

    def _arrive(self, arrival: Arrival) -> None:
        self._arrive_as(arrival, modelclaim_client_request(self.scenario, arrival, self.labels), self.policy)

    # --- the gate ------------------------------------------------------------------------------

    def _attempt(self, arrival: Arrival, loop: RetryLoop, request_span: RequestSpan) -> None:
        from restorelens.gate import Hold

        now_s = self.clock.now_s()
        flight = self._open_attempt(arrival, loop, request_span, self.scenario.model)
        route = self.lifecycle.route(self.scenario.model, now_s, trigger=flight.gate_span.get_span_context())
        answer = self._decide(route, arrival, may_hold=len(self.held) < self.hold_limit)
        if isinstance(answer, Hold):
            held = _Held(flight, route, now_s)
            self.held.append(held)
            self.loop.at(answer.until_s, lambda: self._release(held))
            return
        self._carry_out(flight, route, answer)

    def wake_ended(self, model: str, at_s: float) -> None:
        """A wake of ``model`` ended at ``at_s`` (ready or not): its held attempts are routed again then."""
        if model == self.scenario.model and self.held:
            held = list(self.held)
            self.loop.at(at_s, lambda: [self._release(h) for h in held])

    def _release(self, held: _Held) -> None:
        """The hold of ``held`` ends (its model's wake ended, or the hold's time is up): route it again
        and decide, without holding it a second time."""
        if held not in self.held:
            return  # released already
        self.held.remove(held)
        now_s = self.clock.now_s()
        flight = held.flight
        # hold_s from the spans' nanosecond stamps, so gate start + hold is hold.released's very
        # nanosecond (a difference of epoch-sized floats is off by a few hundred)
        self.gate_spans.held(flight.gate_span, held.route, (to_ns(now_s) - to_ns(held.since_s)) / 1e9, now_s)
        route = self.lifecycle.route(self.scenario.model, now_s, trigger=flight.gate_span.get_span_context())
        self._carry_out(flight, route, self._decide(route, flight.arrival, may_hold=False))

    def _decide(self, route: Any, arrival: Arrival, admitted: Any = None, *, may_hold: bool = False) -> Any:
        from restorelens.gate import decide

        return decide(route, admitted, model=self.scenario.model, traffic_class=arrival.traffic_class,
                      policy=self.admission.policy, lifecycle=True, may_hold=may_hold)

    def _carry_out(self, flight: Flight, route: Any, answer: Any) -> None:
        """What the gate does with the attempt once decided: answer it, or admit and forward it."""
        from restorelens.gate import Admit, Forward, Grant, NotReady, Respond

        now_s = self.clock.now_s()
        arrival, gate_span = flight.arrival, flight.gate_span
        if isinstance(route, NotReady):
            self.gate_spans.not_ready(gate_span, route)
        if isinstance(answer, Respond):
            self.gate_spans.end_request(gate_span, arrival.request_id, now_s, answer.status)
            self._answer(flight, answer.status, list(answer.headers))
            return
        assert isinstance(answer, Admit)
        admitted = self.admission.request(arrival.request_id, arrival.traffic_class, now_s)
        assert isinstance(admitted, Grant), "the fcfs policy without a cap grants at once"
        forward = self._decide(route, arrival, admitted)
        assert isinstance(forward, Forward)
        flight.grant = admitted
        self.gate_spans.granted(gate_span, admitted)
        self.lifecycle.request_started(self.scenario.model, now_s)
        self._reach_engine(flight, self.engines[answer.upstream], answer.upstream, forward.priority or 0)

    def _request_done(self, flight: Flight, at_s: float) -> None:
        self.admission.release(flight.grant, at_s)
        self.lifecycle.request_finished(self.scenario.model, at_s)
        self._finish_client(flight)

    # --- engines as one time source ------------------------------------------------------------

    def _engines_next_s(self) -> float | None:
        due = [t for engine in self.engines.values() if (t := engine.next_event_s()) is not None]
        return min(due) if due else None

    def _engines_due(self, now_s: float) -> None:
        for engine in list(self.engines.values()):
            t = engine.next_event_s()
            if t is not None and t <= now_s:
                self._engine_events(engine.advance_to(now_s), self.scenario.model)
