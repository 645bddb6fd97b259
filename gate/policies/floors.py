"""The policies with a floor of slots per class: ``static`` (capacity never shared) and ``lend``,
the MoFlux study's lender, which lends part of the protected floor to batch while it is idle."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .interface import BATCH, INTERACTIVE, AdmissionPolicy, Occupancy, Slot
from .registry import DEFAULTS, check_lendable, check_option

__all__ = ["LendPolicy", "StaticPolicy"]


class StaticPolicy(AdmissionPolicy):
    """Fixed per-class floors; capacity is never shared."""

    name = "static"

    def __init__(self, floors: Mapping[str, int] | None = None) -> None:
        self.floors = dict(check_option("floors", DEFAULTS["floors"] if floors is None else floors))

    def admit(self, traffic_class: str, occupancy: Occupancy) -> Slot | None:
        if occupancy.in_flight(traffic_class) < self.floors.get(traffic_class, 0):
            return "own"
        return None

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "floors": dict(self.floors)}


class LendPolicy(StaticPolicy):
    """MoFlux lending: static floors, plus ``lendable_slots`` of the protected floor lent to batch.

    Batch may borrow only while the protected class is idle (nothing in flight, nothing queued);
    borrowed slots count against the protected floor, so when protected demand returns it gets the
    never-lent reserve at once and the lent slots back only as borrowed work finishes (no preemption).
    Lending resumes as soon as the protected class is idle again, even before the last loan drained.

    With ``control_period_s`` > 0 the floor is restored as a controller loop restores it (MoFlux's
    grant revisions): the revision is issued at the controller's first tick after demand returned
    and takes effect one period later. Until then the floor stays lowered and batch may still
    borrow; the floor's restoration is what ``grant_restored`` records.
    """

    name = "lend"

    def __init__(
        self,
        floors: Mapping[str, int] | None = None,
        lendable_slots: int = DEFAULTS["lendable_slots"],
        protected_class: str = INTERACTIVE,
        borrower_class: str = BATCH,
        control_period_s: float = DEFAULTS["control_period_s"],
    ) -> None:
        super().__init__(floors)
        self.control_period_s = check_option("control_period_s", control_period_s)
        check_lendable(self.floors, lendable_slots, protected_class)
        self.lendable_slots = lendable_slots
        self.protected_class = protected_class
        self.borrower_class = borrower_class

    def admit(self, traffic_class: str, occupancy: Occupancy) -> Slot | None:
        protected = self.protected_class
        protected_used = occupancy.in_flight(protected) + occupancy.borrowed
        protected_floor = self.floors.get(protected, 0)
        if traffic_class == protected:
            return "own" if protected_used < protected_floor else None
        if occupancy.in_flight(traffic_class) < self.floors.get(traffic_class, 0):
            return "own"
        if (
            traffic_class == self.borrower_class
            and (occupancy.idle(protected) or occupancy.floor_lowered)
            and occupancy.borrowed < self.lendable_slots
            and protected_used < protected_floor
        ):
            return "borrowed"
        return None

    def describe(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "floors": dict(self.floors),
            "lendable_slots": self.lendable_slots,
            "protected_class": self.protected_class,
            "control_period_s": self.control_period_s,
        }

    def floor_restored_at(self, returned_s: float) -> float:
        period = self.control_period_s
        if period == 0:
            return returned_s
        ticks = returned_s / period
        if not math.isfinite(ticks):
            # A period too short beside the clock's reading to count ticks in a float: the next tick is now.
            return returned_s
        issued_s = (math.floor(ticks) + 1) * period  # the next tick strictly after the return
        return issued_s + period  # may be infinite with a period near the float's largest: never restored
