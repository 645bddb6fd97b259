"""The policies with one shared cap for every class: ``fcfs``, and ``priority``, which also asks the
engine to prefer interactive (the MoFlux study's engine-side arms, run through the gate)."""

from __future__ import annotations

from typing import Any

from .interface import VLLM_PRIORITY, AdmissionPolicy, Occupancy, Slot
from .registry import DEFAULTS, check_option

__all__ = ["FcfsPolicy", "PriorityPolicy"]


class FcfsPolicy(AdmissionPolicy):
    """One shared cap for every class, first come first served (the gate adds no preference)."""

    name = "fcfs"
    shared_queue = True

    def __init__(self, capacity: int | None = DEFAULTS["capacity"]) -> None:
        self.capacity = check_option("capacity", capacity)

    def admit(self, traffic_class: str, occupancy: Occupancy) -> Slot | None:
        if self.capacity is None or occupancy.in_flight() < self.capacity:
            return "own"
        return None

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name, "capacity": self.capacity}


class PriorityPolicy(FcfsPolicy):
    """Pass-through that asks the engine to prefer interactive (vLLM ``priority`` 0 vs 10)."""

    name = "priority"

    def upstream_priority(self, traffic_class: str) -> int | None:
        return VLLM_PRIORITY.get(traffic_class)
