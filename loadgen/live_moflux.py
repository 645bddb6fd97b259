"""The MoFlux scenario live: the simulator and the gate on loopback, the traced client driving them.

Real servers (``restorelens.serving.ServerThread``), real HTTP, real time. ``time_scale`` X
compresses the run: arrivals come X times sooner, the simulator divides every modelled duration by
X and the gate's queue timeout shrinks with them, so a 105-s protocol takes ~105/X s and each
request meets the same relative timing. Span times are real (compressed) times.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from restorelens.loadgen.client import TracedClient
from restorelens.loadgen.request import RequestResult, RunLabels
from restorelens.loadgen.retry import make_policy
from restorelens.loadgen.virtual_moflux import ServiceProviders

__all__ = ["run_live_moflux"]


async def _drive(gate_url: str, scenario: Any, workload: Any, labels: RunLabels, providers: ServiceProviders,
                 time_scale: float) -> list[RequestResult]:
    policy = make_policy(scenario.retry_policy, max_attempts=scenario.max_attempts, seed=labels.seed or 0)
    async with TracedClient(gate_url, policy=policy, tracer_provider=providers.client) as client:
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def one(at_s: float, request: Any) -> RequestResult:
            await asyncio.sleep(max(0.0, start + at_s / time_scale - loop.time()))
            return await client.request(request)

        tasks = [one(at_s, request) for at_s, request in workload.requests(labels, stream=scenario.stream)]
        return list(await asyncio.gather(*tasks))


def run_live_moflux(scenario: Any, seed: int, providers: ServiceProviders, run_id: str, *,
                    time_scale: float = 1.0) -> Any:
    from restorelens.gate.app import create_gate_app
    from restorelens.loadgen.runner import RunReport
    from restorelens.serving import ServerThread
    from restorelens.sim.app import create_app

    workload = scenario.workload(seed)
    labels = RunLabels(scenario.name, workload.name, seed, run_id)
    engine_app = create_app(scenario.engine_config(seed), model_name=workload.model, tracer_provider=providers.engine,
                            time_scale=time_scale, seed=seed)
    with ServerThread(engine_app) as engine:
        settings = scenario.gate_settings(engine.url, workload.model)
        settings = dataclasses.replace(settings, wait_timeout_s=settings.wait_timeout_s / time_scale)
        with ServerThread(create_gate_app(settings, tracer_provider=providers.gate)) as gate:
            results = asyncio.run(_drive(gate.url, scenario, workload, labels, providers, time_scale))
    return RunReport(scenario.name, scenario.arm, seed, "live", run_id, workload.duration_s,
                     tuple(sorted(results, key=lambda r: r.start_s)), workload.slo.ttft_s, workload.slo.e2e_s,
                     time_scale=time_scale)
