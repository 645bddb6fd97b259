"""The sans-I/O ModelClaim lifecycle over all models of one deployment.

Every method takes ``now_s`` and returns the engine actions to perform (``modelclaim_actions``);
``next_deadline_s()`` says when ``advance()`` must next be called, so the same object runs under a
discrete-event loop in virtual time and under the live router's asyncio task.

Behaviour (AIBrix ModelClaim semantics, ``reference/engines.md`` §1):

- start: each claim is placed on the first candidate pod with room (``perGPU.maximumFootprint +
  kvFloor`` on ``tensor_parallel`` GPUs) and its engine started; no room -> ``NotPlaced``, retried
  whenever memory frees. Claims whose declaration is unusable stay ``Pending`` for good.
- idle: an Active engine with no request in flight for ``sleepAfterSeconds`` is slept (level 1).
- wake on request, deduplicated (one wake per model whatever the number of requests): with the wake
  reserve, wake in place; without it, wake at once if there is room, else sleep the longest-idle
  neighbour idle at least ``sleepToMakeRoomAfterSeconds`` (one at a time, ``WaitingForRoom``), else
  move to another pod (a new engine loads there, ``Moving``), else wait up to 5 minutes.
- crash: restart on the same GPUs after 2/4/8/16/32 s, then ``Failed``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from opentelemetry.trace import SpanContext

from restorelens.errors import RestorelensError
from restorelens.gate.modelclaim_actions import (
    Action,
    LifecycleListener,
    SleepEngine,
    StartEngine,
    StopEngine,
    WakeEngine,
)
from restorelens.gate.modelclaim_claim import (
    OP_SLEEPING,
    OP_STARTING,
    OP_WAKING,
    ClaimState,
    ClaimStatus,
    EngineInstance,
    WakeInProgress,
)
from restorelens.gate.modelclaim_engine_reports import RESTART_BACKOFF_S, engine_failed, engine_ready, engine_slept
from restorelens.gate.modelclaim_phases import (
    ACTIVATING,
    FAILED,
    LOADING,
    PENDING,
    REASON_ENGINE_SLEEPING,
    REASON_ENGINE_STARTING,
    REASON_MOVING,
    REASON_NOT_PLACED,
    REASON_WAITING_FOR_ROOM,
    SCHEDULING,
    SLEEPING,
    AnswerTable,
)
from restorelens.gate.modelclaim_placement import ClaimSpec, GpuSlot, MemoryLedger, Pod, held_back_reason
from restorelens.gate.modelclaim_policy import PoolPolicy
from restorelens.gate.modelclaim_room import plan_room
from restorelens.gate.routing import RouteAnswer, Routed, UnknownModel

__all__ = ["RESTART_BACKOFF_S", "WAKE_WAIT_LIMIT_S", "ClaimControlError", "ClaimStatus", "ModelClaimCore"]

WAKE_WAIT_LIMIT_S = 300.0


class ClaimControlError(RestorelensError):
    """A control request cannot be honoured in the model's current state."""


class ModelClaimCore:
    """All models of one deployment; see the module docstring for the behaviour."""

    def __init__(
        self,
        pods: Sequence[Pod],
        claims: Sequence[ClaimSpec],
        policy: PoolPolicy,
        *,
        host_ram_limit_bytes: Mapping[str, int] | None = None,
        answers: AnswerTable | None = None,
        listeners: Iterable[LifecycleListener] = (),
        sleep_level: int = 1,
        restart_backoff_s: Sequence[float] = RESTART_BACKOFF_S,
        wake_wait_limit_s: float = WAKE_WAIT_LIMIT_S,
    ) -> None:
        self.pods = {pod.name: pod for pod in pods}
        self.policy = policy
        self.answers = answers or AnswerTable()
        self.ledger = MemoryLedger(pods, host_ram_limit_bytes)
        self.listeners = list(listeners)
        self.sleep_level = sleep_level
        self.restart_backoff_s = tuple(restart_backoff_s)
        self.wake_wait_limit_s = wake_wait_limit_s
        self.host_ram_refusals = 0
        self._claims = {spec.model: ClaimState(spec, held_back_reason(spec, pods)) for spec in claims}
        self._next_instance_id = 1
        self._now_s = float("-inf")
        self._started = False

    # --- queries -------------------------------------------------------------------------------

    def models(self) -> list[str]:
        return list(self._claims)

    def status(self, model: str) -> ClaimStatus:
        return self._claims[model].status()

    def next_deadline_s(self) -> float | None:
        """The earliest future time at which ``advance`` has something to do, or None."""
        due = [t for c in self._claims.values() for t in self._deadlines(c) if t > self._now_s]
        return min(due) if due else None

    # --- requests ------------------------------------------------------------------------------

    def route(self, model: str, now_s: float, trigger: SpanContext | None = None) -> tuple[RouteAnswer, list[Action]]:
        """Where a request goes; a request to a sleeping or unplaced model wants a wake (deduplicated)."""
        claim = self._claims.get(model)
        if claim is None:
            return UnknownModel(model), []
        actions = self._tick(now_s)
        if claim.routable:
            assert claim.instance is not None
            return Routed(claim.instance.url or ""), actions
        if claim.held_back is None and claim.phase != FAILED:
            claim.want_wake(now_s, trigger)
            actions += self._reconcile(now_s)
        return self.answers.answer(model, claim.phase, claim.reason), actions

    def request_started(self, model: str, now_s: float) -> list[Action]:
        self._claims[model].inflight += 1
        return self._tick(now_s)

    def request_finished(self, model: str, now_s: float) -> list[Action]:
        claim = self._claims[model]
        claim.inflight = max(0, claim.inflight - 1)
        if claim.inflight == 0:
            claim.idle_since_s = now_s
        return self._tick(now_s)

    def advance(self, now_s: float) -> list[Action]:
        """Act on every deadline due by ``now_s`` (idle sleeps, restarts, room, give-ups)."""
        return self._tick(now_s)

    # --- engine reports ------------------------------------------------------------------------

    def on_engine_ready(
        self, model: str, instance_id: int, now_s: float, *, ready_at_s: float | None = None, url: str | None = None
    ) -> list[Action]:
        """The backend reported the instance ready at ``ready_at_s``; the core observes it at ``now_s``."""
        engine_ready(self, self._claims[model], instance_id, now_s, ready_at_s=ready_at_s, url=url)
        return self._tick(now_s)

    def on_engine_slept(self, model: str, instance_id: int, now_s: float) -> list[Action]:
        engine_slept(self, self._claims[model], instance_id)
        return self._tick(now_s)

    def on_engine_failed(self, model: str, instance_id: int, now_s: float, error: str = "") -> list[Action]:
        """The instance died or an operation on it failed: restart with backoff, then Failed."""
        engine_failed(self, self._claims[model], instance_id, now_s, error)
        return self._tick(now_s)

    # --- control -------------------------------------------------------------------------------

    def wake(self, model: str, now_s: float) -> list[Action]:
        """Wake (or place and start) a model as a request would, without a request."""
        claim = self._claims[model]
        if claim.held_back is not None or claim.phase == FAILED:
            raise ClaimControlError(f"model {model} is {claim.phase} ({claim.reason}); it cannot be woken")
        actions = self._tick(now_s)
        if not claim.routable:
            claim.want_wake(now_s, None)
        return actions + self._reconcile(now_s)

    def sleep(self, model: str, now_s: float) -> list[Action]:
        """Sleep an Active model now, whatever its idle time; refused while requests are in flight."""
        claim = self._claims[model]
        actions = self._tick(now_s)
        if not claim.routable:
            raise ClaimControlError(f"model {model} is {claim.phase} ({claim.reason}), not Active")
        if claim.inflight:
            raise ClaimControlError(f"model {model} has {claim.inflight} requests in flight")
        action = self._sleep(claim, now_s)
        if action is None:
            raise ClaimControlError(f"model {model}: sleeping would pass the host-RAM limit")
        return actions + [action]

    def restart(self, model: str, now_s: float) -> list[Action]:
        """Give a Failed model a fresh restart budget and place it again."""
        claim = self._claims[model]
        if claim.phase != FAILED:
            raise ClaimControlError(f"model {model} is {claim.phase}, not Failed")
        claim.restarts = 0
        claim.set_state(SCHEDULING, REASON_NOT_PLACED, now_s, self.listeners, pod=None)
        return self._tick(now_s)

    def start(self, now_s: float) -> list[Action]:
        """Place and start every usable claim."""
        self._started = True
        for claim in self._claims.values():
            claim.since_s = now_s
            if claim.held_back is not None:
                claim.set_state(PENDING, claim.held_back, now_s, self.listeners, pod=None)
        return self._tick(now_s)

    def shutdown(self, now_s: float) -> list[Action]:
        """Stop every instance and close every open interval (so its span is recorded)."""
        actions: list[Action] = []
        for model, claim in self._claims.items():
            inst = claim.instance
            if inst is not None and not inst.crashed:
                actions.append(StopEngine(model, inst.id, inst.pod))
            claim.finish_wake(now_s, "stopped", self.listeners)
            if inst is not None:
                self.ledger.release(model, inst.gpus)
                self.ledger.free_host(model, self.pods[inst.pod].node_name)
            claim.instance, claim.op = None, None
            claim.close_interval(now_s, self.listeners)
            claim.since_s = now_s
        self._now_s = max(self._now_s, now_s)
        self._started = False
        return actions

    # --- internals -----------------------------------------------------------------------------

    def _tick(self, now_s: float) -> list[Action]:
        self._now_s = max(self._now_s, now_s)
        return self._reconcile(now_s)

    def _reconcile(self, now_s: float) -> list[Action]:
        actions: list[Action] = []
        if not self._started:
            return actions
        # Requested wakes first (oldest first), then unrequested placements and idle sleeps.
        order = sorted(
            self._claims.values(), key=lambda c: (c.wake is None, c.wake.requested_s if c.wake else 0.0)
        )
        for _ in range(4 * len(order) + 1):
            if not any(self._step(claim, now_s, actions) for claim in order):
                break
        return actions

    def _step(self, claim: ClaimState, now_s: float, actions: list[Action]) -> bool:
        if claim.held_back is not None or claim.phase == FAILED or claim.op is not None:
            return False
        inst = claim.instance
        if inst is None:
            return self._place(claim, now_s, actions)
        if inst.crashed:
            if claim.restart_at_s is not None and now_s >= claim.restart_at_s:
                claim.restart_at_s = None
                claim.restarts += 1
                self._start_instance(claim, inst.pod, inst.gpus, now_s, actions, path="cold-start")
                return True
            return False
        if not inst.asleep:
            if self._idle_sleep_due(claim, now_s):
                action = self._sleep(claim, now_s)
                if action is None:
                    self.host_ram_refusals += 1
                    claim.sleep_refused_idle_since_s = claim.idle_since_s
                    return False
                actions.append(action)
                return True
            return False
        if claim.wake is None:
            return False
        return self._wake_sleeping(claim, now_s, actions)

    def _idle_sleep_due(self, claim: ClaimState, now_s: float) -> bool:
        after_s = self.policy.sleep_after_s
        return (
            after_s is not None
            and claim.inflight == 0
            and claim.wake is None
            and claim.sleep_refused_idle_since_s != claim.idle_since_s
            and now_s >= claim.idle_since_s + after_s
        )

    def _place(self, claim: ClaimState, now_s: float, actions: list[Action]) -> bool:
        for pod in self.candidate_pods(claim.spec):
            gpus = self.ledger.find_gpus(claim.spec, pod)
            if gpus is not None:
                self._start_instance(claim, pod.name, gpus, now_s, actions, path="cold-start")
                return True
        claim.set_state(SCHEDULING, REASON_NOT_PLACED, now_s, self.listeners, pod=None)
        return False

    def candidate_pods(self, spec: ClaimSpec) -> list[Pod]:
        if spec.pods is None:
            return list(self.pods.values())
        return [self.pods[name] for name in spec.pods if name in self.pods]

    def _start_instance(
        self, claim: ClaimState, pod: str, gpus: tuple[GpuSlot, ...], now_s: float, actions: list[Action], *, path: str
    ) -> None:
        model = claim.spec.model
        inst = EngineInstance(self._next_instance_id, pod, gpus)
        self._next_instance_id += 1
        claim.instance, claim.op = inst, OP_STARTING
        self.ledger.charge(model, gpus, claim.spec.per_gpu_bytes)
        wake = claim.wake or WakeInProgress(requested_s=now_s)
        claim.wake = wake
        wake.path, wake.pod = path, pod
        wake.room_found_s = wake.wake_called_s = now_s
        actions.append(StartEngine(model, inst.id, pod, tuple(s.index for s in gpus)))
        reason = REASON_MOVING if path == "move" else REASON_ENGINE_STARTING
        claim.set_state(LOADING, reason, now_s, self.listeners, pod=pod)

    def _sleep(self, claim: ClaimState, now_s: float) -> SleepEngine | None:
        inst = claim.instance
        assert inst is not None
        node = self.pods[inst.pod].node_name
        if self.sleep_level == 1:
            if not self.ledger.host_room(node, claim.spec.weight_bytes):
                return None
            self.ledger.hold_host(claim.spec.model, node, claim.spec.weight_bytes)
        claim.op = OP_SLEEPING
        claim.set_state(SLEEPING, REASON_ENGINE_SLEEPING, now_s, self.listeners)
        return SleepEngine(claim.spec.model, inst.id, inst.pod, self.sleep_level)

    def _wake_sleeping(self, claim: ClaimState, now_s: float, actions: list[Action]) -> bool:
        inst, wake, model = claim.instance, claim.wake, claim.spec.model
        assert inst is not None and wake is not None
        if wake.waiting_on is not None:
            return False
        # With the wake reserve kept the GPUs are still charged for this claim: room is certain.
        plan = plan_room(self, claim, now_s) if self.policy.no_wake_reserve_while_asleep else None
        if plan is None or plan.fits:
            self.ledger.charge(model, inst.gpus, claim.spec.per_gpu_bytes)
            wake.path = "make-room" if wake.neighbours else "in-place"
            wake.pod = inst.pod
            if wake.room_found_s is None:
                wake.room_found_s = now_s
            wake.wake_called_s = now_s
            claim.op = OP_WAKING
            actions.append(WakeEngine(model, inst.id, inst.pod))
            claim.set_state(ACTIVATING, REASON_ENGINE_SLEEPING, now_s, self.listeners)
            return True
        if plan.neighbour is not None:
            neighbour = self._claims[plan.neighbour]
            action = self._sleep(neighbour, now_s)
            if action is not None:
                actions.append(action)
                wake.waiting_on = plan.neighbour
                wake.neighbours.append(plan.neighbour)
                claim.set_state(SLEEPING, REASON_WAITING_FOR_ROOM, now_s, self.listeners)
                return True
        if plan.move_to is not None:
            pod, gpus = plan.move_to
            actions.append(StopEngine(model, inst.id, inst.pod))
            self.ledger.release(model, inst.gpus)
            self.ledger.free_host(model, self.pods[inst.pod].node_name)
            wake.from_pod = inst.pod
            self._start_instance(claim, pod, gpus, now_s, actions, path="move")
            return True
        if now_s >= wake.requested_s + self.wake_wait_limit_s:
            claim.finish_wake(now_s, "timed_out", self.listeners, error=f"no room within {self.wake_wait_limit_s:g} s")
            claim.set_state(SLEEPING, REASON_ENGINE_SLEEPING, now_s, self.listeners)
            return False
        claim.set_state(SLEEPING, REASON_WAITING_FOR_ROOM, now_s, self.listeners)
        return False

    def _deadlines(self, claim: ClaimState) -> list[float]:
        if claim.held_back is not None or claim.phase == FAILED or claim.op is not None:
            return []
        inst = claim.instance
        if inst is None:
            return []
        if inst.crashed:
            return [claim.restart_at_s] if claim.restart_at_s is not None else []
        if not inst.asleep:
            after_s = self.policy.sleep_after_s
            if after_s is not None and claim.inflight == 0 and claim.wake is None:
                return [claim.idle_since_s + after_s]
            return []
        if claim.wake is None or claim.wake.waiting_on is not None:
            return []
        due = [claim.wake.requested_s + self.wake_wait_limit_s]
        make_room_s = self.policy.sleep_to_make_room_after_s
        for other in self._claims.values():
            oi = other.instance
            if other is claim or oi is None or oi.asleep or other.op is not None or other.inflight:
                continue
            if set(oi.gpus) & set(inst.gpus):
                due.append(other.idle_since_s + make_room_s)
        return due

    # --- views for the room planner, status and metrics ----------------------------------------

    def claims_view(self) -> Mapping[str, ClaimState]:
        return self._claims
