"""A ModelClaim wake scenario in virtual time: client, gate, lifecycle and engines on one event loop.

The same objects the live servers run: the client's ``RetryLoop`` and policy, the gate's
``Admission`` + ``GateSpans``, the lifecycle's ``ModelClaimCore`` (built from the scenario's
``[modelclaim]`` table by the gate's own config code) driven by ``VirtualLifecycle`` over an
``InProcessBackend`` whose engines are the simulator's ``EngineCore``. This module plays the wire
with zero network delay (what it shares with the MoFlux runner is ``experiments.wire.VirtualWire``)
and emits the live chain's spans with virtual times:

- each attempt opens the client's ``POST`` and the gate's ``gate.request``; the gate asks the
  lifecycle first (as the proxy does): not ready -> 503 with the answer table's Retry-After, the
  phase and reason on ``gate.request``, and the lifecycle wants a wake linked to that span;
- routed -> admission grant -> the engine of the routed URL accepts it (headers at once, closing
  both ``POST`` spans) -> first token -> finish (``llm_request``, release, ``request_finished``);
- the lifecycle's ``modelclaim.state`` / ``modelclaim.wake`` spans come from ``ModelClaimSpans``.

The deployment is set up first (``SetupDirector``: cold starts, the sleep, a neighbour placed);
lifecycle spans are recorded from t0 on, so the state intervals in progress at t0 appear whole
but the setup's own cold starts do not show up as wake episodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from restorelens.clock import VirtualClock
from restorelens.experiments.event_loop import EventLoop, TimeSource
from restorelens.experiments.modelclaim.deployment import SetupDirector, deployment_table
from restorelens.experiments.modelclaim.scenarios import ModelClaimScenario
from restorelens.experiments.providers import ServiceProviders
from restorelens.experiments.wire import Flight, VirtualWire
from restorelens.loadgen.request import RequestResult, RetryLoop, RunLabels
from restorelens.loadgen.retry import make_policy
from restorelens.loadgen.tracing import RequestSpan
from restorelens.loadgen.workloads import Arrival

__all__ = ["VirtualModelClaimRun", "modelclaim_client_request"]

#: Steps of the setup loop before giving up (a setup that never reaches its state is a bug).
MAX_SETUP_STEPS = 10_000


def modelclaim_client_request(scenario: ModelClaimScenario, arrival: Arrival, labels: RunLabels) -> Any:
    from restorelens.loadgen.prompts import filler_prompt
    from restorelens.loadgen.request import ClientRequest

    return ClientRequest(
        arrival.request_id, scenario.model, filler_prompt(arrival.prompt_chars, labels.seed or 0, arrival.request_id),
        arrival.max_tokens, traffic_class=arrival.traffic_class, stream=scenario.stream,
        arrival_phase=arrival.phase, labels=labels,
    )


@dataclass
class VirtualModelClaimRun(VirtualWire):
    scenario: ModelClaimScenario
    seed: int = 0
    providers: ServiceProviders = field(default_factory=ServiceProviders)
    run_id: str = ""
    results: list[RequestResult] = field(default_factory=list)

    def __post_init__(self) -> None:
        from restorelens.gate import Admission, GateSpans
        from restorelens.gate.modelclaim.backends import InProcessBackend
        from restorelens.gate.modelclaim.config import build_core
        from restorelens.gate.modelclaim.virtual import VirtualLifecycle

        self.clock = VirtualClock()
        self.table = deployment_table(self.scenario)
        self.core, _ = build_core(self.table)
        self.engines: dict[str, Any] = {}  # routed URL -> EngineCore
        self.backend = InProcessBackend(self._new_engine)
        self.lifecycle = VirtualLifecycle(self.core, self.backend, poll_interval_s=self.scenario.poll_interval_s)
        self.gate_spans = GateSpans(self.providers.gate, policy_name="fcfs")
        from restorelens.gate.settings import GateSettings

        settings = GateSettings(policy="fcfs", modelclaim=self.table)
        self.admission = Admission(settings.build_policy(), wait_timeout_s=settings.wait_timeout_s,
                                   queue_limit=settings.queue_limit, listeners=[self.gate_spans])
        self.policy = make_policy(self.scenario.retry_policy, max_attempts=self.scenario.max_attempts,
                                  deadline_s=self.scenario.deadline_s, seed=self.seed)
        self.labels = RunLabels(self.scenario.name, self.scenario.workload_name, self.seed, self.run_id)
        self._tracers(self.providers)
        self.loop = EventLoop(self.clock, [
            TimeSource("lifecycle", self.lifecycle.next_event_s, self.lifecycle.advance_to),
            TimeSource("engines", self._engines_next_s, self._engines_due),
        ])
        self.t0_s = self.clock.now_s()

    def _new_engine(self, model: str, pod: str) -> Any:
        from restorelens.sim import EngineCore, get_preset

        shape = next(c for c in self.scenario.claims if c.model == model)
        engine = EngineCore(get_preset(shape.preset), seed=self.seed, now_s=self.lifecycle.now_s)
        self.engines[self.backend.url_template.format(model=model, pod=pod)] = engine
        return engine

    # --- driving -------------------------------------------------------------------------------

    def run(self) -> list[RequestResult]:
        from restorelens.gate.modelclaim.spans import ModelClaimSpans

        self.t0_s = self._set_up()
        self.clock.advance_to(self.t0_s)
        self.core.listeners.append(ModelClaimSpans(self.providers.gate, core=self.core))
        if self.scenario.setup.model_state == "not-started":
            self.lifecycle.start(self.t0_s)
        for arrival in self.scenario.arrivals:
            self.loop.at(self.t0_s + arrival.at_s, lambda a=arrival: self._arrive(a))
        arrivals = len(self.scenario.arrivals)
        end_s = self.loop.run(stop=lambda: len(self.results) == arrivals)
        for action in self.core.shutdown(end_s):
            self.backend.perform_stop(action, end_s)  # type: ignore[arg-type]
        self.admission.close(end_s)
        self.gate_spans.flush(*self.admission.unfinished(), end_s)
        return self.results

    def _set_up(self) -> float:
        """Play the lifecycle alone from the virtual epoch until the scenario's state; returns t0."""
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

    def _attempt(self, arrival: Arrival, loop: RetryLoop, request_span: RequestSpan) -> None:
        from restorelens.gate import Grant
        from restorelens.gate.decide import Admit, Forward, Respond, decide
        from restorelens.gate.routing import NotReady

        now_s = self.clock.now_s()
        flight = self._open_attempt(arrival, loop, request_span, self.scenario.model)
        gate_span = flight.gate_span
        route = self.lifecycle.route(self.scenario.model, now_s, trigger=gate_span.get_span_context())
        options = {"model": self.scenario.model, "traffic_class": arrival.traffic_class,
                   "policy": self.admission.policy, "lifecycle": True}
        answer = decide(route, **options)
        if isinstance(answer, Respond):
            if isinstance(route, NotReady):
                self.gate_spans.not_ready(gate_span, route)
            self.gate_spans.end_request(gate_span, arrival.request_id, now_s, answer.status)
            self._answer(flight, answer.status, list(answer.headers))
            return
        assert isinstance(answer, Admit)
        admitted = self.admission.request(arrival.request_id, arrival.traffic_class, now_s)
        assert isinstance(admitted, Grant), "the fcfs policy without a cap grants at once"
        forward = decide(route, admitted, **options)
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
