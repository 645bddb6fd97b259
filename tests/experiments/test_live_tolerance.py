"""``live_tolerance_s``: how far a live run's times may be from virtual time's, for both scenario kinds."""

from __future__ import annotations

import pytest

from restorelens.experiments.catalog import get_scenario
from restorelens.experiments.live_tolerance import LIVE_SLACK_ROUND_TRIPS
from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_SCENARIOS, expected_wake


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
