"""The MoFlux scenarios (``experiments.moflux.scenarios``): a slice of the protocol."""

from __future__ import annotations

import dataclasses

from restorelens.experiments.catalog import get_scenario


def test_a_slice_of_the_protocol_runs_from_its_start() -> None:
    scenario = dataclasses.replace(get_scenario("moflux-balanced", "static"), from_s=20.0, until_s=32.0)
    workload = scenario.workload(16)
    assert workload.duration_s == 12.0 and min(a.at_s for a in workload.arrivals) >= 0.0
    assert workload.arrivals == get_scenario("moflux-balanced").workload(16).between(20.0, 32.0).arrivals
    assert get_scenario("moflux-balanced").workload(3) == get_scenario("moflux-balanced").workload(3).between(0, 105)
