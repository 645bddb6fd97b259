"""``lend-priority``: ``lend`` plus ``extra_slots`` past the floors, in the engine's priority order."""

from __future__ import annotations

import pytest

from restorelens.gate.grants import Waiter
from restorelens.gate.policies.build import build_policy
from restorelens.gate.policies.priority_lend import PriorityLendPolicy

from .test_budget import FLOORS, Gate


def test_lend_priority_admits_up_to_extra_slots_of_any_class_past_the_floors() -> None:
    gate = Gate(PriorityLendPolicy(FLOORS, 2, extra_slots=2))
    for n in range(3):
        assert gate.arrive(f"i{n}", "interactive", 0).slot == "own"
    assert gate.arrive("b0", "batch", 0).slot == "own"  # floors full, interactive busy: nothing lent
    assert gate.arrive("b1", "batch", 1).slot == "own"
    assert gate.arrive("i3", "interactive", 2).slot == "own"
    assert isinstance(gate.arrive("b2", "batch", 3), Waiter)
    assert isinstance(gate.arrive("i4", "interactive", 3), Waiter)
    assert gate.admission.in_flight == sum(FLOORS.values()) + 2
    assert gate.finish("b1", 4) == ["i4"]  # an extra slot freed: interactive goes first


@pytest.mark.parametrize("extra_slots", [0, 1])
def test_lend_priority_never_runs_more_than_the_floors_plus_extra_slots(extra_slots: int) -> None:
    # Batch may not take the idle protected reserve as an extra slot: the returning interactive
    # request takes the reserve, on top of every extra slot.
    gate = Gate(PriorityLendPolicy(FLOORS, 2, extra_slots=extra_slots))
    for n in range(6):
        gate.arrive(f"b{n}", "batch", n)  # the batch floor, two loans, then extra slots
    gate.arrive("i1", "interactive", 6)  # the never-lent reserve
    assert gate.admission.in_flight <= sum(FLOORS.values()) + extra_slots


def test_lend_priority_asks_the_engine_to_run_interactive_before_batch() -> None:
    policy = build_policy("lend-priority", floors=FLOORS)
    assert isinstance(policy, PriorityLendPolicy)
    assert (policy.upstream_priority("interactive"), policy.upstream_priority("batch")) == (0, 10)
    for name in ("lend", "lend-budget", "lend-preempt"):  # nobody else touches the body
        assert build_policy(name, floors=FLOORS).upstream_priority("batch") is None
