"""Every named scenario, MoFlux and ModelClaim: what ``restorelens run SCENARIO`` looks names up in."""

from __future__ import annotations

from typing import Any

from restorelens.errors import SettingError
from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_SCENARIOS
from restorelens.experiments.moflux.scenarios import SCENARIOS

__all__ = ["get_scenario", "scenario_names"]


def scenario_names() -> list[str]:
    return sorted(SCENARIOS) + list(MODELCLAIM_SCENARIOS)


def get_scenario(name: str, arm: str | None = None) -> Any:
    """A MoFlux scenario (with its arm) or a ModelClaim wake scenario, by name."""
    if name in MODELCLAIM_SCENARIOS:
        return MODELCLAIM_SCENARIOS[name].with_arm(arm)
    scenario = SCENARIOS.get(name)
    if scenario is None:
        raise SettingError("SCENARIO", f"unknown scenario {name!r}; choose one of {', '.join(scenario_names())}")
    return scenario.with_arm(arm)
