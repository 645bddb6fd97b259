from __future__ import annotations

import dataclasses

import pytest

from restorelens.errors import SettingError
from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_SCENARIOS, expected_wake
from restorelens.experiments.scenarios import LIVE_SLACK_ROUND_TRIPS, get_scenario


def test_live_tolerance_is_the_real_slack_or_the_measured_round_trips_times_the_scale() -> None:
    scenario = get_scenario("moflux-balanced")
    assert scenario.live_tolerance_s(4.0) == pytest.approx(0.3 * 4)
    assert scenario.live_tolerance_s(4.0, round_trip_s=0.001) == pytest.approx(0.3 * 4)  # an idle machine: the floor
    busy_round_trip_s = 0.02
    assert scenario.live_tolerance_s(4.0, round_trip_s=busy_round_trip_s) == pytest.approx(
        LIVE_SLACK_ROUND_TRIPS * busy_round_trip_s * 4)
    wake = expected_wake(MODELCLAIM_SCENARIOS["modelclaim-in-place"])
    assert wake.live_tolerance_s(1.0) == 1.0  # never below the lifecycle's poll grid
    assert wake.live_tolerance_s(5.0) == pytest.approx(wake.live_slack_real_s * 5)
    assert wake.live_tolerance_s(5.0, round_trip_s=busy_round_trip_s) == pytest.approx(
        LIVE_SLACK_ROUND_TRIPS * busy_round_trip_s * 5)


def test_a_slice_of_the_protocol_runs_from_its_start() -> None:
    scenario = dataclasses.replace(get_scenario("moflux-balanced", "static"), from_s=20.0, until_s=32.0)
    workload = scenario.workload(16)
    assert workload.duration_s == 12.0 and min(a.at_s for a in workload.arrivals) >= 0.0
    assert workload.arrivals == get_scenario("moflux-balanced").workload(16).between(20.0, 32.0).arrivals
    assert get_scenario("moflux-balanced").workload(3) == get_scenario("moflux-balanced").workload(3).between(0, 105)


def test_unknown_scenario_and_arm_name_the_setting() -> None:
    with pytest.raises(SettingError, match="SCENARIO"):
        get_scenario("nope")
    with pytest.raises(SettingError, match="--arm"):
        get_scenario("moflux-balanced", "greedy")


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
