"""Every named scenario by name (``experiments.catalog``)."""

from __future__ import annotations

import pytest

from restorelens.errors import SettingError
from restorelens.experiments.catalog import get_scenario, scenario_names
from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_SCENARIOS
from restorelens.experiments.moflux.scenarios import SCENARIOS


def test_unknown_scenario_and_arm_name_the_setting() -> None:
    with pytest.raises(SettingError, match="SCENARIO"):
        get_scenario("nope")
    with pytest.raises(SettingError, match="--arm"):
        get_scenario("moflux-balanced", "greedy")


def test_every_scenario_of_both_kinds_is_found_by_its_name() -> None:
    names = scenario_names()
    assert sorted(names) == sorted([*SCENARIOS, *MODELCLAIM_SCENARIOS])
    assert [get_scenario(name).kind for name in names] == ["moflux"] * len(SCENARIOS) + ["modelclaim"] * len(
        MODELCLAIM_SCENARIOS)
    assert all(get_scenario(name).name == name for name in names)


def test_run_and_experiment_help_list_every_arm_the_registry_accepts() -> None:
    from click.testing import CliRunner

    from restorelens.cli import cli
    from restorelens.gate import POLICIES, arm_names

    shown = {command: " ".join(CliRunner().invoke(cli, [command, "--help"], terminal_width=200).output.split())
             for command in ("run", "experiment")}
    for name in arm_names():
        assert name in shown["run"], name
        assert get_scenario("moflux-balanced", name).gate_policy in POLICIES  # and --arm accepts it
    for name in POLICIES:
        assert name in shown["experiment"], name
    assert "[default: 1.0]" in shown["experiment"]  # --restore-budget-s, the registry's default
