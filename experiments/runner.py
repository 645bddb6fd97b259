"""Run a scenario in virtual time or live: the one place that picks the runner for a scenario's kind.

A MoFlux scenario (or a replay) plays through ``moflux.virtual`` / ``moflux.live``, a ModelClaim
wake scenario through ``modelclaim.virtual`` / ``modelclaim.live``; each returns a ``RunReport``
(``run_report``) and sends its spans to the run's providers (``run_telemetry.RunTelemetry``).
"""

from __future__ import annotations

import uuid
from typing import Any

from restorelens.experiments.providers import ServiceProviders
from restorelens.experiments.run_report import RunReport

__all__ = ["new_run_id", "run_live", "run_virtual"]


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def run_virtual(scenario: Any, seed: int, providers: ServiceProviders, run_id: str | None = None) -> RunReport:
    """Play ``scenario`` in virtual time; spans go to ``providers`` with virtual timestamps."""
    from restorelens.experiments.moflux.virtual import VirtualMofluxRun

    run_id = run_id or new_run_id()
    if scenario.kind == "modelclaim":
        return _run_virtual_modelclaim(scenario, seed, providers, run_id)
    run = VirtualMofluxRun(scenario, seed, providers, run_id)
    results = run.run()
    workload = run.workload
    return RunReport(scenario.name, scenario.arm, seed, "virtual", run_id, workload.duration_s,
                     tuple(sorted(results, key=lambda r: r.start_s)), workload.slo.ttft_s, workload.slo.e2e_s)


def run_live(scenario: Any, seed: int, providers: ServiceProviders, run_id: str | None = None, *,
             time_scale: float = 1.0) -> RunReport:
    """Play ``scenario`` against real servers on loopback (see ``moflux.live``, ``modelclaim.live``)."""
    from restorelens.experiments.moflux.live import run_live_moflux

    if scenario.kind == "modelclaim":
        from restorelens.experiments.modelclaim.live import run_live_modelclaim

        return run_live_modelclaim(scenario, seed, providers, run_id or new_run_id(), time_scale=time_scale)
    return run_live_moflux(scenario, seed, providers, run_id or new_run_id(), time_scale=time_scale)


def _run_virtual_modelclaim(scenario: Any, seed: int, providers: ServiceProviders, run_id: str) -> RunReport:
    from restorelens.experiments.modelclaim.virtual import VirtualModelClaimRun

    run = VirtualModelClaimRun(scenario, seed, providers, run_id)
    results = tuple(sorted(run.run(), key=lambda r: r.start_s))
    duration_s = max(r.end_s for r in results) - run.t0_s
    return RunReport(scenario.name, scenario.arm, seed, "virtual", run_id, duration_s, results, t0_s=run.t0_s)
