"""What the core does with the backend's reports on an engine instance: ready, slept, failed.

Each report names the instance it is about. A report about an instance the claim no longer runs, or
one that does not match the operation in progress, is stale and changes nothing (the core still
reconciles at its time).

- ready: the start or wake is done. The claim goes Active, the wake ends ``ready`` with the
  backend's ready time, and the level-1 sleep's weights leave host RAM. A start that attached to
  an engine already running ends no wake unless a request was waiting for it; one that found the
  engine asleep leaves the claim Sleeping, charged as a sleeping engine, and a waiting request's
  wake goes on as a wake of that sleeping engine.
- slept: the engine is asleep. Without the wake reserve its GPUs are charged only the sleeping
  footprint, and a wake waiting for this neighbour's room may go on.
- failed (a crash, or a failed start, wake or sleep): the instance restarts on the same GPUs after
  2, 4, 8, 16 and 32 s (``RESTART_BACKOFF_S``); once that budget is spent the claim is Failed and
  its GPUs are released.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from restorelens.gate.modelclaim.claim import OP_SLEEPING, OP_STARTING, OP_WAKING, ClaimState
from restorelens.gate.modelclaim.phases import (
    ACTIVE,
    FAILED,
    LOADING,
    MODEL_CLAIM_ACTIVE,
    REASON_ENGINE_FAILED,
    REASON_ENGINE_SLEEPING,
    SLEEPING,
)

if TYPE_CHECKING:
    from restorelens.gate.modelclaim.state import LifecycleState

__all__ = ["RESTART_BACKOFF_S", "engine_failed", "engine_found_asleep", "engine_ready", "engine_slept"]

RESTART_BACKOFF_S = (2.0, 4.0, 8.0, 16.0, 32.0)


def engine_ready(
    state: LifecycleState, claim: ClaimState, instance_id: int, now_s: float, *, ready_at_s: float | None,
    url: str | None, attached: bool = False, asleep: bool = False,
) -> None:
    """The instance was ready at ``ready_at_s`` (by the backend's account); the core observes it at ``now_s``."""
    inst = claim.current_instance(instance_id)
    if inst is None or claim.op not in (OP_STARTING, OP_WAKING):
        return
    if attached and claim.op == OP_STARTING:
        if url is not None:
            inst.url = url
        if claim.wake is not None and not claim.wake.triggers:
            claim.wake = None  # nobody waited: an attach, not a wake episode
        if asleep:
            _attached_asleep(state, claim, now_s)
            return
    if claim.op == OP_WAKING:
        state.ledger.free_host(claim.spec.model, state.pods[inst.pod].node_name)
    claim.op = None
    inst.asleep = False
    if url is not None:
        inst.url = url
    claim.idle_since_s = now_s
    claim.sleep_refused_idle_since_s = None
    ready_s = ready_at_s if ready_at_s is not None else now_s
    if claim.wake is not None and claim.wake.triggers:  # a wake a request waited for (a metric)
        claim.ready_unserved = (claim.wake.path, ready_s)
    claim.finish_wake(now_s, "ready", state.listeners, ready_s=ready_s)
    claim.set_state(ACTIVE, MODEL_CLAIM_ACTIVE, now_s, state.listeners)


def engine_found_asleep(state: LifecycleState, claim: ClaimState, instance_id: int, now_s: float) -> None:
    """An Active instance says it sleeps (someone else slept it, or it restarted asleep): the claim
    is Sleeping, so that a request wakes it instead of waiting on an engine nobody wakes (vLLM holds
    a request sent to it asleep until a wake)."""
    inst = claim.current_instance(instance_id)
    if inst is None or not claim.routable:
        return
    _attached_asleep(state, claim, now_s)


def _attached_asleep(state: LifecycleState, claim: ClaimState, now_s: float) -> None:
    """The attached engine sleeps: account it as one the lifecycle put to sleep (weights in host
    RAM at level 1, only the sleeping footprint on its GPUs without the wake reserve)."""
    inst = claim.instance
    assert inst is not None
    claim.op = None
    inst.asleep = True
    claim.idle_since_s = now_s
    if state.sleep_level == 1:
        state.ledger.hold_host(claim.spec.model, state.pods[inst.pod].node_name, claim.spec.weight_bytes)
    if state.policy.no_wake_reserve_while_asleep:
        state.ledger.charge(claim.spec.model, inst.gpus, claim.spec.sleeping_footprint_bytes)
    claim.set_state(SLEEPING, REASON_ENGINE_SLEEPING, now_s, state.listeners)
    if claim.wake is not None:
        # A request arrived while attaching: its wake goes on as a wake of a sleeping engine, from
        # now (the attach was no part of it).
        claim.wake.room_found_s = claim.wake.wake_called_s = claim.wake.path_started_s = None


def engine_slept(state: LifecycleState, claim: ClaimState, instance_id: int) -> None:
    inst = claim.current_instance(instance_id)
    if inst is None or claim.op != OP_SLEEPING:
        return
    claim.op = None
    inst.asleep = True
    if state.policy.no_wake_reserve_while_asleep:
        state.ledger.charge(claim.spec.model, inst.gpus, claim.spec.sleeping_footprint_bytes)
    _release_waiters(state, claim.spec.model)


def engine_failed(state: LifecycleState, claim: ClaimState, instance_id: int, now_s: float, error: str) -> None:
    """The instance died or an operation on it failed: restart after the next backoff, or Failed."""
    inst = claim.current_instance(instance_id)
    if inst is None or inst.crashed:
        return
    model = claim.spec.model
    claim.last_error = error
    if claim.op in (OP_STARTING, OP_WAKING):
        claim.finish_wake(now_s, "failed", state.listeners, error=error)
    claim.op = None
    inst.crashed, inst.asleep, inst.url = True, False, None
    state.ledger.free_host(model, state.pods[inst.pod].node_name)
    _release_waiters(state, model)
    if claim.restarts < len(state.restart_backoff_s):
        claim.restart_at_s = now_s + state.restart_backoff_s[claim.restarts]
        claim.set_state(LOADING, REASON_ENGINE_FAILED, now_s, state.listeners)
    else:
        # A wake wanted while no start or wake ran (say, during the failed sleep) cannot happen now.
        claim.finish_wake(now_s, "failed", state.listeners, error=error)
        state.ledger.release(model, inst.gpus)
        claim.instance = None
        claim.set_state(FAILED, REASON_ENGINE_FAILED, now_s, state.listeners, pod=None)


def _release_waiters(state: LifecycleState, model: str) -> None:
    # The neighbour ``model`` is no longer being slept: a wake that waited on it decides again.
    for other in state.claims.values():
        if other.wake is not None and other.wake.waiting_on == model:
            other.wake.waiting_on = None
