"""The sans-I/O admission core: grants, per-class queues with a wait timeout, lending records.

``Admission`` never reads a clock, sleeps or does I/O: every method takes ``now_s``. The live proxy
calls it with wall-clock time and parks queued requests on futures; the virtual-time loop calls it
with simulated time and schedules ``next_deadline_s()``. Either way each ``Grant`` must be released
exactly once (a second release raises ``GrantError``: a bookkeeping bug must be loud, never a leak).

A request is granted at once when the policy admits it and nobody of its class is queued ahead
(nobody at all for shared-queue policies); otherwise it waits until a release frees room or its
deadline passes (``expire``), or the caller withdraws it (client gone).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from restorelens.spans import TRAFFIC_CLASSES

from .grants import (
    REJECT_CONCURRENCY, REJECT_DRAINING, REJECT_QUEUE_LIMIT, REJECT_TIMEOUT, REJECT_WITHDRAWN, Counters, Decision,
    Grant, GrantError, Rejection, Waiter,
)
from .policies.interface import AdmissionPolicy, Occupancy, RequestSize, Slot
from .restoration import (
    DEFAULT_MAX_RETAINED, LendingPeriod, RestorationEpisode, RestorationListener, RestorationTracker,
)
from .retry_hint import RetryHint

__all__ = ["Admission"]

_NO_SIZE = RequestSize()


class Admission:
    """Grants capacity per ``policy``; keeps lending periods and restoration episodes."""

    def __init__(
        self,
        policy: AdmissionPolicy,
        *,
        wait_timeout_s: float = 30.0,
        queue_limit: int = 256,
        retry_hint: RetryHint | None = None,
        listeners: Iterable[RestorationListener] = (),
        on_waiter_granted: Callable[[Waiter], None] | None = None,
        on_preempt: Callable[[Grant, Any], None] | None = None,
        max_retained: int = DEFAULT_MAX_RETAINED,
    ) -> None:
        self.policy = policy
        self.wait_timeout_s = wait_timeout_s
        self.queue_limit = queue_limit
        self.retry_hint = retry_hint or RetryHint()
        # An episode is judged by the budget of the policy in force at its t0, whatever the shell.
        self.tracker = RestorationTracker(list(listeners), max_retained=max_retained,
                                          restore_budget_s=lambda: self.policy.restore_budget_s)
        #: Called whenever a queued request is granted (the live shell wakes its future here).
        self.on_waiter_granted = on_waiter_granted
        #: Called with a grant the policy takes back at restoration and its ``policies.budget.Preemption``.
        #: The shell aborts the upstream request, answers its client and then releases the grant
        #: (``release(..., completed=False)``); it must not call back into the core from inside.
        self.on_preempt = on_preempt
        #: Listeners of the lending decisions (refusals, resumes, preemptions): ``GateSpans``.
        self._decision_listeners = [
            listener for listener in self.tracker.listeners if hasattr(listener, "loan_refused")
        ]
        self._sizes: dict[int, RequestSize] = {}
        #: The latest time the core was told (``next_deadline_s`` asks the policy from it).
        self._latest_s = -math.inf
        self.counters = Counters()
        self._queues: dict[str, deque[Waiter]] = {c: deque() for c in TRAFFIC_CLASSES}
        self._in_flight: dict[int, Grant] = {}
        self._own: dict[str, int] = dict.fromkeys(TRAFFIC_CLASSES, 0)
        self._borrowed: set[int] = set()
        self._next_grant_id = 1
        self._next_seq = 1
        #: When the protected floor, lowered by lending, takes its nominal size back (None: it has).
        self._floor_restore_s: float | None = None
        #: The shell shuts down (``drain``): a request that would queue is rejected at once.
        self.draining = False

    # --- state ---------------------------------------------------------------------------------

    def occupancy(self, now_s: float = 0.0, size: RequestSize | None = None) -> Occupancy:
        return Occupancy(dict(self._own), len(self._borrowed), {c: len(q) for c, q in self._queues.items()},
                         floor_lowered=self._floor_restore_s is not None, now_s=now_s, size=size)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._queues.values())

    @property
    def periods(self) -> deque[LendingPeriod]:
        """The most recent lending periods, oldest first (``max_retained``)."""
        return self.tracker.periods

    @property
    def episodes(self) -> deque[RestorationEpisode]:
        """The most recent restoration episodes, oldest first (``max_retained``)."""
        return self.tracker.episodes

    def unfinished(self) -> tuple[list[LendingPeriod], list[RestorationEpisode]]:
        """The periods and episodes still open, retained or not: what a run's end must flush."""
        return self.tracker.unfinished()

    def next_deadline_s(self, now_s: float | None = None) -> float | None:
        """Earliest queued deadline, floor restoration, or (with requests queued) time the policy
        may admit them (``next_decision_s``, after ``now_s``: by default the latest time the core
        was told): when a shell must call ``expire``."""
        queued = [w.deadline_s for q in self._queues.values() for w in q]
        deadlines = list(queued)
        if self._floor_restore_s is not None:
            deadlines.append(self._floor_restore_s)
        if queued:
            decision_s = self.policy.next_decision_s(self._latest_s if now_s is None else now_s)
            if decision_s is not None:
                deadlines.append(decision_s)
        return min(deadlines) if deadlines else None

    # --- transitions ---------------------------------------------------------------------------

    def request(
        self, request_id: str, traffic_class: str, now_s: float, *, wait_timeout_s: float | None = None,
        size: RequestSize | None = None,
    ) -> Decision:
        """A request arrives: a ``Grant`` now, a ``Waiter`` in the queue, or a ``Rejection``.

        ``size`` is what the gate knows of the request's size (budget-aware lenders read it).
        """
        if traffic_class not in self._queues:
            raise ValueError(f"unknown traffic class {traffic_class!r}; use {', '.join(TRAFFIC_CLASSES)}")
        size = _NO_SIZE if size is None else size
        self._latest_s = max(self._latest_s, now_s)
        self._restore_floor_if_due(now_s)
        self.policy.observe_arrival(traffic_class, size, now_s)
        protected = self.policy.protected_class
        if traffic_class == protected and self.occupancy().idle(protected):
            self._protected_returned(request_id, now_s)
        occupancy = self.occupancy(now_s, size)
        queue = self._queues[traffic_class]
        ahead = self.queued if self.policy.shared_queue else len(queue)
        if ahead == 0:
            slot = self.policy.admit(traffic_class, occupancy)
            if slot is not None:
                return self._grant(request_id, traffic_class, slot, now_s, now_s, size)
            refusal = self.policy.refusal(traffic_class, occupancy)
            if refusal is not None:
                for listener in self._decision_listeners:
                    listener.loan_refused(request_id, refusal, now_s)
        timeout_s = self.wait_timeout_s if wait_timeout_s is None else wait_timeout_s
        # A policy that sets its own queue per class (the lenders) decides that class's wait.
        timeout_s = self.policy.class_wait_s.get(traffic_class, timeout_s)
        if self.draining:
            return self._reject(request_id, traffic_class, REJECT_DRAINING, now_s, now_s, ahead)
        if timeout_s <= 0:
            return self._reject(request_id, traffic_class, REJECT_CONCURRENCY, now_s, now_s, ahead)
        if len(queue) >= self.queue_limit:
            return self._reject(request_id, traffic_class, REJECT_QUEUE_LIMIT, now_s, now_s, ahead)
        waiter = Waiter(self._next_seq, request_id, traffic_class, now_s, now_s + timeout_s, size=size)
        self._next_seq += 1
        queue.append(waiter)
        return waiter

    def release(self, grant: Grant, now_s: float, *, completed: bool = True) -> list[Grant]:
        """The granted request finished (``completed`` False: it failed or was taken back).

        Returns grants made to queued requests.
        """
        if self._in_flight.pop(grant.grant_id, None) is not grant:
            raise GrantError(f"grant {grant.grant_id} ({grant.request_id}) is not in flight: released twice?")
        grant.released_at_s = now_s
        self._latest_s = max(self._latest_s, now_s)
        self._restore_floor_if_due(now_s)
        self.counters.released += 1
        self.retry_hint.observe_completion(now_s)
        self._sizes.pop(grant.grant_id, None)
        if grant.slot == "borrowed":
            self._borrowed.discard(grant.grant_id)
            self.tracker.borrowed_released(grant.grant_id, now_s)
        else:
            self._own[grant.traffic_class] -= 1
        self.policy.observe_release(grant.grant_id, self.occupancy(now_s), now_s, completed=completed)
        return self._pump(now_s)

    def first_byte(self, grant: Grant, now_s: float) -> list[Grant]:
        """The granted request's first body byte came back from the engine (its first token when
        streamed): the end of a returning request's restoration, and the lenders' prefill sample.
        Returns grants made to queued requests (progress may make a refused loan fit)."""
        self.policy.observe_first_byte(grant.grant_id, now_s)
        self.tracker.first_byte(grant.request_id, now_s)
        return self._redecide_on_progress(now_s)

    def streamed(self, grant: Grant, now_s: float, tokens: int = 1) -> list[Grant]:
        """Output tokens of the granted request passed the gate: a loan's progress, as the gate sees
        it. Returns grants made to queued requests."""
        self.policy.observe_tokens(grant.grant_id, tokens, now_s)
        return self._redecide_on_progress(now_s)

    def _redecide_on_progress(self, now_s: float) -> list[Grant]:
        # Only a policy that predicts from progress can change its mind here; with nobody queued
        # there is nothing to decide (the common case costs one comparison per token).
        if not self.queued or self.policy.restore_budget_s is None:
            return []
        self._latest_s = max(self._latest_s, now_s)
        self._restore_floor_if_due(now_s)
        return self._pump(now_s)

    def withdraw(self, waiter: Waiter, now_s: float, reason: str = REJECT_WITHDRAWN) -> Grant | Rejection:
        """Take a waiter out of the queue (timeout seen by the shell, client gone).

        If it was granted meanwhile the grant is returned and the caller owns it (release it).
        Grants this makes to other waiters are found on their ``Waiter.grant``.
        """
        if waiter.grant is not None:
            return waiter.grant
        self._latest_s = max(self._latest_s, now_s)
        self._restore_floor_if_due(now_s)  # the queues are re-decided below: under the floor of now
        rejection = self._remove(waiter, now_s, reason)
        self._pump(now_s)
        return rejection

    def expire(self, now_s: float) -> tuple[list[Rejection], list[Grant]]:
        """Reject every queued request whose deadline is at or before ``now_s``.

        Returns the rejections and any grants that the freed queue places allowed.
        """
        self._latest_s = max(self._latest_s, now_s)
        self._restore_floor_if_due(now_s)
        expired = sorted((w for q in self._queues.values() for w in q if w.deadline_s <= now_s), key=lambda w: w.seq)
        rejections = [self._remove(waiter, now_s, REJECT_TIMEOUT) for waiter in expired]
        # Re-decided whatever expired: a hold-off may have ended with nobody leaving the queue.
        return rejections, self._pump(now_s)

    def set_policy(self, policy: AdmissionPolicy, now_s: float) -> list[Grant]:
        """Swap the policy; grants in flight keep their slots. Lending stops if the new policy differs."""
        self.policy = policy
        for grant in self._in_flight.values():  # the new policy's books start with what is in flight
            policy.observe_grant(grant.grant_id, grant.traffic_class, grant.slot,
                                 self._sizes.get(grant.grant_id, _NO_SIZE), grant.granted_at_s)
        self._floor_restore_s = None  # the new policy's floors hold from now
        self.tracker.floor_restored(now_s)
        return self._pump(now_s)

    def drain(self, now_s: float) -> list[Waiter]:
        """The shell shuts down: reject every queued request (``REJECT_DRAINING``), and from now on
        every request that would queue. Returns the rejected waiters (each with its ``rejection``):
        the shell answers them now rather than when their wait would have ended, past the shutdown.
        """
        self.draining = True
        self._latest_s = max(self._latest_s, now_s)
        drained = sorted((w for q in self._queues.values() for w in q), key=lambda w: w.seq)
        for waiter in drained:
            self._remove(waiter, now_s, REJECT_DRAINING)
        return drained

    def close(self, now_s: float) -> None:
        """End of a run: stop lending so open periods finish as their borrowed work drains."""
        self._restore_floor_if_due(now_s)
        self.tracker.stop_lending(now_s)

    # --- internals -----------------------------------------------------------------------------

    def _protected_returned(self, request_id: str, now_s: float) -> None:
        """Protected demand is back: its floor comes back now, or when the lending controller says."""
        restore_s = self.policy.floor_restored_at(now_s)
        if restore_s <= now_s:
            self.tracker.stop_lending(now_s)  # lending ends before the episode opens, as it did without a controller
        self.policy.observe_return(now_s)
        self.tracker.protected_returned(request_id, now_s, set(self._borrowed))
        if restore_s <= now_s:
            self._floor_restored(now_s)
        elif self._floor_restore_s is None:
            self._floor_restore_s = restore_s

    def _restore_floor_if_due(self, now_s: float) -> None:
        if self._floor_restore_s is not None and self._floor_restore_s <= now_s:
            restore_s, self._floor_restore_s = self._floor_restore_s, None
            self._floor_restored(restore_s)

    def _floor_restored(self, at_s: float) -> None:
        self.tracker.floor_restored(at_s)
        for preemption in self.policy.preemptions(at_s):
            grant = self._in_flight.get(preemption.grant_id)
            if grant is None:
                continue
            for listener in self._decision_listeners:
                listener.preempted(grant.request_id, preemption, at_s)
            if self.on_preempt is not None:
                self.on_preempt(grant, preemption)

    def _remove(self, waiter: Waiter, now_s: float, reason: str) -> Rejection:
        if waiter.rejection is not None:
            return waiter.rejection
        queue = self._queues[waiter.traffic_class]
        ahead = sum(1 for w in queue if w.seq < waiter.seq)
        queue.remove(waiter)
        waiter.rejection = self._reject(
            waiter.request_id, waiter.traffic_class, reason, waiter.requested_at_s, now_s, ahead
        )
        return waiter.rejection

    def _grant(self, request_id: str, traffic_class: str, slot: Slot, requested_at_s: float, now_s: float,
               size: RequestSize = _NO_SIZE) -> Grant:
        grant = Grant(self._next_grant_id, request_id, traffic_class, slot, requested_at_s, now_s)
        self._next_grant_id += 1
        self._in_flight[grant.grant_id] = grant
        self.counters.admitted[traffic_class] += 1
        if size is not _NO_SIZE:
            self._sizes[grant.grant_id] = size
        if slot == "borrowed":
            resumed = self.policy.resumed(now_s)
            if resumed is not None:
                for listener in self._decision_listeners:
                    listener.lending_resumed(request_id, resumed, now_s)
        self.policy.observe_grant(grant.grant_id, traffic_class, slot, size, now_s)
        if slot == "borrowed":
            self._borrowed.add(grant.grant_id)
            self.tracker.borrowed_granted(grant.grant_id, now_s, self.policy.lendable_slots, len(self._borrowed))
        else:
            self._own[traffic_class] += 1
        return grant

    def _reject(
        self, request_id: str, traffic_class: str, reason: str, requested_at_s: float, now_s: float, ahead: int
    ) -> Rejection:
        counts = self.counters.withdrawn if reason == REJECT_WITHDRAWN else self.counters.rejected
        counts[traffic_class] += 1
        return Rejection(request_id, traffic_class, reason, requested_at_s, now_s, self.retry_hint.estimate_ms(ahead))

    def _pump(self, now_s: float) -> list[Grant]:
        granted: list[Grant] = []
        while (grant := self._grant_one_head(now_s)) is not None:
            granted.append(grant)
        return granted

    def _grant_one_head(self, now_s: float) -> Grant | None:
        heads = [q[0] for q in self._queues.values() if q]
        if self.policy.shared_queue:
            # One FIFO: only the oldest waiter may go next.
            heads = sorted(heads, key=lambda w: w.seq)[:1]
        else:
            protected = self.policy.protected_class
            heads.sort(key=lambda w: (w.traffic_class != protected, w.seq))
        for waiter in heads:
            slot = self.policy.admit(waiter.traffic_class, self.occupancy(now_s, waiter.size))
            if slot is not None:
                self._queues[waiter.traffic_class].popleft()
                waiter.grant = self._grant(waiter.request_id, waiter.traffic_class, slot, waiter.requested_at_s, now_s,
                                           waiter.size)
                if self.on_waiter_granted is not None:
                    self.on_waiter_granted(waiter)
                return waiter.grant
        return None
