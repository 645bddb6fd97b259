"""A ModelClaim wake scenario live: gate + lifecycle router + simulated engines on loopback.

Real servers (``ServerThread``), real HTTP, the real lifecycle router: ``create_gate_app(settings,
router=ModelClaimRouter(core, backend))`` with the core built from the scenario's ``[modelclaim]``
table. The backend is ``SimServerBackend``: the vLLM sleep-API backend (``/sleep``, ``/wake_up``,
``/is_sleeping``, ``/health``) over simulator servers that it starts on demand, cold (``/health``
answers 503 until the modelled cold start is over), so starts and moves load a new engine as a
process backend would, without a Python start-up per engine. The setup (sleep the model, let a
neighbour take its room) goes through ``GET /modelclaim/status`` and the bearer-token control
endpoint; the client is the ``TracedClient``.

Cycles: each of the scenario's ``cycles`` starts a new gate, lifecycle router and engines (a
restarted gate), sets the deployment up and plays the requests; the routers share one
``calibration_path`` file (in a temporary folder of the run), so a calibrated lifecycle reads what
the previous cycles learnt, as a restarted gate does.

Time: ``time_scale`` X runs everything X times faster. Client, gate and lifecycle share a
``ScaledClock``, so their spans, the Retry-After they exchange (10 s waits 10/X real seconds) and
the lifecycle's stamps are protocol seconds. The simulator divides its modelled durations by X
and stamps wall time, and so does the httpx instrumentation (each ``POST`` attempt span); those
spans are mapped back to protocol time (``protocol_time.ProtocolTimeline``, shared with the MoFlux
live runner) so every service's spans share one timeline and the analysis decomposes them as in
virtual time.
"""

from __future__ import annotations

import asyncio
import secrets
import tempfile
from pathlib import Path
from typing import Any

import httpx

from restorelens.clock import ScaledClock
from restorelens.errors import RestorelensError
from restorelens.experiments.modelclaim.deployment import SetupDirector, deployment_table
from restorelens.experiments.modelclaim.scenarios import ModelClaimScenario
from restorelens.experiments.protocol_time import ProtocolTimeline
from restorelens.experiments.providers import ServiceProviders
from restorelens.experiments.run_report import RunReport
from restorelens.gate.modelclaim import EngineAnswer, StartEngine, StopEngine, VllmSleepBackend, poll_health
from restorelens.loadgen import RequestResult, RunLabels, make_policy

__all__ = ["DeferredStartRouter", "SimServerBackend", "run_live_modelclaim"]

#: Real seconds between status polls during the setup.
STATUS_POLL_S = 0.02
#: Protocol seconds the setup may take before the run is abandoned.
SETUP_LIMIT_S = 900.0


class SimServerBackend(VllmSleepBackend):
    """Starts one simulator server per engine instance, cold; sleep and wake over its HTTP API."""

    def __init__(self, scenario: ModelClaimScenario, *, clock: ScaledClock, tracer_provider: Any, seed: int = 0) -> None:
        super().__init__({}, clock=clock, poll_interval_s=scenario.poll_interval_s / clock.time_scale)
        self.scenario, self.tracer_provider, self.seed = scenario, tracer_provider, seed
        self._servers: dict[tuple[str, int], Any] = {}

    async def start(self, action: StartEngine, now_s: float) -> EngineAnswer:
        from restorelens.serving import ServerThread
        from restorelens.sim import create_app

        shape = next(c for c in self.scenario.claims if c.model == action.model)
        polls = self.start_polls(action.model)  # the start is called now: the server's start is part of it
        app = create_app(shape.preset, model_name=action.model, tracer_provider=self.tracer_provider,
                         time_scale=self.clock.time_scale, enable_sleep_mode=True,  # type: ignore[attr-defined]
                         start_mode="cold", seed=self.seed)
        server = await asyncio.to_thread(ServerThread(app).start)
        key = (action.model, action.instance_id)
        self._servers[key] = server
        self._instances[key] = server.url
        ready_at_s = await poll_health(self.client, server.url, self.clock, interval_s=self.poll_interval_s,
                                       timeout_s=self.start_timeout_s, polls=polls)
        return EngineAnswer(ready_at_s, server.url)

    async def stop(self, action: StopEngine, now_s: float) -> None:
        server = self._servers.pop((action.model, action.instance_id), None)
        if server is not None:
            await asyncio.to_thread(server.stop)
        await super().stop(action, now_s)

    async def close(self) -> None:
        for key in list(self._servers):
            await asyncio.to_thread(self._servers.pop(key).stop)
        await super().close()


class DeferredStartRouter:
    """The lifecycle router with its start (placing and starting engines) put off until ``begin()``.

    The gate's lifespan calls ``start()``, which only notes the gate's event loop; ``begin()``,
    called from the driving thread, starts the lifecycle on that loop. So a cold-start scenario's
    engine starts right before the first request instead of when the gate's server came up.
    Everything else is the wrapped router's.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._loop: asyncio.AbstractEventLoop | None = None
        self._begun = False

    def models(self) -> Any:
        return self.inner.models()

    def route(self, model: str, now_s: float, trigger: Any = None, retries_taken: int | None = None) -> Any:
        return self.inner.route(model, now_s, trigger, retries_taken)

    def request_started(self, model: str, now_s: float) -> None:
        self.inner.request_started(model, now_s)

    def request_finished(self, model: str, now_s: float) -> None:
        self.inner.request_finished(model, now_s)

    async def wait_routable(self, model: str, timeout_s: float) -> bool:
        return await self.inner.wait_routable(model, timeout_s)

    def register_metrics(self, registry: Any) -> None:
        self.inner.register_metrics(registry)

    def routes(self) -> Any:
        return self.inner.routes()

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        if self._begun:
            await self.inner.stop()

    def begin(self, timeout_s: float = 10.0) -> None:
        if self._loop is None:
            raise RestorelensError("the gate has not started: its lifespan did not run")
        asyncio.run_coroutine_threadsafe(self.inner.start(), self._loop).result(timeout_s)
        self._begun = True


async def _set_up(gate_url: str, token: str, scenario: ModelClaimScenario, clock: ScaledClock,
                  begin: Any) -> float:
    """Start the lifecycle (``begin``) and bring the deployment into the scenario's state through
    the gate's endpoints; returns t0."""
    director = SetupDirector(scenario)
    async with httpx.AsyncClient(base_url=gate_url, timeout=10.0) as http:

        async def observe() -> None:
            status = (await http.get("/modelclaim/status")).json()
            director.observe({m["model"]: (m["phase"], m["since_s"]) for m in status["models"]}, clock.now_s())

        # The first status read, before the lifecycle starts, opens the connection and runs the
        # gate's cold code paths; a scenario that starts with the lifecycle (cold start) takes t0
        # from it. Read after the start instead, its real cost (magnified X times on a busy
        # machine: up to seconds) would pass between the engine's start and the first request.
        await observe()
        await asyncio.to_thread(begin)
        limit_s = clock.now_s() + SETUP_LIMIT_S
        while (t0_s := director.t0_s()) is None:
            if clock.now_s() > limit_s:
                raise RestorelensError(f"{scenario.name}: the deployment did not reach its starting state")
            await asyncio.sleep(STATUS_POLL_S)
            await observe()
            due_s = director.sleep_due_s()
            if due_s is not None and clock.now_s() >= due_s:
                answer = await http.post(f"/modelclaim/models/{scenario.model}/sleep",
                                         headers={"authorization": f"Bearer {token}"})
                if answer.status_code != 202:
                    raise RestorelensError(f"{scenario.name}: sleeping {scenario.model} answered {answer.status_code}")
                director.sleep_sent = True
    await clock.sleep(t0_s - clock.now_s())
    return t0_s


async def _play(gate: Any, router: DeferredStartRouter, token: str, scenario: ModelClaimScenario, cycle: int,
                labels: RunLabels, providers: ServiceProviders, clock: ScaledClock, on_t0: Any,
                started: list[Any]) -> tuple[float, list[RequestResult]]:
    """Start the gate, set the deployment up, then send the cycle's requests; returns t0 and results.

    The client exists before the gate starts, so a scenario that starts with the lifecycle
    (cold start) sends its first request right after the gate's lifespan started the lifecycle.
    """
    from restorelens.experiments.modelclaim.virtual import modelclaim_client_request
    from restorelens.loadgen import TracedClient

    policy = make_policy(scenario.retry_policy, max_attempts=scenario.max_attempts, deadline_s=scenario.deadline_s,
                         seed=labels.seed or 0)
    async with TracedClient(gate.url, policy=policy, tracer_provider=providers.client, clock=clock,
                            sleep=clock.sleep) as client:
        await asyncio.to_thread(gate.start)
        started.append(gate)
        t0_s = await _set_up(gate.url, token, scenario, clock, router.begin)
        on_t0()

        async def one(arrival: Any) -> RequestResult:
            await clock.sleep(t0_s + arrival.at_s - clock.now_s())
            return await client.request(modelclaim_client_request(scenario, arrival, labels))

        return t0_s, list(await asyncio.gather(*(one(a) for a in scenario.arrivals_of(cycle))))


def _play_cycle(scenario: ModelClaimScenario, cycle: int, seed: int, providers: ServiceProviders, clock: ScaledClock,
                labels: RunLabels, calibration_path: Path) -> tuple[float, list[RequestResult]]:
    """One sleep -> wake cycle on a fresh gate, lifecycle router and engines; returns its t0 and results."""
    from restorelens.gate import GateSettings, create_gate_app
    from restorelens.gate.modelclaim import ModelClaimRouter, ModelClaimSpans, build_core, load_calibration
    from restorelens.serving import ServerThread

    table = deployment_table(scenario, calibration_path)
    token = secrets.token_urlsafe(24)
    core, _ = build_core(table)
    load_calibration(core, calibration_path)  # what the previous cycles' gates learnt, as a restarted gate reads it
    backend = SimServerBackend(scenario, clock=clock, tracer_provider=providers.engine, seed=seed)
    router = DeferredStartRouter(ModelClaimRouter(core, backend, clock=clock, tracer_provider=providers.gate,
                                                  admin_token=token, calibration_path=calibration_path))
    # Lifecycle spans are recorded from t0 on (as in virtual time): the setup's own cold starts are
    # the deployment's history, not wake episodes of the scenario.
    spans = [listener for listener in core.listeners if isinstance(listener, ModelClaimSpans)]
    for listener in spans:
        listener.core = core
        core.listeners.remove(listener)
    settings = GateSettings(policy="fcfs", modelclaim=table, admin_token=token)
    gate = ServerThread(create_gate_app(settings, tracer_provider=providers.gate, router=router, clock=clock))
    started: list[Any] = []
    try:
        return asyncio.run(_play(gate, router, token, scenario, cycle, labels, providers, clock,
                                 lambda: core.listeners.extend(spans), started))
    finally:
        for server in started:
            server.stop()  # the lifespan stops the router, which stops every engine it started


def run_live_modelclaim(scenario: ModelClaimScenario, seed: int, providers: ServiceProviders, run_id: str, *,
                        time_scale: float = 1.0) -> RunReport:
    timeline = ProtocolTimeline(providers, time_scale)
    clock, providers = timeline.clock, timeline.providers
    labels = RunLabels(scenario.name, scenario.workload_name, seed, run_id)
    t0s: list[float] = []
    results: list[RequestResult] = []
    try:
        with tempfile.TemporaryDirectory(prefix="restorelens-wakes-") as folder:
            calibration_path = Path(folder) / "calibration.json"
            for cycle in range(1, scenario.cycles + 1):
                t0_s, played = _play_cycle(scenario, cycle, seed, providers, clock, labels, calibration_path)
                t0s.append(t0_s)
                results += played
    finally:
        timeline.close()
    ordered = tuple(sorted(results, key=lambda r: r.start_s))
    return RunReport(scenario.name, scenario.arm, seed, "live", run_id, max(r.end_s for r in ordered) - t0s[0],
                     ordered, time_scale=time_scale, t0_s=t0s[0])
