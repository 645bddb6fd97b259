"""The sans-I/O ModelClaim lifecycle over all models of one deployment.

Every method takes ``now_s`` and returns the engine actions to perform (``modelclaim.actions``);
``next_deadline_s()`` says when ``advance()`` must next be called, so the same object runs under a
discrete-event loop in virtual time and under the live router's asyncio task.

Behaviour (AIBrix ModelClaim semantics, docs/modelclaim.md):

- start: each claim is placed on the first candidate pod with room (``perGPU.maximumFootprint +
  kvFloor`` on ``tensor_parallel`` GPUs) and its engine started; no room -> ``NotPlaced``, retried
  whenever memory frees. Claims whose declaration is unusable stay ``Pending`` for good.
- idle: an Active engine with no request in flight for ``sleepAfterSeconds`` is slept (level 1).
- wake on request, deduplicated (one wake per model whatever the number of requests): with the wake
  reserve, wake in place; without it, wake at once if there is room, else sleep the longest-idle
  neighbour idle at least ``sleepToMakeRoomAfterSeconds`` (one at a time, ``WaitingForRoom``), else
  move to another pod (a new engine loads there, ``Moving``), else wait up to 5 minutes.
- crash: restart on the same GPUs after 2/4/8/16/32 s, then ``Failed``.

``ModelClaimCore`` is the public face. The work lives beside it: each model's state and the
transitions listeners see in ``modelclaim.claim``, the backend's reports in
``modelclaim.engine_reports``, and the decisions taken at every tick (placement, idle sleep,
restart, wake, room, move) and their deadlines in ``modelclaim.reconcile``, which asks
``modelclaim.room`` where a wake finds room. Those modules take the deployment's
``LifecycleState`` (``modelclaim.state``), not the core.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from opentelemetry.trace import SpanContext

from restorelens.errors import RestorelensError
from restorelens.gate.modelclaim.actions import Action, LifecycleListener, ServedAfterWake, StopEngine
from restorelens.gate.modelclaim.calibration import WakeCalibration
from restorelens.gate.modelclaim.claim import ClaimState, ClaimStatus
from restorelens.gate.modelclaim.hints import RetryHints
from restorelens.gate.modelclaim.engine_reports import (
    RESTART_BACKOFF_S,
    engine_failed,
    engine_found_asleep,
    engine_ready,
    engine_slept,
)
from restorelens.gate.modelclaim.phases import FAILED, PENDING, REASON_NOT_PLACED, SCHEDULING, AnswerTable
from restorelens.gate.modelclaim.placement import ClaimSpec, MemoryLedger, Pod, held_back_reason
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.reconcile import (
    WAKE_WAIT_LIMIT_S,
    deadlines,
    reconcile,
    release_instance,
    sleep_engine,
)
from restorelens.gate.modelclaim.state import LifecycleState
from restorelens.gate.routing import RouteAnswer, Routed, UnknownModel

__all__ = ["RESTART_BACKOFF_S", "WAKE_WAIT_LIMIT_S", "ClaimControlError", "ClaimStatus", "ModelClaimCore"]


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
        hints: RetryHints | None = None,
        calibration: WakeCalibration | None = None,
    ) -> None:
        self.answers = answers or (hints.table if hints is not None else AnswerTable())
        #: How a not-ready model is answered (the fixed table, or calibrated hints; hold or not).
        self.hints = hints or RetryHints(self.answers)
        #: What the lifecycle learnt from its wakes; a listener, so it sees every wake end.
        self.calibration = calibration or WakeCalibration()
        self.state = LifecycleState(
            pods={pod.name: pod for pod in pods},
            policy=policy,
            ledger=MemoryLedger(pods, host_ram_limit_bytes),
            claims={spec.model: ClaimState(spec, held_back_reason(spec, pods)) for spec in claims},
            listeners=[self.calibration, *listeners],
            sleep_level=sleep_level,
            restart_backoff_s=tuple(restart_backoff_s),
            wake_wait_limit_s=wake_wait_limit_s,
        )
        self._claims = self.state.claims
        self._now_s = float("-inf")
        self._started = False

    # --- the deployment, for status, metrics and spans -----------------------------------------

    @property
    def pods(self) -> Mapping[str, Pod]:
        return self.state.pods

    @property
    def policy(self) -> PoolPolicy:
        return self.state.policy

    @property
    def ledger(self) -> MemoryLedger:
        return self.state.ledger

    @property
    def listeners(self) -> list[LifecycleListener]:
        """Mutable: a listener added here sees every later transition."""
        return self.state.listeners

    @property
    def sleep_level(self) -> int:
        return self.state.sleep_level

    @property
    def host_ram_refusals(self) -> int:
        return self.state.host_ram_refusals

    # --- queries -------------------------------------------------------------------------------

    def models(self) -> list[str]:
        return list(self._claims)

    def status(self, model: str) -> ClaimStatus:
        return self._claims[model].status()

    def next_deadline_s(self) -> float | None:
        """The earliest future time at which ``advance`` has something to do, or None."""
        due = [t for c in self._claims.values() for t in deadlines(self.state, c) if t > self._now_s]
        return min(due) if due else None

    # --- requests ------------------------------------------------------------------------------

    def route(self, model: str, now_s: float, trigger: SpanContext | None = None,
              retries_taken: int | None = None) -> tuple[RouteAnswer, list[Action]]:
        """Where a request goes; a request to a sleeping or unplaced model wants a wake (deduplicated)."""
        claim = self._claims.get(model)
        if claim is None:
            return UnknownModel(model), []
        actions = self._tick(now_s)
        if claim.routable:
            assert claim.instance is not None
            if claim.ready_unserved is not None:
                path, ready_s = claim.ready_unserved
                claim.ready_unserved = None
                served = ServedAfterWake(model, path, ready_s, now_s)
                for listener in self.listeners:
                    # Optional for listeners: only metrics want it.
                    if (hook := getattr(listener, "on_served_after_wake", None)) is not None:
                        hook(served)
            return Routed(claim.instance.url or ""), actions
        if not claim.out_of_service:
            claim.want_wake(now_s, trigger)
            actions += self._reconcile(now_s)
        return self.hints.answer(claim, now_s, self.calibration, retries_taken), actions

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
        self, model: str, instance_id: int, now_s: float, *, ready_at_s: float | None = None, url: str | None = None,
        attached: bool = False, asleep: bool = False,
    ) -> list[Action]:
        """The backend reported the instance ready at ``ready_at_s``; the core observes it at ``now_s``.

        ``attached``/``asleep``: the start found a running engine, asleep or not (``EngineAnswer``).
        """
        engine_ready(self.state, self._claims[model], instance_id, now_s, ready_at_s=ready_at_s, url=url,
                     attached=attached, asleep=asleep)
        return self._tick(now_s)

    def on_engine_slept(self, model: str, instance_id: int, now_s: float) -> list[Action]:
        engine_slept(self.state, self._claims[model], instance_id)
        return self._tick(now_s)

    def on_engine_found_asleep(self, model: str, instance_id: int, now_s: float) -> list[Action]:
        """An Active instance says it sleeps though the lifecycle did not sleep it: mark it Sleeping."""
        engine_found_asleep(self.state, self._claims[model], instance_id, now_s)
        return self._tick(now_s)

    def on_engine_failed(self, model: str, instance_id: int, now_s: float, error: str = "") -> list[Action]:
        """The instance died or an operation on it failed: restart with backoff, then Failed."""
        engine_failed(self.state, self._claims[model], instance_id, now_s, error)
        return self._tick(now_s)

    # --- control -------------------------------------------------------------------------------

    def wake(self, model: str, now_s: float) -> list[Action]:
        """Wake (or place and start) a model as a request would, without a request."""
        claim = self._claims[model]
        if claim.out_of_service:
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
        action = sleep_engine(self.state, claim, now_s)
        if action is None:
            raise ClaimControlError(f"model {model}: sleeping would pass the host-RAM limit")
        return actions + [action]

    def restart(self, model: str, now_s: float) -> list[Action]:
        """Give a Failed model a fresh restart budget and place it again."""
        claim = self._claims[model]
        if claim.phase != FAILED:
            raise ClaimControlError(f"model {model} is {claim.phase}, not Failed")
        claim.restarts, claim.last_error = 0, ""
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
                release_instance(self.state, model, inst)
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
        return reconcile(self.state, now_s) if self._started else []

    # --- views for status, metrics and the runners ---------------------------------------------

    def claims_view(self) -> Mapping[str, ClaimState]:
        return self._claims
