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
from dataclasses import dataclass, field

from opentelemetry.trace import SpanContext

from restorelens.errors import RestorelensError
from restorelens.gate.modelclaim_actions import (
    Action,
    LifecycleListener,
    SleepEngine,
    StartEngine,
    StateInterval,
    StopEngine,
    WakeEngine,
    WakeRecord,
)
from restorelens.gate.modelclaim_phases import (
    ACTIVATING,
    ACTIVE,
    FAILED,
    LOADING,
    MODEL_CLAIM_ACTIVE,
    PENDING,
    REASON_ENGINE_FAILED,
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

RESTART_BACKOFF_S = (2.0, 4.0, 8.0, 16.0, 32.0)
WAKE_WAIT_LIMIT_S = 300.0
_STARTING, _WAKING, _SLEEPING = "starting", "waking", "sleeping"
_INSTANCE_POD = object()


class ClaimControlError(RestorelensError):
    """A control request cannot be honoured in the model's current state."""


@dataclass(slots=True)
class _Instance:
    id: int
    pod: str
    gpus: tuple[GpuSlot, ...]
    url: str | None = None
    asleep: bool = False
    crashed: bool = False


@dataclass(slots=True)
class _Wake:
    requested_s: float
    triggers: list[SpanContext] = field(default_factory=list)
    path: str = "cold-start"
    pod: str = ""
    room_found_s: float | None = None
    wake_called_s: float | None = None
    from_pod: str | None = None
    neighbours: list[str] = field(default_factory=list)
    waiting_on: str | None = None


@dataclass(slots=True)
class _Claim:
    spec: ClaimSpec
    held_back: str | None
    phase: str = SCHEDULING
    reason: str = REASON_NOT_PLACED
    pod: str | None = None
    since_s: float = 0.0
    instance: _Instance | None = None
    op: str | None = None
    inflight: int = 0
    idle_since_s: float = 0.0
    wake: _Wake | None = None
    restarts: int = 0
    restart_at_s: float | None = None
    sleep_refused_idle_since_s: float | None = None


@dataclass(frozen=True, slots=True)
class ClaimStatus:
    """A read-only view of one model, for the status endpoint and metrics."""

    model: str
    phase: str
    reason: str
    since_s: float
    pod: str | None
    gpus: tuple[int, ...]
    upstream_url: str | None
    in_flight: int
    idle_since_s: float
    restarts: int
    wake_path: str | None


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
        self._claims = {spec.model: _Claim(spec, held_back_reason(spec, pods)) for spec in claims}
        self._next_instance_id = 1
        self._now_s = float("-inf")
        self._started = False

    # --- queries -------------------------------------------------------------------------------

    def models(self) -> list[str]:
        return list(self._claims)

    def status(self, model: str) -> ClaimStatus:
        c = self._claims[model]
        inst = c.instance
        return ClaimStatus(
            model=model,
            phase=c.phase,
            reason=c.reason,
            since_s=c.since_s,
            pod=c.pod,
            gpus=tuple(s.index for s in inst.gpus) if inst else (),
            upstream_url=inst.url if inst else None,
            in_flight=c.inflight,
            idle_since_s=c.idle_since_s,
            restarts=c.restarts,
            wake_path=c.wake.path if c.wake and c.wake.room_found_s is not None else None,
        )

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
        if self._routable(claim):
            assert claim.instance is not None
            return Routed(claim.instance.url or ""), actions
        if claim.held_back is None and claim.phase != FAILED:
            self._want_wake(claim, now_s, trigger)
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
        claim = self._claims[model]
        inst = claim.instance
        if inst is None or inst.id != instance_id or claim.op not in (_STARTING, _WAKING):
            return self._tick(now_s)
        if claim.op == _WAKING:
            self.ledger.free_host(model, self.pods[inst.pod].node_name)
        claim.op = None
        inst.asleep = False
        if url is not None:
            inst.url = url
        claim.idle_since_s = now_s
        claim.sleep_refused_idle_since_s = None
        self._finish_wake(claim, now_s, "ready", ready_s=ready_at_s if ready_at_s is not None else now_s)
        self._set_state(claim, ACTIVE, MODEL_CLAIM_ACTIVE, now_s)
        return self._tick(now_s)

    def on_engine_slept(self, model: str, instance_id: int, now_s: float) -> list[Action]:
        claim = self._claims[model]
        inst = claim.instance
        if inst is None or inst.id != instance_id or claim.op != _SLEEPING:
            return self._tick(now_s)
        claim.op = None
        inst.asleep = True
        if self.policy.no_wake_reserve_while_asleep:
            self.ledger.charge(model, inst.gpus, claim.spec.sleeping_footprint_bytes)
        self._release_waiters(model)
        return self._tick(now_s)

    def on_engine_failed(self, model: str, instance_id: int, now_s: float, error: str = "") -> list[Action]:
        """The instance died or an operation on it failed: restart with backoff, then Failed."""
        claim = self._claims[model]
        inst = claim.instance
        if inst is None or inst.id != instance_id or inst.crashed:
            return self._tick(now_s)
        if claim.op in (_STARTING, _WAKING):
            self._finish_wake(claim, now_s, "failed", error=error)
        claim.op = None
        inst.crashed, inst.asleep, inst.url = True, False, None
        self.ledger.free_host(model, self.pods[inst.pod].node_name)
        self._release_waiters(model)
        if claim.restarts < len(self.restart_backoff_s):
            claim.restart_at_s = now_s + self.restart_backoff_s[claim.restarts]
            self._set_state(claim, LOADING, REASON_ENGINE_FAILED, now_s)
        else:
            self._finish_wake(claim, now_s, "failed", error=error)
            self.ledger.release(model, inst.gpus)
            claim.instance = None
            self._set_state(claim, FAILED, REASON_ENGINE_FAILED, now_s, pod=None)
        return self._tick(now_s)

    # --- control -------------------------------------------------------------------------------

    def wake(self, model: str, now_s: float) -> list[Action]:
        """Wake (or place and start) a model as a request would, without a request."""
        claim = self._claims[model]
        if claim.held_back is not None or claim.phase == FAILED:
            raise ClaimControlError(f"model {model} is {claim.phase} ({claim.reason}); it cannot be woken")
        actions = self._tick(now_s)
        if not self._routable(claim):
            self._want_wake(claim, now_s, None)
        return actions + self._reconcile(now_s)

    def sleep(self, model: str, now_s: float) -> list[Action]:
        """Sleep an Active model now, whatever its idle time; refused while requests are in flight."""
        claim = self._claims[model]
        actions = self._tick(now_s)
        if not self._routable(claim):
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
        self._set_state(claim, SCHEDULING, REASON_NOT_PLACED, now_s, pod=None)
        return self._tick(now_s)

    def start(self, now_s: float) -> list[Action]:
        """Place and start every usable claim."""
        self._started = True
        for claim in self._claims.values():
            claim.since_s = now_s
            if claim.held_back is not None:
                self._set_state(claim, PENDING, claim.held_back, now_s, pod=None)
        return self._tick(now_s)

    def shutdown(self, now_s: float) -> list[Action]:
        """Stop every instance and close every open interval (so its span is recorded)."""
        actions: list[Action] = []
        for model, claim in self._claims.items():
            inst = claim.instance
            if inst is not None and not inst.crashed:
                actions.append(StopEngine(model, inst.id, inst.pod))
            self._finish_wake(claim, now_s, "stopped")
            if inst is not None:
                self.ledger.release(model, inst.gpus)
                self.ledger.free_host(model, self.pods[inst.pod].node_name)
            claim.instance, claim.op = None, None
            self._emit_interval(claim, now_s)
            claim.since_s = now_s
        self._now_s = max(self._now_s, now_s)
        self._started = False
        return actions

    # --- internals -----------------------------------------------------------------------------

    def _routable(self, claim: _Claim) -> bool:
        inst = claim.instance
        return inst is not None and not inst.asleep and not inst.crashed and claim.op is None

    def _want_wake(self, claim: _Claim, now_s: float, trigger: SpanContext | None) -> None:
        if claim.wake is None:
            claim.wake = _Wake(requested_s=now_s)
        if trigger is not None and not claim.wake.triggers:
            claim.wake.triggers.append(trigger)

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

    def _step(self, claim: _Claim, now_s: float, actions: list[Action]) -> bool:
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

    def _idle_sleep_due(self, claim: _Claim, now_s: float) -> bool:
        after_s = self.policy.sleep_after_s
        return (
            after_s is not None
            and claim.inflight == 0
            and claim.wake is None
            and claim.sleep_refused_idle_since_s != claim.idle_since_s
            and now_s >= claim.idle_since_s + after_s
        )

    def _place(self, claim: _Claim, now_s: float, actions: list[Action]) -> bool:
        for pod in self.candidate_pods(claim.spec):
            gpus = self.ledger.find_gpus(claim.spec, pod)
            if gpus is not None:
                self._start_instance(claim, pod.name, gpus, now_s, actions, path="cold-start")
                return True
        self._set_state(claim, SCHEDULING, REASON_NOT_PLACED, now_s, pod=None)
        return False

    def candidate_pods(self, spec: ClaimSpec) -> list[Pod]:
        if spec.pods is None:
            return list(self.pods.values())
        return [self.pods[name] for name in spec.pods if name in self.pods]

    def _start_instance(
        self, claim: _Claim, pod: str, gpus: tuple[GpuSlot, ...], now_s: float, actions: list[Action], *, path: str
    ) -> None:
        model = claim.spec.model
        inst = _Instance(self._next_instance_id, pod, gpus)
        self._next_instance_id += 1
        claim.instance, claim.op = inst, _STARTING
        self.ledger.charge(model, gpus, claim.spec.per_gpu_bytes)
        wake = claim.wake or _Wake(requested_s=now_s)
        claim.wake = wake
        wake.path, wake.pod = path, pod
        wake.room_found_s = wake.wake_called_s = now_s
        actions.append(StartEngine(model, inst.id, pod, tuple(s.index for s in gpus)))
        reason = REASON_MOVING if path == "move" else REASON_ENGINE_STARTING
        self._set_state(claim, LOADING, reason, now_s, pod=pod)

    def _sleep(self, claim: _Claim, now_s: float) -> SleepEngine | None:
        inst = claim.instance
        assert inst is not None
        node = self.pods[inst.pod].node_name
        if self.sleep_level == 1:
            if not self.ledger.host_room(node, claim.spec.weight_bytes):
                return None
            self.ledger.hold_host(claim.spec.model, node, claim.spec.weight_bytes)
        claim.op = _SLEEPING
        self._set_state(claim, SLEEPING, REASON_ENGINE_SLEEPING, now_s)
        return SleepEngine(claim.spec.model, inst.id, inst.pod, self.sleep_level)

    def _wake_sleeping(self, claim: _Claim, now_s: float, actions: list[Action]) -> bool:
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
            claim.op = _WAKING
            actions.append(WakeEngine(model, inst.id, inst.pod))
            self._set_state(claim, ACTIVATING, REASON_ENGINE_SLEEPING, now_s)
            return True
        if plan.neighbour is not None:
            neighbour = self._claims[plan.neighbour]
            action = self._sleep(neighbour, now_s)
            if action is not None:
                actions.append(action)
                wake.waiting_on = plan.neighbour
                wake.neighbours.append(plan.neighbour)
                self._set_state(claim, SLEEPING, REASON_WAITING_FOR_ROOM, now_s)
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
            self._finish_wake(claim, now_s, "timed_out", error=f"no room within {self.wake_wait_limit_s:g} s")
            self._set_state(claim, SLEEPING, REASON_ENGINE_SLEEPING, now_s)
            return False
        self._set_state(claim, SLEEPING, REASON_WAITING_FOR_ROOM, now_s)
        return False

    def _release_waiters(self, model: str) -> None:
        for other in self._claims.values():
            if other.wake is not None and other.wake.waiting_on == model:
                other.wake.waiting_on = None

    def _deadlines(self, claim: _Claim) -> list[float]:
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

    def _finish_wake(self, claim: _Claim, now_s: float, outcome: str, *, ready_s: float | None = None,
                     error: str = "") -> None:
        wake = claim.wake
        if wake is None:
            return
        claim.wake = None
        record = WakeRecord(
            model=claim.spec.model,
            path=wake.path,
            pod=wake.pod or (claim.pod or ""),
            requested_s=wake.requested_s,
            end_s=now_s,
            outcome=outcome,
            room_found_s=wake.room_found_s,
            wake_called_s=wake.wake_called_s,
            ready_s=ready_s,
            observed_s=now_s if outcome == "ready" else None,
            from_pod=wake.from_pod,
            neighbour=",".join(wake.neighbours) or None,
            triggers=tuple(wake.triggers),
            error=error,
        )
        for listener in self.listeners:
            listener.on_wake_finished(record)

    def _set_state(self, claim: _Claim, phase: str, reason: str, now_s: float, *, pod: object = _INSTANCE_POD) -> None:
        new_pod = (claim.instance.pod if claim.instance else None) if pod is _INSTANCE_POD else pod
        assert new_pod is None or isinstance(new_pod, str)
        if (phase, reason, new_pod) == (claim.phase, claim.reason, claim.pod):
            return
        self._emit_interval(claim, now_s)
        claim.phase, claim.reason, claim.pod, claim.since_s = phase, reason, new_pod, now_s  # type: ignore[assignment]

    def _emit_interval(self, claim: _Claim, now_s: float) -> None:
        if now_s <= claim.since_s:
            return
        interval = StateInterval(claim.spec.model, claim.phase, claim.reason, claim.pod, claim.since_s, now_s)
        for listener in self.listeners:
            listener.on_state_interval(interval)

    # --- views for the room planner, status and metrics ----------------------------------------

    def claims_view(self) -> Mapping[str, _Claim]:
        return self._claims
