"""The admission core in virtual time: scripted arrivals, exact grant, restoration and drain times."""

from __future__ import annotations

import pytest

from restorelens.errors import SettingError
from restorelens.gate.admission import Admission
from restorelens.gate.grants import Grant, GrantError, Rejection, Waiter
from restorelens.gate.policies.floors import LendPolicy, StaticPolicy
from restorelens.gate.policies.shared_cap import FcfsPolicy, PriorityPolicy

T0 = 1_000.0  # any epoch works: the core only sees the numbers it is given


class Script:
    """Drives one Admission with named requests; remembers grants to release them by name."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        self.grants: dict[str, Grant] = {}
        self.waiters: dict[str, Waiter] = {}
        self.granted_at: dict[str, float] = {}

    def arrive(self, name: str, traffic_class: str, t: float, wait_timeout_s: float | None = None) -> object:
        decision = self.admission.request(name, traffic_class, T0 + t, wait_timeout_s=wait_timeout_s)
        if isinstance(decision, Grant):
            self._granted(decision)
        elif isinstance(decision, Waiter):
            self.waiters[name] = decision
        return decision

    def finish(self, name: str, t: float) -> list[str]:
        newly = self.admission.release(self.grants.pop(name), T0 + t)
        for grant in newly:
            self._granted(grant)
        return [g.request_id for g in newly]

    def _granted(self, grant: Grant) -> None:
        self.grants[grant.request_id] = grant
        self.granted_at[grant.request_id] = grant.granted_at_s - T0


def rel(t: float | None) -> float | None:
    return None if t is None else t - T0


def test_lend_episode_has_exact_restore_and_drain_times() -> None:
    run = Script(Admission(LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2)))
    run.arrive("i1", "interactive", 0)
    run.finish("i1", 1)
    assert run.arrive("b1", "batch", 2).slot == "own"
    assert run.arrive("b2", "batch", 3).slot == "borrowed"
    assert run.arrive("b3", "batch", 4).slot == "borrowed"
    assert isinstance(run.arrive("b4", "batch", 5), Waiter)  # two lent: the third protected slot never is
    assert run.admission.tracker.lending

    assert run.arrive("i2", "interactive", 10).slot == "own"  # the never-lent reserve, at once
    assert not run.admission.tracker.lending
    assert isinstance(run.arrive("i3", "interactive", 11), Waiter)  # reserve busy, lent slots not back
    # i2 is served and done before the lent capacity comes back; i3 takes the reserve.
    assert run.finish("i2", 12) == ["i3"]
    assert run.finish("b2", 14) == []  # borrowed slot back to the protected floor; batch must not re-borrow
    assert run.finish("b1", 15) == ["b4"]  # batch's own floor frees
    assert run.granted_at["b4"] == 15
    assert run.admission.episodes[0].borrowed_drained_s is None
    run.finish("b3", 18)

    [episode] = run.admission.episodes
    assert (rel(episode.t0_s), rel(episode.grant_restored_s), rel(episode.borrowed_drained_s)) == (10, 10, 18)
    assert episode.borrowed_at_return == 2
    assert episode.returning_request_id == "i2"
    assert (episode.grant_restore_s, episode.drain_s) == (0, 8)
    [period] = run.admission.periods
    assert (rel(period.start_s), rel(period.lend_stopped_s), rel(period.borrowed_drained_s)) == (3, 10, 18)
    assert period.peak_borrowed == 2 and period.borrowed_granted == 2


def test_demand_returning_while_nothing_is_lent_opens_no_episode() -> None:
    run = Script(Admission(LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2)))
    run.arrive("b1", "batch", 0)  # fits the batch floor: nothing borrowed
    run.arrive("i1", "interactive", 1)
    assert not run.admission.episodes and not run.admission.periods

    run.arrive("b2", "batch", 2)  # would borrow, but interactive is busy: it waits
    assert "b2" not in run.grants
    run.finish("i1", 3)  # interactive idle again: b2 may borrow now
    assert run.grants["b2"].slot == "borrowed" and run.granted_at["b2"] == 3
    run.finish("b2", 4)  # the loan drained before protected demand came back
    run.arrive("i2", "interactive", 6)
    assert not run.admission.episodes
    [period] = run.admission.periods
    assert (rel(period.start_s), rel(period.lend_stopped_s), rel(period.borrowed_drained_s)) == (3, 6, 4)


def test_returning_request_that_waits_restores_the_grant_when_a_loan_finishes() -> None:
    # Two interactive requests return together: the first gets the reserve, the second waits for a
    # borrowed request to finish; the episode's grant time is the first one's.
    run = Script(Admission(LendPolicy({"interactive": 2, "batch": 1}, lendable_slots=1)))
    run.arrive("b1", "batch", 0)
    run.arrive("b2", "batch", 0.5)
    assert run.grants["b2"].slot == "borrowed"
    run.arrive("i1", "interactive", 2)
    run.arrive("i2", "interactive", 2)
    assert "i2" not in run.grants
    assert run.finish("b2", 7) == ["i2"]
    [episode] = run.admission.episodes
    assert (rel(episode.t0_s), rel(episode.grant_restored_s), rel(episode.borrowed_drained_s)) == (2, 2, 7)
    assert episode.borrowed_at_return == 1


def test_lending_resumes_before_the_last_loan_drained_and_a_second_episode_opens() -> None:
    run = Script(Admission(LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2)))
    run.arrive("b1", "batch", 0)
    run.arrive("b2", "batch", 1)  # borrowed, period 1
    run.arrive("i1", "interactive", 2)  # episode 1 (b2 outstanding)
    run.finish("i1", 3)  # interactive idle again, b2 still running
    run.arrive("b3", "batch", 4)  # borrows again: period 2 starts while period 1 is not drained
    run.arrive("i2", "interactive", 5)  # episode 2: b2 and b3 outstanding
    run.finish("i2", 5.5)
    run.finish("b2", 6)
    run.finish("b3", 9)
    first, second = run.admission.episodes
    assert (rel(first.t0_s), rel(first.grant_restored_s), rel(first.borrowed_drained_s)) == (2, 2, 6)
    assert (rel(second.t0_s), second.borrowed_at_return, rel(second.borrowed_drained_s)) == (5, 2, 9)
    p1, p2 = run.admission.periods
    assert (rel(p1.start_s), rel(p1.lend_stopped_s), rel(p1.borrowed_drained_s)) == (1, 2, 6)
    assert (rel(p2.start_s), rel(p2.lend_stopped_s), rel(p2.borrowed_drained_s)) == (4, 5, 9)


def test_static_floors_never_share_and_queued_waits_expire() -> None:
    run = Script(Admission(StaticPolicy({"interactive": 3, "batch": 1}), wait_timeout_s=5))
    run.arrive("b1", "batch", 0)
    waiter = run.arrive("b2", "batch", 1)
    assert isinstance(waiter, Waiter) and waiter.deadline_s == T0 + 6
    assert run.admission.next_deadline_s() == T0 + 6
    assert run.admission.expire(T0 + 5.9) == ([], [])
    [rejection], granted = run.admission.expire(T0 + 6)
    assert granted == [] and rejection.reason == "timeout" and rejection.wait_s == 5
    assert run.admission.counters.rejected == {"interactive": 0, "batch": 1}
    assert not run.admission.episodes and not run.admission.periods
    assert run.admission.occupancy().queued["batch"] == 0


def test_fcfs_serves_one_queue_in_arrival_order_across_classes() -> None:
    run = Script(Admission(FcfsPolicy(capacity=2)))
    run.arrive("a", "batch", 0)
    run.arrive("b", "interactive", 0.1)
    run.arrive("c", "batch", 0.2)
    run.arrive("d", "interactive", 0.3)
    assert run.finish("b", 1) == ["c"]
    assert run.finish("a", 2) == ["d"]
    assert run.grants["c"].wait_s == pytest.approx(0.8) and run.grants["d"].wait_s == pytest.approx(1.7)


def test_priority_admits_everything_and_tags_the_engine_priority() -> None:
    admission = Admission(PriorityPolicy())
    grants = [admission.request(f"r{i}", "batch", T0) for i in range(20)]
    assert all(isinstance(g, Grant) for g in grants)
    assert admission.policy.upstream_priority("interactive") == 0
    assert admission.policy.upstream_priority("batch") == 10
    assert StaticPolicy().upstream_priority("interactive") is None


def test_zero_wait_rejects_at_once_and_full_queue_rejects() -> None:
    admission = Admission(StaticPolicy({"interactive": 1, "batch": 1}), queue_limit=1)
    admission.request("i1", "interactive", T0)
    rejection = admission.request("i2", "interactive", T0, wait_timeout_s=0)
    assert isinstance(rejection, Rejection) and rejection.reason == "concurrency_limit"
    assert isinstance(admission.request("i3", "interactive", T0), Waiter)
    full = admission.request("i4", "interactive", T0)
    assert isinstance(full, Rejection) and full.reason == "queue_limit"


def test_release_twice_is_an_error_and_withdraw_returns_a_grant_made_meanwhile() -> None:
    admission = Admission(StaticPolicy({"interactive": 1, "batch": 1}))
    grant = admission.request("i1", "interactive", T0)
    waiter = admission.request("i2", "interactive", T0)
    assert isinstance(grant, Grant) and isinstance(waiter, Waiter)
    admission.release(grant, T0 + 1)
    with pytest.raises(GrantError):
        admission.release(grant, T0 + 2)
    assert admission.withdraw(waiter, T0 + 3) is waiter.grant  # granted at T0+1: caller owns it now
    admission.release(waiter.grant, T0 + 4)
    assert admission.in_flight == 0 and admission.counters.released == 2


def test_withdrawn_waiter_leaves_the_queue() -> None:
    granted: list[str] = []
    admission = Admission(StaticPolicy({"interactive": 1, "batch": 1}), on_waiter_granted=lambda w: granted.append(w.request_id))
    first = admission.request("i1", "interactive", T0)
    gone = admission.request("i2", "interactive", T0)
    admission.request("i3", "interactive", T0)
    assert isinstance(gone, Waiter) and isinstance(first, Grant)
    assert isinstance(admission.withdraw(gone, T0 + 1), Rejection)
    admission.release(first, T0 + 2)
    assert granted == ["i3"]


def test_policy_change_stops_lending_and_loans_still_drain() -> None:
    run = Script(Admission(LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2)))
    run.arrive("b1", "batch", 0)
    run.arrive("b2", "batch", 1)
    run.admission.set_policy(StaticPolicy({"interactive": 3, "batch": 1}), T0 + 2)
    run.finish("b2", 3)
    [period] = run.admission.periods
    assert (rel(period.lend_stopped_s), rel(period.borrowed_drained_s)) == (2, 3)
    assert run.admission.occupancy().borrowed == 0


def test_lend_policy_refuses_to_lend_the_last_protected_slot() -> None:
    from restorelens.errors import SettingError

    with pytest.raises(SettingError, match=r"^setting gate\.lendable_slots: "):
        LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=3)


def test_a_control_period_keeps_the_floor_lent_until_the_controllers_revision_takes_effect() -> None:
    policy = LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2, control_period_s=0.25)
    run = Script(Admission(policy))
    run.arrive("b1", "batch", 0)
    assert run.arrive("b2", "batch", 1).slot == "borrowed"
    assert run.arrive("i1", "interactive", 10.1).slot == "own"  # demand returns: the reserve at once
    # the revision is issued at the next 250-ms tick (10.25) and takes effect one period later
    assert rel(run.admission.next_deadline_s()) == 10.5
    assert run.arrive("b3", "batch", 10.3).slot == "borrowed"  # the floor is still lowered: batch borrows
    [episode] = run.admission.episodes
    assert episode.grant_restored_s is None
    assert run.admission.expire(T0 + 10.5) == ([], [])
    assert rel(episode.grant_restored_s) == 10.5 and episode.grant_restore_s == pytest.approx(0.4)
    assert isinstance(run.arrive("b4", "batch", 10.6), Waiter)  # restored: no more loans
    assert run.admission.next_deadline_s() == T0 + 10.6 + run.admission.wait_timeout_s
    run.finish("b2", 12)  # the one borrowed at return: the episode drains, although b3 still runs
    assert rel(episode.borrowed_drained_s) == 12
    [period] = run.admission.periods
    assert rel(period.lend_stopped_s) == 10.5 and period.borrowed_granted == 2


def test_without_a_control_period_the_floor_comes_back_the_moment_demand_returns() -> None:
    policy = LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2)
    assert policy.floor_restored_at(T0 + 10.1) == T0 + 10.1
    assert LendPolicy(control_period_s=0.25).floor_restored_at(10.0) == 10.5  # a return on a tick: the next one


@pytest.mark.parametrize("period", [-0.25, float("nan"), float("inf")])
def test_a_control_period_is_a_finite_number_of_seconds(period: float) -> None:
    with pytest.raises(SettingError, match="gate.control_period_s"):
        LendPolicy(control_period_s=period)


def test_history_is_bounded_and_open_records_survive_it() -> None:
    """A gate runs for months: only the last max_retained records are kept, counts stay whole."""
    run = Script(Admission(LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2), max_retained=3))
    t = 0.0
    for cycle in range(10):
        run.arrive(f"b{cycle}a", "batch", t)
        run.arrive(f"b{cycle}b", "batch", t + 0.1)  # borrowed: a lending period opens
        run.arrive(f"i{cycle}", "interactive", t + 0.2)  # demand returns: an episode opens
        for name, dt in ((f"b{cycle}a", 0.3), (f"b{cycle}b", 0.4), (f"i{cycle}", 0.5)):
            run.finish(name, t + dt)
        t += 1
    tracker = run.admission.tracker
    assert (tracker.periods_started, tracker.episodes_started) == (10, 10)
    assert [p.period_id for p in run.admission.periods] == [8, 9, 10]
    assert [e.episode_id for e in run.admission.episodes] == [8, 9, 10]
    assert tracker.dropped == 14
    assert run.admission.unfinished() == ([], [])
    # Period 11 and episode 11 stay open (their loan runs on) while newer records push them out of
    # the retained window: the run's end must still find them to flush.
    run.arrive("long", "batch", t)
    run.arrive("long-borrowed", "batch", t + 0.1)
    run.arrive("back", "interactive", t + 0.2)
    run.finish("back", t + 0.3)
    for cycle in range(4):
        run.arrive(f"late{cycle}", "batch", t + 1 + cycle)  # borrows the other lendable slot: a new period
        run.arrive(f"back{cycle}", "interactive", t + 1.2 + cycle)
        run.finish(f"late{cycle}", t + 1.3 + cycle)
        run.finish(f"back{cycle}", t + 1.4 + cycle)
    assert 11 not in [p.period_id for p in run.admission.periods]
    assert 11 not in [e.episode_id for e in run.admission.episodes]
    open_periods, open_episodes = run.admission.unfinished()
    # Every episode since waits for the same loan to drain.
    assert [p.period_id for p in open_periods] == [11] and [e.episode_id for e in open_episodes] == [11, 12, 13, 14, 15]
    run.finish("long-borrowed", t + 10)
    assert run.admission.unfinished() == ([], [])


def test_max_retained_must_keep_something() -> None:
    with pytest.raises(ValueError, match="max_retained must be at least 1"):
        Admission(StaticPolicy({"interactive": 1, "batch": 1}), max_retained=0)


def test_drain_rejects_every_queued_request_now_and_every_later_one_that_would_queue() -> None:
    admission = Admission(StaticPolicy({"interactive": 1, "batch": 1}), wait_timeout_s=30.0)
    running = admission.request("r", "batch", 0.0)
    assert isinstance(running, Grant)
    first, second = admission.request("q1", "batch", 1.0), admission.request("q2", "batch", 2.0)
    assert isinstance(first, Waiter) and isinstance(second, Waiter)
    drained = admission.drain(3.0)
    assert drained == [first, second] and admission.queued == 0
    assert [(w.rejection.reason, w.rejection.rejected_at_s) for w in drained] == [("draining", 3.0), ("draining", 3.0)]
    late = admission.request("late", "batch", 4.0)
    assert isinstance(late, Rejection) and late.reason == "draining"
    assert isinstance(admission.request("i", "interactive", 4.0), Grant)  # room is still granted
    admission.release(running, 5.0)
    assert admission.in_flight == 1
