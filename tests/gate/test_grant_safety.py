"""Stateful property test: whatever arrives, streams, finishes, fails, disconnects, times out or is
taken back, no grant leaks.

Drives the admission core the way both shells do (the proxy's failure paths all end in ``release``
or ``withdraw``; a preempted loan is released with ``completed=False`` once the shell aborted it, at
the machine's next step; the core is called back at each deadline it gives). One machine per
starting policy, the study's and the lenders of issue #19. Invariants after every step: the core's
occupancy equals the grants the test holds; floors, loan (never past ``lendable_slots``) and
extra-slot limits hold; only held loans predicted past the budget, and out at the restoration, are
taken back; no waiter the policy would admit is left waiting. At the end, releasing what is held
drains every queue (each waiter granted or timed out), leaves zero occupancy and every lending
period and restoration episode drained, and every preempted grant was released exactly once.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from restorelens.gate.admission import Admission
from restorelens.gate.grants import Grant, Rejection, Waiter
from restorelens.gate.policies.budget import BudgetLendPolicy, PreemptLendPolicy, Preemption
from restorelens.gate.policies.floors import LendPolicy, StaticPolicy
from restorelens.gate.policies.interface import AdmissionPolicy, Occupancy, RequestSize
from restorelens.gate.policies.priority_lend import PriorityLendPolicy
from restorelens.gate.policies.shared_cap import FcfsPolicy

FLOORS = {"interactive": 3, "batch": 1}
LENDABLE_SLOTS = 2
EXTRA_SLOTS = 1
BUDGET_S = 1.0
# A short hold-off prior, so that lending resumes within a run of 40 steps of up to 3 s, and a batch
# queue that turns over within a run (at 120 s, three long requests would keep it full for good).
LENDER = {"restore_budget_s": BUDGET_S, "hold_off_prior_s": 0.25, "borrower_wait_s": 5.0}
POLICY_MAKERS: dict[str, Callable[[], AdmissionPolicy]] = {
    "lend": lambda: LendPolicy(FLOORS, lendable_slots=LENDABLE_SLOTS),
    "static": lambda: StaticPolicy(FLOORS),
    "fcfs": lambda: FcfsPolicy(capacity=4),
    "lend-budget": lambda: BudgetLendPolicy(FLOORS, LENDABLE_SLOTS, **LENDER),
    # 48 blocks of 16 tokens: a returning request's 32 blocks (the prior) and a few requests fit.
    "lend-budget-kv": lambda: BudgetLendPolicy(FLOORS, LENDABLE_SLOTS, kv_blocks=48, block_size=16, **LENDER),
    "lend-preempt": lambda: PreemptLendPolicy(FLOORS, LENDABLE_SLOTS, **LENDER),
    "lend-preempt-controller": lambda: PreemptLendPolicy(FLOORS, LENDABLE_SLOTS, control_period_s=1.0, **LENDER),
    "lend-priority": lambda: PriorityLendPolicy(FLOORS, LENDABLE_SLOTS, extra_slots=EXTRA_SLOTS),
}
#: At the lenders' priors (2 ms per prompt token, 50 ms per output token) and a 1 s budget: a loan
#: past it (first: the one to preempt), one within it, one whose prefill alone is near it, and a
#: request whose size the gate could not tell.
SIZES = st.sampled_from([RequestSize(100, 40), RequestSize(10, 10), RequestSize(400, 10), RequestSize()])

def within_limits(policy: AdmissionPolicy, occupancy: Occupancy) -> bool:
    """What the policy allows in flight at once (the lenders' loans count against the protected floor)."""
    own_interactive, own_batch = occupancy.own["interactive"], occupancy.own["batch"]
    if isinstance(policy, FcfsPolicy):
        return occupancy.in_flight() <= 4
    if isinstance(policy, PriorityLendPolicy):
        return occupancy.in_flight() <= sum(FLOORS.values()) + EXTRA_SLOTS
    return own_interactive + occupancy.borrowed <= FLOORS["interactive"] and own_batch <= FLOORS["batch"]


class PreemptionLog:
    """A listener of the core's lending decisions, as ``GateSpans`` is one: when each loan was taken back."""

    def __init__(self) -> None:
        self.at_s: dict[str, float] = {}

    def preempted(self, request_id: str, preemption: Preemption, now_s: float) -> None:
        self.at_s[request_id] = now_s

    def loan_refused(self, *_: object) -> None: ...

    def lending_resumed(self, *_: object) -> None: ...

    def lend_started(self, *_: object) -> None: ...

    def lend_finished(self, *_: object) -> None: ...

    def restore_started(self, *_: object) -> None: ...

    def restore_finished(self, *_: object) -> None: ...


class GrantSafety(RuleBasedStateMachine):
    start = "lend"

    def __init__(self) -> None:
        super().__init__()
        self.now_s = 1_000.0
        self.grants: list[Grant] = []
        self.waiters: list[Waiter] = []
        self.first_bytes: set[int] = set()
        #: Grants the core took back, waiting for the shell to release them (at the next step).
        self.taken_back: list[Grant] = []
        self.preempted: set[int] = set()
        self.preempted_released: list[int] = []
        #: What was wrong with a preemption (the core's callback must not raise: it would leave it half-way).
        self.bad_preemptions: list[str] = []
        self.preemption_log = PreemptionLog()
        self.admission = Admission(POLICY_MAKERS[self.start](), wait_timeout_s=2.0, queue_limit=3,
                                   listeners=[self.preemption_log], on_waiter_granted=self._granted,
                                   on_preempt=self._preempt)
        self.next_id = 0
        self.policy_changed = False
        #: The step's last call into the core re-decided the queues at ``now_s``.

    def _granted(self, waiter: Waiter) -> None:
        self.waiters.remove(waiter)
        assert waiter.grant is not None
        self.grants.append(waiter.grant)

    def _preempt(self, grant: Grant, preemption: Preemption) -> None:
        # As the proxy does: abort the upstream request; its task releases the grant afterwards.
        if grant not in self.grants:
            self.bad_preemptions.append(f"grant {grant.grant_id} is not held (released, or preempted twice)")
            return
        if not (grant.slot == "borrowed" and preemption.grant_id == grant.grant_id
                and preemption.remaining_s > self.admission.policy.restore_budget_s and preemption.retry_after_ms >= 1):
            self.bad_preemptions.append(f"{grant} taken back as {preemption}")
        # A restoration takes back what it found lent, and what the engine computed for it is lost.
        at_s = self.preemption_log.at_s[grant.request_id]
        if grant.granted_at_s > at_s or preemption.lost_tokens < 0:
            self.bad_preemptions.append(f"{grant} taken back at {at_s} as {preemption}")
        self.grants.remove(grant)
        self.taken_back.append(grant)
        self.preempted.add(grant.grant_id)

    def _release_taken_back(self) -> None:
        while self.taken_back:
            grant = self.taken_back.pop(0)
            self.admission.release(grant, self.now_s, completed=False)
            self.preempted_released.append(grant.grant_id)

    def _step(self, dt: float) -> None:
        """The shell's next step: what it took back is released, then time moves on, and the shell
        calls the core back at each deadline it gave on the way (as the virtual loop and the proxy's
        timer do: queue timeouts, the floor's restoration, a hold-off's end)."""
        self._release_taken_back()
        until_s = self.now_s + dt
        for _ in range(100):
            deadline_s = self.admission.next_deadline_s()
            if deadline_s is None or deadline_s > until_s:
                break
            self.now_s = max(self.now_s, deadline_s)
            self._expire()
            self._release_taken_back()
        else:
            raise AssertionError(f"the core keeps asking to be called back at {deadline_s}, now {self.now_s}")
        self.now_s = until_s

    @initialize(sizes=st.lists(SIZES, max_size=3))
    def batch_backlog(self, sizes: list[RequestSize]) -> None:
        # Batch work at the start, interactive idle: the batch floor, then loans (most runs lend).
        for size in sizes:
            self._arrive("batch", None, size)

    # Batch twice as often as interactive: a loan needs the batch floor busy.
    @rule(dt=st.floats(0, 1.5), traffic_class=st.sampled_from(["batch", "batch", "interactive"]),
          wait=st.sampled_from([None, 0.0, 0.5]), size=SIZES)
    def arrive(self, dt: float, traffic_class: str, wait: float | None, size: RequestSize) -> None:
        self._step(dt)
        self._arrive(traffic_class, wait, size)

    @rule(dt=st.floats(0, 1.5), duration_s=st.floats(0, 0.5))
    def interactive_visit(self, dt: float, duration_s: float) -> None:
        # A short interactive request served from start to end: demand returns and goes idle again.
        self._step(dt)
        decision = self._arrive("interactive", None, RequestSize(50, 20), hold=False)
        if isinstance(decision, Grant):
            self.admission.first_byte(decision, self.now_s + duration_s / 2)
            self.now_s += duration_s
            self.admission.release(decision, self.now_s)

    def _arrive(self, traffic_class: str, wait: float | None, size: RequestSize, *, hold: bool = True) -> object:
        self.next_id += 1
        decision = self.admission.request(f"r{self.next_id}", traffic_class, self.now_s, wait_timeout_s=wait, size=size)
        if isinstance(decision, Grant):
            if hold:
                self.grants.append(decision)
        elif isinstance(decision, Waiter):
            self.waiters.append(decision)
        else:
            assert isinstance(decision, Rejection)
        return decision

    @precondition(lambda self: self.grants)
    @rule(dt=st.floats(0, 1), index=st.integers(0, 100), tokens=st.integers(0, 5))
    def stream(self, dt: float, index: int, tokens: int) -> None:
        # The first chunk, then output tokens as they pass the gate (the lenders learn the pace).
        self._step(dt)
        if not self.grants:
            return
        grant = self.grants[index % len(self.grants)]
        if grant.grant_id not in self.first_bytes:
            self.first_bytes.add(grant.grant_id)
            self.admission.first_byte(grant, self.now_s)
        elif tokens:
            self.admission.streamed(grant, self.now_s, tokens)

    @precondition(lambda self: self.grants)
    @rule(dt=st.floats(0, 3), index=st.integers(0, 100), how=st.sampled_from(["completed", "upstream_error", "client_gone", "timeout"]))
    def finish(self, dt: float, index: int, how: str) -> None:
        # Every way a forwarded request ends is one release in the shell's finally.
        self._step(dt)
        if not self.grants:
            return
        grant = self.grants.pop(index % len(self.grants))
        self.admission.release(grant, self.now_s, completed=how == "completed")

    @precondition(lambda self: self.waiters)
    @rule(dt=st.floats(0, 1), index=st.integers(0, 100))
    def disconnect_while_queued(self, dt: float, index: int) -> None:
        self._step(dt)
        if not self.waiters:
            return
        waiter = self.waiters[index % len(self.waiters)]
        answer = self.admission.withdraw(waiter, self.now_s)
        assert isinstance(answer, Rejection)
        self.waiters.remove(waiter)

    @rule(dt=st.floats(0, 3))
    def expire(self, dt: float) -> None:
        self._step(dt)
        self._expire()

    def _expire(self) -> None:
        rejections, _ = self.admission.expire(self.now_s)
        gone = {id(r) for r in rejections}
        self.waiters = [w for w in self.waiters if w.rejection is None or id(w.rejection) not in gone]

    @rule(name=st.sampled_from(sorted(POLICY_MAKERS)))
    def change_policy(self, name: str) -> None:
        self._step(0)
        self.policy_changed = True
        self.admission.set_policy(POLICY_MAKERS[name](), self.now_s)

    @invariant()
    def occupancy_matches_held_grants(self) -> None:
        occupancy = self.admission.occupancy()
        held = self.grants + self.taken_back
        assert self.admission.in_flight == len(held)
        assert occupancy.borrowed == sum(g.slot == "borrowed" for g in held)
        for traffic_class in FLOORS:
            assert occupancy.own[traffic_class] == sum(g.slot == "own" and g.traffic_class == traffic_class for g in held)
            assert occupancy.queued[traffic_class] == sum(w.traffic_class == traffic_class for w in self.waiters)

    # Limits of the starting policy hold while it is the only policy seen (grants of another policy
    # stay in flight after a change).

    @invariant()
    def borrowed_within_lendable_slots(self) -> None:
        if not self.policy_changed:
            assert self.admission.occupancy().borrowed <= self.admission.policy.lendable_slots

    @invariant()
    def within_the_policys_limits(self) -> None:
        if not self.policy_changed:
            occupancy = self.admission.occupancy()
            assert within_limits(self.admission.policy, occupancy), occupancy

    @invariant()
    def only_held_loans_past_the_budget_are_taken_back(self) -> None:
        assert not self.bad_preemptions

    @invariant()
    def no_admissible_waiter_left_waiting(self) -> None:
        # Whoever is first in a queue waits only while the policy would not admit it now.
        policy = self.admission.policy
        heads: dict[str, Waiter] = {}
        for waiter in sorted(self.waiters, key=lambda w: w.seq):
            heads.setdefault("all" if policy.shared_queue else waiter.traffic_class, waiter)
        for waiter in heads.values():
            slot = policy.admit(waiter.traffic_class, self.admission.occupancy(self.now_s, waiter.size))
            assert slot is None, f"{waiter.request_id} ({waiter.traffic_class}) waits for a {slot} slot it may have"

    def teardown(self) -> None:
        # Release everything the shell holds and let time run: every waiter is granted (and
        # released) or times out, whatever the policy.
        for _ in range(1_000):
            self._release_taken_back()
            if self.grants:
                self.now_s += 0.1
                self.admission.release(self.grants.pop(0), self.now_s)
            elif (deadline_s := self.admission.next_deadline_s()) is not None:
                self.now_s = max(self.now_s, deadline_s)
                self._expire()
            else:
                break
        assert not self.grants and not self.waiters and not self.taken_back
        self.admission.close(self.now_s)
        occupancy = self.admission.occupancy()
        assert self.admission.in_flight == 0 and occupancy.borrowed == 0 and self.admission.queued == 0
        assert sum(occupancy.own.values()) == 0
        assert all(p.finished for p in self.admission.periods)
        assert all(e.borrowed_drained_s is not None for e in self.admission.episodes)
        assert self.admission.counters.released == sum(self.admission.counters.admitted.values())
        assert sorted(self.preempted_released) == sorted(self.preempted)  # each released once, none missed


def machine_for(start: str) -> type[GrantSafety]:
    machine = type(f"GrantSafety[{start}]", (GrantSafety,), {"start": start})
    machine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
    return machine


TestGrantSafety = machine_for("lend").TestCase
TestGrantSafetyLendBudget = machine_for("lend-budget").TestCase
TestGrantSafetyLendBudgetKv = machine_for("lend-budget-kv").TestCase
TestGrantSafetyLendPreempt = machine_for("lend-preempt").TestCase
TestGrantSafetyLendPreemptController = machine_for("lend-preempt-controller").TestCase
TestGrantSafetyLendPriority = machine_for("lend-priority").TestCase
