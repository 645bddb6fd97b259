"""The MoFlux scenario live: the simulator and the gate on loopback, the traced client driving them.

Real servers (``restorelens.serving.ServerThread``), real HTTP. ``time_scale`` X compresses the
run: the client and the gate read a ``ScaledClock`` (X times faster than the wall), so arrivals
come X times sooner in real time while the gate's queue timeout and Retry-After estimates stay in
protocol seconds; the simulator divides every modelled duration by X. A 105-s protocol takes
~105/X real seconds and each request meets the same relative timing.

Every span lands on the protocol timeline (``protocol_time.ProtocolTimeline``, as in the
ModelClaim live runner): client and gate stamp the scaled clock, the simulator's and the httpx
instrumentation's wall-stamped spans are mapped onto it. So request latencies, lending episodes
and the policy summary of a live run read in protocol seconds at any scale, comparable with the
virtual run of the same scenario; what remains is the real loopback round trips, magnified X times.
"""

from __future__ import annotations

import asyncio
from typing import Any

from restorelens.clock import ScaledClock
from restorelens.experiments.protocol_time import ProtocolTimeline
from restorelens.experiments.providers import ServiceProviders
from restorelens.experiments.run_report import RunReport
from restorelens.loadgen import RequestResult, RunLabels, TracedClient, make_policy

__all__ = ["run_live_moflux"]


async def _drive(url: str, scenario: Any, workload: Any, labels: RunLabels, providers: ServiceProviders,
                 clock: ScaledClock) -> list[RequestResult]:
    policy = make_policy(scenario.retry_policy, max_attempts=scenario.max_attempts, seed=labels.seed or 0)
    async with TracedClient(url, policy=policy, tracer_provider=providers.client, clock=clock,
                            sleep=clock.sleep) as client:
        t0_s = clock.now_s()

        async def one(at_s: float, request: Any) -> RequestResult:
            await clock.sleep(t0_s + at_s - clock.now_s())
            return await client.request(request)

        requests = workload.requests(labels, stream=scenario.stream, priority=scenario.client_priority)
        tasks = [one(at_s, request) for at_s, request in requests]
        return list(await asyncio.gather(*tasks))


def run_live_moflux(scenario: Any, seed: int, providers: ServiceProviders, run_id: str, *,
                    time_scale: float = 1.0) -> RunReport:
    from restorelens.gate import create_gate_app
    from restorelens.serving import ServerThread
    from restorelens.sim import create_app

    workload = scenario.workload(seed)
    labels = RunLabels(scenario.name, workload.name, seed, run_id, policy=scenario.arm)
    # closed after the servers stopped: the gate emits its lending periods on shutdown
    with ProtocolTimeline(providers, time_scale) as timeline:
        engine_app = create_app(scenario.engine_config(seed), model_name=workload.model,
                                tracer_provider=timeline.providers.engine, time_scale=time_scale, seed=seed)
        with ServerThread(engine_app) as engine:
            if scenario.direct:  # the study's vllm-fcfs / vllm-priority arms: no gate on the way
                results = asyncio.run(_drive(engine.url, scenario, workload, labels, timeline.providers,
                                             timeline.clock))
            else:
                settings = scenario.gate_settings(engine.url, workload.model)
                gate_app = create_gate_app(settings, tracer_provider=timeline.providers.gate, clock=timeline.clock)
                scenario.adjust_policy(gate_app.state.admission.policy)
                with ServerThread(gate_app) as gate:
                    results = asyncio.run(_drive(gate.url, scenario, workload, labels, timeline.providers,
                                                 timeline.clock))
    return RunReport(scenario.name, scenario.arm, seed, "live", run_id, workload.duration_s,
                     tuple(sorted(results, key=lambda r: r.start_s)), workload.slo.ttft_s, workload.slo.e2e_s,
                     time_scale=time_scale)
