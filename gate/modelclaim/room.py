"""Where a sleeping model without a wake reserve finds room to wake.

AIBrix's order (its ModelClaim docs, ``docs/source/features/modelclaim.rst``): room at once on its own GPUs; else put the
longest-idle neighbour to sleep (only neighbours idle at least ``sleepToMakeRoomAfterSeconds``
qualify, one at a time); else move to another candidate pod with room now; else wait.

A neighbour is slept only when sleeping every qualifying neighbour would make enough room: sleeping
engines that cannot free enough would only cost their users a wake, so the planner moves instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from restorelens.gate.modelclaim.claim import ClaimState
from restorelens.gate.modelclaim.placement import GpuSlot

if TYPE_CHECKING:
    from restorelens.gate.modelclaim.state import LifecycleState

__all__ = ["RoomPlan", "plan_room"]


@dataclass(frozen=True, slots=True)
class RoomPlan:
    fits: bool
    neighbour: str | None = None
    move_to: tuple[str, tuple[GpuSlot, ...]] | None = None


def _qualifies(state: LifecycleState, other: ClaimState, gpus: set[GpuSlot], now_s: float) -> bool:
    """``other`` may be slept to make room: awake and unused, on one of ``gpus``, idle long enough."""
    if not other.routable or other.inflight or other.wake:
        return False
    inst = other.instance
    assert inst is not None  # routable
    if not gpus & set(inst.gpus):
        return False
    if now_s < other.idle_since_s + state.policy.sleep_to_make_room_after_s:
        return False
    node = state.pods[inst.pod].node_name
    return state.sleep_level != 1 or state.ledger.host_room(node, other.spec.weight_bytes)


def plan_room(state: LifecycleState, claim: ClaimState, now_s: float) -> RoomPlan:
    """The next step for ``claim`` (asleep, wanting a wake) at ``now_s``."""
    spec, inst = claim.spec, claim.instance
    assert inst is not None
    need = spec.per_gpu_bytes
    free = {slot: state.ledger.free_bytes(slot, excluding=spec.model) for slot in inst.gpus}
    if all(b >= need for b in free.values()):
        return RoomPlan(fits=True)
    qualifying = [
        other for other in state.claims.values()
        if other is not claim and _qualifies(state, other, set(inst.gpus), now_s)
    ]
    freeable = dict(free)
    for other in qualifying:
        for slot in other.instance.gpus:
            if slot in freeable:
                held = state.ledger.charges(slot).get(other.spec.model, 0)
                freeable[slot] += held - other.spec.sleeping_footprint_bytes
    if qualifying and all(b >= need for b in freeable.values()):
        longest_idle = min(qualifying, key=lambda o: (o.idle_since_s, o.spec.model))
        return RoomPlan(fits=False, neighbour=longest_idle.spec.model)
    for pod in state.candidate_pods(spec):
        if pod.name == inst.pod:
            continue
        gpus = state.ledger.find_gpus(spec, pod)
        if gpus is not None:
            return RoomPlan(fits=False, move_to=(pod.name, gpus))
    return RoomPlan(fits=False)
