"""Stateful property test: whatever arrives, finishes, fails, disconnects or times out, no grant leaks.

Drives the admission core the way both shells do (the proxy's failure paths all end in ``release``
or ``withdraw``). Invariants after every step: the core's occupancy equals the grants the test holds,
floors and loan limits hold; at the end, releasing what is held leaves zero occupancy and every
lending period and restoration episode drained.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from restorelens.gate.admission import Admission, Grant, Rejection, Waiter
from restorelens.gate.policies import FcfsPolicy, LendPolicy, StaticPolicy

FLOORS = {"interactive": 3, "batch": 1}
POLICY_MAKERS = {
    "lend": lambda: LendPolicy(FLOORS, lendable_slots=2),
    "static": lambda: StaticPolicy(FLOORS),
    "fcfs": lambda: FcfsPolicy(capacity=4),
}


class GrantSafety(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now_s = 1_000.0
        self.grants: list[Grant] = []
        self.waiters: list[Waiter] = []
        self.admission = Admission(POLICY_MAKERS["lend"](), wait_timeout_s=2.0, queue_limit=3,
                                   on_waiter_granted=self._granted)
        self.next_id = 0
        self.policy_changed = False

    def _granted(self, waiter: Waiter) -> None:
        self.waiters.remove(waiter)
        assert waiter.grant is not None
        self.grants.append(waiter.grant)

    @rule(dt=st.floats(0, 1.5), traffic_class=st.sampled_from(["interactive", "batch"]), wait=st.sampled_from([None, 0.0, 0.5]))
    def arrive(self, dt: float, traffic_class: str, wait: float | None) -> None:
        self.now_s += dt
        self.next_id += 1
        decision = self.admission.request(f"r{self.next_id}", traffic_class, self.now_s, wait_timeout_s=wait)
        if isinstance(decision, Grant):
            self.grants.append(decision)
        elif isinstance(decision, Waiter):
            self.waiters.append(decision)
        else:
            assert isinstance(decision, Rejection)

    @precondition(lambda self: self.grants)
    @rule(dt=st.floats(0, 3), index=st.integers(0, 100), how=st.sampled_from(["completed", "upstream_error", "client_gone", "timeout"]))
    def finish(self, dt: float, index: int, how: str) -> None:
        # Every way a forwarded request ends is one release in the shell's finally.
        self.now_s += dt
        grant = self.grants.pop(index % len(self.grants))
        self.admission.release(grant, self.now_s)

    @precondition(lambda self: self.waiters)
    @rule(dt=st.floats(0, 1), index=st.integers(0, 100))
    def disconnect_while_queued(self, dt: float, index: int) -> None:
        self.now_s += dt
        waiter = self.waiters[index % len(self.waiters)]
        answer = self.admission.withdraw(waiter, self.now_s)
        assert isinstance(answer, Rejection)
        self.waiters.remove(waiter)

    @rule(dt=st.floats(0, 3))
    def expire(self, dt: float) -> None:
        self.now_s += dt
        rejections, _ = self.admission.expire(self.now_s)
        gone = {id(r) for r in rejections}
        self.waiters = [w for w in self.waiters if w.rejection is None or id(w.rejection) not in gone]

    @rule(name=st.sampled_from(sorted(POLICY_MAKERS)))
    def change_policy(self, name: str) -> None:
        self.policy_changed = True
        self.admission.set_policy(POLICY_MAKERS[name](), self.now_s)

    @invariant()
    def occupancy_matches_held_grants(self) -> None:
        occupancy = self.admission.occupancy()
        assert self.admission.in_flight == len(self.grants)
        assert occupancy.borrowed == sum(g.slot == "borrowed" for g in self.grants)
        for traffic_class in FLOORS:
            assert occupancy.own[traffic_class] == sum(g.slot == "own" and g.traffic_class == traffic_class for g in self.grants)
            assert occupancy.queued[traffic_class] == sum(w.traffic_class == traffic_class for w in self.waiters)
        if not self.policy_changed:  # limits of the lend policy hold while it is the only policy seen
            assert occupancy.borrowed <= 2
            assert occupancy.own["interactive"] + occupancy.borrowed <= FLOORS["interactive"]
            assert occupancy.own["batch"] <= FLOORS["batch"]

    def teardown(self) -> None:
        for waiter in list(self.waiters):
            self.admission.withdraw(waiter, self.now_s)
        while self.grants:
            self.now_s += 0.1
            self.admission.release(self.grants.pop(0), self.now_s)
            for waiter in list(self.waiters):  # a release may admit a waiter the loop above missed
                self.admission.withdraw(waiter, self.now_s)
        self.admission.close(self.now_s)
        occupancy = self.admission.occupancy()
        assert self.admission.in_flight == 0 and occupancy.borrowed == 0 and self.admission.queued == 0
        assert sum(occupancy.own.values()) == 0
        assert all(p.finished for p in self.admission.periods)
        assert all(e.borrowed_drained_s is not None for e in self.admission.episodes)
        assert self.admission.counters.released == sum(self.admission.counters.admitted.values())


GrantSafety.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestGrantSafety = GrantSafety.TestCase
