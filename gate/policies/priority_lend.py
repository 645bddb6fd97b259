"""``lend-priority``: ``lend`` plus requests past the floors, for the engine's priority scheduler to order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .floors import LendPolicy
from .interface import VLLM_PRIORITY, Occupancy, Slot
from .registry import DEFAULTS, check_option

__all__ = ["PriorityLendPolicy"]


class PriorityLendPolicy(LendPolicy):
    """``lend-priority``: ``lend`` plus ``extra_slots`` past the floors, ordered by the engine.

    The study's second question: a gate whose bounds are tight leaves the engine's queue empty, so
    the engine's own priority scheduling never acts. Here up to ``extra_slots`` requests of any class
    beyond what ``lend`` admits go to the engine with vLLM priorities (interactive 0, batch 10),
    which must run with ``--scheduling-policy priority``.
    """

    name = "lend-priority"

    def __init__(self, floors: Mapping[str, int] | None = None, lendable_slots: int = DEFAULTS["lendable_slots"], *,
                 control_period_s: float = DEFAULTS["control_period_s"],
                 extra_slots: int = DEFAULTS["extra_slots"]) -> None:
        super().__init__(floors, lendable_slots, control_period_s=control_period_s)
        self.extra_slots = check_option("extra_slots", extra_slots)

    def admit(self, traffic_class: str, occupancy: Occupancy) -> Slot | None:
        slot = super().admit(traffic_class, occupancy)
        if slot is not None:
            return slot
        return "own" if self.extra_in_use(occupancy) < self.extra_slots else None

    def extra_in_use(self, occupancy: Occupancy) -> int:
        """Requests in flight past what ``lend`` admits: each class beyond its floor, loans counted
        on the protected floor, so the never-lent reserve is never handed out as an extra slot."""
        protected = self.protected_class
        over = max(0, occupancy.in_flight(protected) + occupancy.borrowed - self.floors.get(protected, 0))
        for traffic_class, floor in self.floors.items():
            if traffic_class != protected:
                over += max(0, occupancy.in_flight(traffic_class) - floor)
        return over

    def upstream_priority(self, traffic_class: str) -> int | None:
        return VLLM_PRIORITY.get(traffic_class)

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described.update(policy=self.name, extra_slots=self.extra_slots)
        return described
