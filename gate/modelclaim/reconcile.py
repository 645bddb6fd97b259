"""What each claim does next, decided at every tick of the core, and when the next decision is due.

``reconcile`` takes the claims in order: requested wakes first, oldest first, then placements and
idle sleeps. Each step moves at most one claim, then the order starts again. A claim with an engine
operation in progress, or out of service (held back, Failed), is skipped. Otherwise:

- not placed: start it on the first candidate pod with room (``NotPlaced`` when none has room);
- crashed: restart it on the same GPUs once its backoff is over;
- awake and idle for ``sleepAfterSeconds``: sleep it (level 1 needs host-RAM room for the weights);
- asleep with a wake wanted: wake in place when there is room, else sleep a neighbour to make room,
  else move to another pod, else wait (``WaitingForRoom``) and give up after ``WAKE_WAIT_LIMIT_S``.

``deadlines`` gives the times at which one of these could next happen with no event in between
(idle sleeps, restart backoff, a neighbour becoming idle enough to sleep, the give-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from restorelens.gate.modelclaim.actions import Action, SleepEngine, StartEngine, StopEngine, WakeEngine
from restorelens.gate.modelclaim.claim import (
    OP_SLEEPING,
    OP_STARTING,
    OP_WAKING,
    ClaimState,
    EngineInstance,
    WakeInProgress,
)
from restorelens.gate.modelclaim.phases import (
    ACTIVATING,
    LOADING,
    REASON_ENGINE_SLEEPING,
    REASON_ENGINE_STARTING,
    REASON_MOVING,
    REASON_NOT_PLACED,
    REASON_WAITING_FOR_ROOM,
    SCHEDULING,
    SLEEPING,
)
from restorelens.gate.modelclaim.placement import GpuSlot
from restorelens.gate.modelclaim.room import plan_room

if TYPE_CHECKING:
    from restorelens.gate.modelclaim.state import LifecycleState

__all__ = ["WAKE_WAIT_LIMIT_S", "deadlines", "reconcile", "release_instance", "sleep_engine"]

WAKE_WAIT_LIMIT_S = 300.0


def reconcile(state: LifecycleState, now_s: float) -> list[Action]:
    """Every step due at ``now_s``, as the actions to perform."""
    actions: list[Action] = []
    order = sorted(
        state.claims.values(), key=lambda c: (c.wake is None, c.wake.requested_s if c.wake else 0.0)
    )
    for _ in range(4 * len(order) + 1):
        if not any(_step(state, claim, now_s, actions) for claim in order):
            break
    return actions


def deadlines(state: LifecycleState, claim: ClaimState) -> list[float]:
    """When ``reconcile`` may next have something to do for ``claim`` (past times included)."""
    if claim.out_of_service or claim.op is not None:
        return []
    inst = claim.instance
    if inst is None:
        return []
    if inst.crashed:
        return [claim.restart_at_s] if claim.restart_at_s is not None else []
    if not inst.asleep:
        idle_sleep_at_s = claim.idle_sleep_at_s(state.policy.sleep_after_s)
        return [idle_sleep_at_s] if idle_sleep_at_s is not None else []
    if claim.wake is None or claim.wake.waiting_on is not None:
        return []
    due = [claim.wake.requested_s + state.wake_wait_limit_s]
    make_room_s = state.policy.sleep_to_make_room_after_s
    for other in state.claims.values():
        oi = other.instance
        if other is claim or oi is None or oi.asleep or other.op is not None or other.inflight:
            continue
        if set(oi.gpus) & set(inst.gpus):
            due.append(other.idle_since_s + make_room_s)
    return due


def sleep_engine(state: LifecycleState, claim: ClaimState, now_s: float) -> SleepEngine | None:
    """Sleep the claim's awake engine; None (and nothing changed) when host RAM has no room for the weights."""
    inst = claim.instance
    assert inst is not None
    node = state.pods[inst.pod].node_name
    if state.sleep_level == 1:
        if not state.ledger.host_room(node, claim.spec.weight_bytes):
            return None
        state.ledger.hold_host(claim.spec.model, node, claim.spec.weight_bytes)
    claim.op = OP_SLEEPING
    claim.set_state(SLEEPING, REASON_ENGINE_SLEEPING, now_s, state.listeners)
    return SleepEngine(claim.spec.model, inst.id, inst.pod, state.sleep_level)


def release_instance(state: LifecycleState, model: str, inst: EngineInstance) -> None:
    """Give back the GPU memory and the host RAM the instance is charged."""
    state.ledger.release(model, inst.gpus)
    state.ledger.free_host(model, state.pods[inst.pod].node_name)


def _step(state: LifecycleState, claim: ClaimState, now_s: float, actions: list[Action]) -> bool:
    """One decision for ``claim``; True when it changed something (so the order starts again)."""
    if claim.out_of_service or claim.op is not None:
        return False
    inst = claim.instance
    if inst is None:
        return _place(state, claim, now_s, actions)
    if inst.crashed:
        return _restart_if_due(state, claim, inst, now_s, actions)
    if not inst.asleep:
        return _idle_sleep_if_due(state, claim, now_s, actions)
    if claim.wake is None:
        return False
    return _wake_sleeping(state, claim, now_s, actions)


def _place(state: LifecycleState, claim: ClaimState, now_s: float, actions: list[Action]) -> bool:
    for pod in state.candidate_pods(claim.spec):
        gpus = state.ledger.find_gpus(claim.spec, pod)
        if gpus is not None:
            _start_instance(state, claim, pod.name, gpus, now_s, actions, path="cold-start")
            return True
    claim.set_state(SCHEDULING, REASON_NOT_PLACED, now_s, state.listeners, pod=None)
    return False


def _restart_if_due(
    state: LifecycleState, claim: ClaimState, inst: EngineInstance, now_s: float, actions: list[Action]
) -> bool:
    if claim.restart_at_s is None or now_s < claim.restart_at_s:
        return False
    claim.restart_at_s = None
    claim.restarts += 1
    _start_instance(state, claim, inst.pod, inst.gpus, now_s, actions, path="cold-start")
    return True


def _idle_sleep_if_due(state: LifecycleState, claim: ClaimState, now_s: float, actions: list[Action]) -> bool:
    idle_sleep_at_s = claim.idle_sleep_at_s(state.policy.sleep_after_s)
    # A refused sleep is not tried again until the engine has been used (a new idle period).
    if idle_sleep_at_s is None or claim.sleep_refused_idle_since_s == claim.idle_since_s or now_s < idle_sleep_at_s:
        return False
    action = sleep_engine(state, claim, now_s)
    if action is None:
        state.host_ram_refusals += 1
        claim.sleep_refused_idle_since_s = claim.idle_since_s
        return False
    actions.append(action)
    return True


def _start_instance(
    state: LifecycleState, claim: ClaimState, pod: str, gpus: tuple[GpuSlot, ...], now_s: float,
    actions: list[Action], *, path: str,
) -> None:
    model = claim.spec.model
    inst = EngineInstance(state.new_instance_id(), pod, gpus)
    claim.instance, claim.op = inst, OP_STARTING
    state.ledger.charge(model, gpus, claim.spec.per_gpu_bytes)
    wake = claim.wake or WakeInProgress(requested_s=now_s)
    claim.wake = wake
    wake.path, wake.pod = path, pod
    wake.room_found_s = wake.wake_called_s = wake.path_started_s = now_s
    if wake.context is None:
        wake.context = state.new_wake_context()
    actions.append(StartEngine(model, inst.id, pod, tuple(s.index for s in gpus), trace=wake.context))
    reason = REASON_MOVING if path == "move" else REASON_ENGINE_STARTING
    claim.set_state(LOADING, reason, now_s, state.listeners, pod=pod)


# --- waking a sleeping engine (AIBrix's order, docs/modelclaim.md) ---------------------------


def _wake_sleeping(state: LifecycleState, claim: ClaimState, now_s: float, actions: list[Action]) -> bool:
    wake = claim.wake
    assert wake is not None
    if wake.waiting_on is not None:
        return False
    # With the wake reserve kept the GPUs are still charged for this claim: room is certain.
    plan = plan_room(state, claim, now_s) if state.policy.no_wake_reserve_while_asleep else None
    if plan is None or plan.fits:
        _wake_in_place(state, claim, now_s, actions)
        return True
    if plan.neighbour is not None and _sleep_neighbour(state, claim, plan.neighbour, now_s, actions):
        return True
    if plan.move_to is not None:
        _move(state, claim, plan.move_to, now_s, actions)
        return True
    _wait_for_room(state, claim, now_s)
    return False


def _wake_in_place(state: LifecycleState, claim: ClaimState, now_s: float, actions: list[Action]) -> None:
    inst, wake, model = claim.instance, claim.wake, claim.spec.model
    assert inst is not None and wake is not None
    state.ledger.charge(model, inst.gpus, claim.spec.per_gpu_bytes)
    wake.path = "make-room" if wake.neighbours else "in-place"
    if not wake.neighbours or wake.path_started_s is None:
        wake.path_started_s = now_s
    wake.pod = inst.pod
    if wake.room_found_s is None:
        wake.room_found_s = now_s
    wake.wake_called_s = now_s
    claim.op = OP_WAKING
    actions.append(WakeEngine(model, inst.id, inst.pod))
    claim.set_state(ACTIVATING, REASON_ENGINE_SLEEPING, now_s, state.listeners)


def _sleep_neighbour(
    state: LifecycleState, claim: ClaimState, neighbour: str, now_s: float, actions: list[Action]
) -> bool:
    wake = claim.wake
    assert wake is not None
    action = sleep_engine(state, state.claims[neighbour], now_s)
    if action is None:
        return False
    actions.append(action)
    if not wake.neighbours:
        wake.path_started_s = now_s
    wake.waiting_on = neighbour
    wake.neighbours.append(neighbour)
    claim.set_state(SLEEPING, REASON_WAITING_FOR_ROOM, now_s, state.listeners)
    return True


def _move(
    state: LifecycleState, claim: ClaimState, to: tuple[str, tuple[GpuSlot, ...]], now_s: float, actions: list[Action]
) -> None:
    # No live migration: the sleeping instance stops and a new one cold-starts on the other pod.
    inst, wake, model = claim.instance, claim.wake, claim.spec.model
    assert inst is not None and wake is not None
    pod, gpus = to
    actions.append(StopEngine(model, inst.id, inst.pod))
    release_instance(state, model, inst)
    wake.from_pod = inst.pod
    _start_instance(state, claim, pod, gpus, now_s, actions, path="move")


def _wait_for_room(state: LifecycleState, claim: ClaimState, now_s: float) -> None:
    wake = claim.wake
    assert wake is not None
    limit_s = state.wake_wait_limit_s
    if now_s >= wake.requested_s + limit_s:
        claim.finish_wake(now_s, "timed_out", state.listeners, error=f"no room within {limit_s:g} s")
        claim.set_state(SLEEPING, REASON_ENGINE_SLEEPING, now_s, state.listeners)
    else:
        claim.set_state(SLEEPING, REASON_WAITING_FOR_ROOM, now_s, state.listeners)
