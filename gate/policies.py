"""Admission policies: given who is in flight and who waits, may one more request of a class start?

A policy decides over an ``Occupancy`` snapshot (counts, the time, the asking request's size) and
reads no clock, so the same policy object runs behind the live proxy and in virtual time. The
``Admission`` core does the bookkeeping (queues, grants, lending records) and tells the policy what
happened through the ``observe_*`` hooks, with explicit times: the study's policies here ignore
them; the budget-aware lenders (``gate/lenders.py``) learn from them. New policies subclass
``AdmissionPolicy`` and register in ``POLICIES``; the proxy never changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from restorelens.errors import SettingError
from restorelens.spans import TRAFFIC_CLASSES

__all__ = [
    "BATCH",
    "INTERACTIVE",
    "POLICIES",
    "AdmissionPolicy",
    "FcfsPolicy",
    "LendPolicy",
    "Occupancy",
    "PriorityPolicy",
    "RequestSize",
    "Slot",
    "StaticPolicy",
    "build_policy",
]

INTERACTIVE, BATCH = TRAFFIC_CLASSES
Slot = Literal["own", "borrowed"]

#: vLLM's ``priority`` request field: lower runs first (the MoFlux "vllm-priority" arm).
VLLM_PRIORITY = {INTERACTIVE: 0, BATCH: 10}
DEFAULT_FLOORS = {INTERACTIVE: 3, BATCH: 1}


@dataclass(frozen=True, slots=True)
class RequestSize:
    """What the gate knows of a request's size before it runs: the prompt's tokens (estimated from
    its characters: the gate has no tokenizer) and ``max_tokens``. Zero: unknown."""

    prompt_tokens: int = 0
    max_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Occupancy:
    """What the core holds at one instant: requests in flight (own slots), borrowed, and queued."""

    own: Mapping[str, int]
    borrowed: int
    queued: Mapping[str, int]
    #: The protected floor is still lent out: demand returned, but the lending policy's revision
    #: that restores the floor has not taken effect yet (a control period; never with period 0).
    floor_lowered: bool = False
    #: The core's time of the decision, and the size of the request asking (None: not known).
    now_s: float = 0.0
    size: RequestSize | None = None

    def in_flight(self, traffic_class: str | None = None) -> int:
        if traffic_class is None:
            return sum(self.own.values()) + self.borrowed
        return self.own.get(traffic_class, 0)

    def idle(self, traffic_class: str) -> bool:
        """No request of the class is in flight or waiting: its demand is absent."""
        return self.own.get(traffic_class, 0) == 0 and self.queued.get(traffic_class, 0) == 0


class AdmissionPolicy:
    """Base policy: admit everything on own capacity, serve queues in arrival order.

    Subclasses override ``admit``. ``protected_class`` names the class whose capacity may be lent
    (None: the policy never lends, so no lending or restoration records exist).
    """

    name = "base"
    protected_class: str | None = None
    lendable_slots = 0
    #: True: one FIFO across classes (a waiting request of any class blocks newcomers of every class).
    shared_queue = False
    #: Seconds between the lending controller's decisions; 0: it decides at every request.
    control_period_s = 0.0
    #: What a loan may cost to give back, in seconds (None: the policy keeps no budget).
    restore_budget_s: float | None = None
    #: Seconds a request of a class may wait in the gate's queue for a grant, in place of the
    #: gate's ``wait_timeout_s`` for that class (the lenders' queues); empty: the gate's timeout holds.
    class_wait_s: Mapping[str, float] = {}

    def floor_restored_at(self, returned_s: float) -> float:
        """When the protected floor is back at its nominal size, for demand returning at ``returned_s``."""
        return returned_s

    def admit(self, traffic_class: str, occupancy: Occupancy) -> Slot | None:
        return "own"

    def upstream_priority(self, traffic_class: str) -> int | None:
        """A vLLM ``priority`` to set on the forwarded body, or None to leave the body alone."""
        return None

    def describe(self) -> dict[str, Any]:
        return {"policy": self.name}

    # --- what the core tells a policy (no-ops for the study's policies) -------------------------

    def observe_arrival(self, traffic_class: str, size: RequestSize, now_s: float) -> None:
        """A request of ``traffic_class`` arrived (first, before any decision on it)."""

    def observe_return(self, now_s: float) -> None:
        """Protected demand returned (the class was idle)."""

    def observe_grant(self, grant_id: int, traffic_class: str, slot: Slot, size: RequestSize, now_s: float) -> None:
        """A request was granted a slot."""

    def observe_first_byte(self, grant_id: int, now_s: float) -> None:
        """The granted request's first response byte came back from the engine."""

    def observe_tokens(self, grant_id: int, tokens: int, now_s: float) -> None:
        """``tokens`` more output tokens of the granted request passed the gate (streamed answers)."""

    def observe_release(self, grant_id: int, occupancy: Occupancy, now_s: float, *, completed: bool = True) -> None:
        """The granted request finished (``completed`` False: it failed or was taken back)."""

    def refusal(self, traffic_class: str, occupancy: Occupancy) -> Any:
        """Why a loan the request asked for was refused (a ``lenders.LoanCheck``), or None."""
        return None

    def resumed(self, now_s: float) -> Any:
        """The resume decision to record when a loan is granted after demand returned, or None."""
        return None

    def next_decision_s(self, now_s: float) -> float | None:
        """A time after ``now_s`` when the policy may admit what it refuses now with nothing else
        happening (a hold-off ending), for the core to re-decide its queues then; None: none."""
        return None

    def preemptions(self, now_s: float) -> list[Any]:
        """Loans to take back now that the protected floor is restored (``lenders.Preemption``)."""
        return []


class FcfsPolicy(AdmissionPolicy):
    """One shared cap for every class, first come first served (the gate adds no preference)."""

    name = "fcfs"
    shared_queue = True

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity

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


class StaticPolicy(AdmissionPolicy):
    """Fixed per-class floors; capacity is never shared."""

    name = "static"

    def __init__(self, floors: Mapping[str, int] | None = None) -> None:
        self.floors = dict(DEFAULT_FLOORS if floors is None else floors)

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
        lendable_slots: int = 2,
        protected_class: str = INTERACTIVE,
        borrower_class: str = BATCH,
        control_period_s: float = 0.0,
    ) -> None:
        super().__init__(floors)
        if not (math.isfinite(control_period_s) and control_period_s >= 0):
            raise SettingError("gate.control_period_s", f"must be a finite number of seconds >= 0, got {control_period_s}")
        self.control_period_s = control_period_s
        protected_floor = self.floors.get(protected_class, 0)
        if lendable_slots < 0 or lendable_slots > protected_floor - 1:
            raise SettingError(
                "gate.lendable_slots",
                f"{lendable_slots} slots cannot be lent: must be between 0 and the {protected_class} "
                f"floor minus one ({protected_floor - 1}), since at least one protected slot is never lent",
            )
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
        issued_s = (math.floor(returned_s / period) + 1) * period  # the next tick strictly after the return
        return issued_s + period


@dataclass(frozen=True, slots=True)
class _PolicyMaker:
    make: Callable[..., AdmissionPolicy]
    options: frozenset[str] = field(default_factory=frozenset)


def _lenders() -> Any:
    from . import lenders  # lenders subclass LendPolicy: imported on first use, not at module load

    return lenders


_BUDGET_OPTIONS = frozenset({"floors", "lendable_slots", "control_period_s", "restore_budget_s", "kv_blocks",
                             "block_size", "protected_wait_s", "borrower_wait_s"})


def _budget_lender(kind: str, floors: Mapping[str, int] | None = None, lendable_slots: int = 2,
                   control_period_s: float = 0.0, restore_budget_s: float | None = None, kv_blocks: int | None = None,
                   block_size: int = 16, protected_wait_s: float = 2.0, borrower_wait_s: float = 120.0,
                   **_: Any) -> AdmissionPolicy:
    lenders = _lenders()
    return getattr(lenders, kind)(
        floors, lendable_slots, control_period_s=control_period_s, kv_blocks=kv_blocks, block_size=block_size,
        restore_budget_s=lenders.DEFAULT_RESTORE_BUDGET_S if restore_budget_s is None else restore_budget_s,
        protected_wait_s=protected_wait_s, borrower_wait_s=borrower_wait_s)

POLICIES: dict[str, _PolicyMaker] = {
    "fcfs": _PolicyMaker(lambda capacity=None, **_: FcfsPolicy(capacity), frozenset({"capacity"})),
    "priority": _PolicyMaker(lambda capacity=None, **_: PriorityPolicy(capacity), frozenset({"capacity"})),
    "static": _PolicyMaker(lambda floors=None, **_: StaticPolicy(floors), frozenset({"floors"})),
    "lend": _PolicyMaker(
        lambda floors=None, lendable_slots=2, control_period_s=0.0, **_: LendPolicy(
            floors, lendable_slots, control_period_s=control_period_s),
        frozenset({"floors", "lendable_slots", "control_period_s"}),
    ),
    "lend-budget": _PolicyMaker(lambda **options: _budget_lender("BudgetLendPolicy", **options), _BUDGET_OPTIONS),
    "lend-preempt": _PolicyMaker(lambda **options: _budget_lender("PreemptLendPolicy", **options), _BUDGET_OPTIONS),
    "lend-priority": _PolicyMaker(
        lambda floors=None, lendable_slots=2, control_period_s=0.0, extra_slots=1, **_: _lenders().PriorityLendPolicy(
            floors, lendable_slots, control_period_s=control_period_s, extra_slots=extra_slots),
        frozenset({"floors", "lendable_slots", "control_period_s", "extra_slots"}),
    ),
}


def build_policy(
    name: str,
    *,
    floors: Mapping[str, int] | None = None,
    lendable_slots: int = 2,
    capacity: int | None = None,
    control_period_s: float = 0.0,
    restore_budget_s: float | None = None,
    kv_blocks: int | None = None,
    block_size: int = 16,
    extra_slots: int = 1,
    protected_wait_s: float = 2.0,
    borrower_wait_s: float = 120.0,
) -> AdmissionPolicy:
    """A policy by name; unknown names and bad floors are ``SettingError`` naming the setting."""
    maker = POLICIES.get(name)
    if maker is None:
        raise SettingError("gate.policy", f"unknown policy {name!r}; choose one of {', '.join(sorted(POLICIES))}")
    if floors is not None:
        for traffic_class, floor in floors.items():
            if traffic_class not in TRAFFIC_CLASSES:
                raise SettingError("gate.floors", f"unknown traffic class {traffic_class!r}; use {', '.join(TRAFFIC_CLASSES)}")
            if floor < 0:
                raise SettingError("gate.floors", f"{traffic_class} floor {floor} is negative")
    if capacity is not None and capacity < 1:
        raise SettingError("gate.capacity", f"{capacity} must be at least 1")
    return maker.make(floors=floors, lendable_slots=lendable_slots, capacity=capacity,
                      control_period_s=control_period_s, restore_budget_s=restore_budget_s, kv_blocks=kv_blocks,
                      block_size=block_size, extra_slots=extra_slots, protected_wait_s=protected_wait_s,
                      borrower_wait_s=borrower_wait_s)
