"""``LendPolicy.floor_restored_at`` for every control period the registry's check lets through."""

from __future__ import annotations

import math
import sys

import pytest

from restorelens.gate.policies.floors import LendPolicy
from restorelens.gate.policies.registry import MIN_CONTROL_PERIOD_S

LARGEST_S = sys.float_info.max


@pytest.mark.parametrize("period_s", [MIN_CONTROL_PERIOD_S, 0.25, 1.0, 1e308, LARGEST_S])
@pytest.mark.parametrize("returned_s", [0.0, 1.7e9, 1e306, LARGEST_S])
def test_the_floor_comes_back_at_or_after_the_return_and_the_arithmetic_never_overflows(period_s: float,
                                                                                       returned_s: float) -> None:
    # Before: the shortest accepted period over a clock of 1e306 s raised OverflowError (a 500).
    restored_s = LendPolicy(control_period_s=period_s).floor_restored_at(returned_s)
    assert restored_s >= returned_s and not math.isnan(restored_s)


def test_an_ordinary_period_still_restores_one_period_after_the_next_tick() -> None:
    assert LendPolicy(control_period_s=MIN_CONTROL_PERIOD_S).floor_restored_at(1.0) == pytest.approx(1.002)
    assert LendPolicy(control_period_s=0.25).floor_restored_at(10.1) == 10.5
