"""The lenders of issue #19 in virtual time: scripted arrivals, sizes, first bytes, streamed tokens and
completions at given times, and the exact refusals, resumes and preemptions they cause.

Sizes are chosen so the predictions are round numbers at the priors (2 ms per prompt token, 50 ms per
output token) against a 1 s budget.
"""

from __future__ import annotations

import math

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from restorelens import spans as S
from restorelens.clock import to_ns
from restorelens.errors import SettingError
from restorelens.gate.admission import Admission
from restorelens.gate.gate_spans import GateSpans
from restorelens.gate.grants import Decision, Grant, Rejection, Waiter
from restorelens.gate.policies.budget import BudgetLendPolicy, PreemptLendPolicy, Preemption
from restorelens.gate.policies.build import build_policy
from restorelens.gate.policies.floors import LendPolicy
from restorelens.gate.policies.interface import AdmissionPolicy, RequestSize
from restorelens.gate.policies.priority_lend import PriorityLendPolicy

T0 = 1_000.0  # any epoch works: the core and the lenders only see the numbers they are given
FLOORS = {"interactive": 3, "batch": 1}
BUDGET_S = 1.0
#: 0.02 s of prefill and 0.5 s of decode at the priors: well within the budget.
SHORT = RequestSize(10, 10)
#: 0.2 s of prefill and 2 s of decode at the priors: 2.2 s, past the budget.
LONG = RequestSize(100, 40)


class Gate:
    """One ``Admission`` driven by named requests at times relative to ``T0``, as a shell drives it.

    With a tracer provider, every request gets its ``gate.request`` span (the lenders' decisions are
    events on it) and ``GateSpans`` listens to the core. Preemptions are kept for the test to act on.
    """

    def __init__(self, policy: AdmissionPolicy, tracer_provider: TracerProvider | None = None,
                 **options: object) -> None:
        self.emitter = None if tracer_provider is None else GateSpans(
            tracer_provider, policy_name=policy.name, restore_budget_s=policy.restore_budget_s)
        self.preempted: list[tuple[Grant, Preemption]] = []
        self.admission = Admission(policy, listeners=[] if self.emitter is None else [self.emitter],
                                   on_preempt=lambda grant, preemption: self.preempted.append((grant, preemption)),
                                   **options)
        self.grants: dict[str, Grant] = {}
        self._spans: dict[str, object] = {}

    def arrive(self, name: str, traffic_class: str, t: float, size: RequestSize = SHORT) -> Decision:
        if self.emitter is not None:
            self._spans[name] = self.emitter.start_request(name, traffic_class, T0 + t)
        decision = self.admission.request(name, traffic_class, T0 + t, size=size)
        if isinstance(decision, Grant):
            self.grants[name] = decision
        elif isinstance(decision, Rejection):
            self._end(name, t)
        return decision

    def finish(self, name: str, t: float, *, completed: bool = True) -> list[str]:
        newly = self.admission.release(self.grants.pop(name), T0 + t, completed=completed)
        for grant in newly:
            self.grants[grant.request_id] = grant
        self._end(name, t)
        return [grant.request_id for grant in newly]

    def stream(self, name: str, first_byte_t: float, *token_ts: float) -> None:
        """The first byte, then one output token at each of ``token_ts``."""
        grant = self.grants[name]
        self.admission.first_byte(grant, T0 + first_byte_t)
        for t in token_ts:
            self.admission.streamed(grant, T0 + t)

    def serve(self, name: str, t: float, ttfb_s: float, stream_s: float) -> None:
        """A batch request served on the batch floor from ``t``, streamed: its first byte (and token)
        and its completion as given."""
        self.arrive(name, "batch", t, RequestSize(100, 10))
        self.stream(name, t + ttfb_s, t + ttfb_s)
        self.finish(name, t + ttfb_s + stream_s)

    def _end(self, name: str, t: float) -> None:
        span = self._spans.pop(name, None)
        if span is not None:
            self.emitter.end_request(span, name, T0 + t)

    def events(self, exporter: InMemorySpanExporter, name: str) -> list[tuple[str, dict]]:
        """The lenders' events on ``name``'s ``gate.request`` spans: name and attributes."""
        return [(event.name, dict(event.attributes)) for event in self.timed_events(exporter, name)]

    def timed_events(self, exporter: InMemorySpanExporter, name: str) -> list:
        """The lenders' events on ``name``'s ``gate.request`` spans (the spans still open end first)."""
        for open_name in list(self._spans):
            self._end(open_name, 1e6)
        lender_events = (S.EVENT_LOAN_REFUSED, S.EVENT_LENDING_RESUMED, S.EVENT_LOAN_PREEMPTED)
        return [event for span in exporter.get_finished_spans()
                if span.name == S.SPAN_GATE_REQUEST and span.attributes[S.ATTR_REQUEST_ID] == name
                for event in span.events if event.name in lender_events]


def budget(**options: object) -> BudgetLendPolicy:
    return BudgetLendPolicy(FLOORS, 2, restore_budget_s=BUDGET_S, **options)


def refused(reason: str, limit_s: float, predicted_s: float | None = None) -> tuple[str, dict]:
    attributes = {S.ATTR_GATE_LOAN_REASON: reason, S.ATTR_GATE_LOAN_LIMIT_S: limit_s}
    if predicted_s is not None:
        attributes[S.ATTR_GATE_LOAN_PREDICTED_S] = pytest.approx(predicted_s)
    return S.EVENT_LOAN_REFUSED, attributes


# --- lend-budget: the budget --------------------------------------------------------------------------


def test_lend_budget_queues_a_loan_whose_predicted_drain_exceeds_the_budget(
        tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    gate = Gate(budget(), tracer_provider)
    assert gate.arrive("b1", "batch", 0).slot == "own"
    waiter = gate.arrive("b2", "batch", 1, LONG)  # lend would lend it a protected slot
    # Refused a loan, it waits for the batch floor in the lender's long batch queue (no 429).
    assert isinstance(waiter, Waiter) and waiter.deadline_s == T0 + 1 + 120
    assert gate.admission.occupancy().borrowed == 0
    assert gate.finish("b1", 3) == ["b2"]
    assert gate.grants["b2"].slot == "own"
    assert gate.events(span_exporter, "b2") == [refused("drain_over_budget", BUDGET_S, 2.2)]


def test_lend_budget_lends_when_the_predicted_drain_is_at_most_the_budget(
        tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    gate = Gate(budget(), tracer_provider)
    gate.arrive("b1", "batch", 0)
    assert gate.arrive("b2", "batch", 1, RequestSize(100, 10)).slot == "borrowed"  # 0.2 + 0.5 s
    assert gate.arrive("b3", "batch", 2, RequestSize(0, 20)).slot == "borrowed"  # exactly 1 s: at the budget
    assert gate.events(span_exporter, "b2") == gate.events(span_exporter, "b3") == []


def test_lend_budget_refuses_a_loan_whose_own_blocks_a_returning_request_would_wait_for_past_the_budget(
        tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    # A returning interactive request needs 512 tokens (the prior) = 32 blocks of 40. b1 holds 2 on
    # the batch floor; the loan would hold 10 for 3.2 s, leaving 28: the returning request would
    # wait for the loan itself (without it, 38 are free).
    gate = Gate(budget(kv_blocks=40, block_size=16), tracer_provider)
    gate.arrive("b1", "batch", 0, RequestSize(10, 10))
    assert isinstance(gate.arrive("b2", "batch", 0, RequestSize(100, 60)), Waiter)
    assert gate.admission.occupancy().borrowed == 0
    assert gate.events(span_exporter, "b2") == [refused("kv_wait_over_budget", BUDGET_S, 3.2)]


def test_kv_that_own_slot_work_holds_does_not_refuse_a_loan_it_is_not_the_cause_of(
        tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    # b1 holds 10 of 40 blocks for 3.2 s on the batch floor: a returning request (32 blocks) waits for
    # it with or without the short loan, which frees its 2 blocks within the budget.
    gate = Gate(budget(kv_blocks=40, block_size=16), tracer_provider)
    gate.arrive("b1", "batch", 0, RequestSize(100, 60))
    assert gate.arrive("b2", "batch", 0, RequestSize(10, 10)).slot == "borrowed"
    assert gate.events(span_exporter, "b2") == []


def test_a_loan_of_unknown_length_is_refused_without_an_infinite_prediction_on_the_span(
        tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    gate = Gate(budget(), tracer_provider)
    gate.arrive("b1", "batch", 0)
    assert isinstance(gate.arrive("b2", "batch", 0, RequestSize(10, 0)), Waiter)  # no max_tokens
    assert gate.events(span_exporter, "b2") == [refused("drain_over_budget", BUDGET_S)]


def test_a_loan_queued_behind_a_refused_request_is_lent_when_that_one_times_out_at_the_latest() -> None:
    gate = Gate(budget(borrower_wait_s=2.0))
    gate.arrive("b1", "batch", 0)
    refused_head = gate.arrive("long", "batch", 0, LONG)
    behind = gate.arrive("short", "batch", 0.5)
    assert isinstance(refused_head, Waiter) and isinstance(behind, Waiter)
    rejections, _ = gate.admission.expire(T0 + 2)
    assert [(r.request_id, r.reason) for r in rejections] == [("long", "timeout")]
    assert behind.grant is not None and behind.grant.slot == "borrowed" and behind.grant.granted_at_s <= T0 + 2


@pytest.mark.parametrize("kv_blocks", [None, 64])
def test_lend_budget_lends_when_the_engine_has_kv_for_a_returning_request(kv_blocks: int | None) -> None:
    gate = Gate(budget(kv_blocks=kv_blocks, block_size=16))
    gate.arrive("b1", "batch", 0, RequestSize(100, 60))
    assert gate.arrive("b2", "batch", 0, RequestSize(100, 10)).slot == "borrowed"


def test_a_returning_request_larger_than_the_kv_cache_refuses_no_loan_for_it() -> None:
    # 32 blocks can never fit in 16, with or without the loan: no loan changes that.
    gate = Gate(budget(kv_blocks=16, block_size=16))
    gate.arrive("b1", "batch", 0)
    assert gate.arrive("b2", "batch", 0, RequestSize(1, 1)).slot == "borrowed"


# --- lend-budget: the resume rule ---------------------------------------------------------------------

#: Interactive arrivals 6 s, 2 s, then eight times 0.5 s apart: of the ten gaps the p90 (nearest
#: rank, the 9th of 10 sorted) is 2 s.
INTERACTIVE_ARRIVALS = (1, 7, 9, 9.5, 10, 10.5, 11, 11.5, 12, 12.5, 13)
LEARNT_HOLD_OFF_S = 2.0


def test_after_demand_returns_lending_resumes_only_once_the_loans_drained_and_the_learnt_hold_off_passed(
        tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    # No batch queue: each batch request is decided on its own at its arrival.
    gate = Gate(budget(borrower_wait_s=0.0), tracer_provider)
    gate.arrive("b1", "batch", 0)
    assert gate.arrive("loan", "batch", 0).slot == "borrowed"
    for n, t in enumerate(INTERACTIVE_ARRIVALS):  # demand returns while the loan is out
        assert gate.arrive(f"i{n}", "interactive", t).slot == "own"
        gate.finish(f"i{n}", t + 0.25)
    idle_since = INTERACTIVE_ARRIVALS[-1] + 0.25
    assert gate.admission.policy.hold_off.hold_off_s == LEARNT_HOLD_OFF_S

    # Interactive idle, a slot free to lend, a short loan: only the earlier loan, still out, stops it.
    assert gate.arrive("not_drained", "batch", 13.5).reason == "concurrency_limit"
    gate.finish("loan", 14)
    assert gate.arrive("early", "batch", 14.5).reason == "concurrency_limit"
    resume_t = idle_since + LEARNT_HOLD_OFF_S
    assert gate.arrive("just_before", "batch", resume_t - 0.001).reason == "concurrency_limit"
    assert gate.arrive("resumed", "batch", resume_t).slot == "borrowed"
    assert gate.arrive("next", "batch", resume_t + 0.1).slot == "borrowed"  # one resume per return

    assert gate.events(span_exporter, "not_drained") == [refused("loans_not_drained", BUDGET_S)]
    # Refused for the hold-off: what is left of it, held against it.
    assert gate.events(span_exporter, "early") == [refused("hold_off", LEARNT_HOLD_OFF_S, 0.75)]
    assert gate.events(span_exporter, "just_before") == [refused("hold_off", LEARNT_HOLD_OFF_S, 0.001)]
    # Resumed: how long the protected class had been idle, against the hold-off.
    assert gate.events(span_exporter, "resumed") == [(S.EVENT_LENDING_RESUMED, {
        S.ATTR_GATE_LOAN_REASON: "drained_and_idle", S.ATTR_GATE_LOAN_PREDICTED_S: LEARNT_HOLD_OFF_S,
        S.ATTR_GATE_LOAN_LIMIT_S: LEARNT_HOLD_OFF_S})]
    assert gate.events(span_exporter, "next") == []


def test_a_batch_request_queued_for_the_hold_off_is_lent_to_when_the_hold_off_ends() -> None:
    # Nothing is released meanwhile: only the core's own deadline can wake the queue.
    gate = Gate(budget())
    gate.arrive("b1", "batch", 0)
    gate.arrive("i1", "interactive", 1)
    gate.finish("i1", 2)  # the hold-off (5 s, the prior) runs from here
    waiter = gate.arrive("b2", "batch", 3)
    assert isinstance(waiter, Waiter)
    # A virtual-time loop calls the core back at next_deadline_s(); the live shell's queue wait only
    # ends at a grant or at the waiter's deadline.
    wake_s = gate.admission.next_deadline_s()
    assert wake_s is not None and wake_s <= T0 + 2 + 5
    gate.admission.expire(wake_s)
    assert waiter.grant is not None and waiter.grant.slot == "borrowed"


# --- what the lenders learn ---------------------------------------------------------------------------


def test_engine_rates_move_from_the_priors_to_the_median_of_completed_requests_after_min_samples(
        tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    policy = budget()
    gate = Gate(policy, tracer_provider)
    # Neither a request taken back nor one without a first byte says how fast the engine is.
    gate.arrive("failed", "batch", 0, RequestSize(100, 10))
    gate.stream("failed", 5)
    gate.finish("failed", 50, completed=False)
    gate.arrive("no_first_byte", "batch", 50, RequestSize(100, 10))
    gate.finish("no_first_byte", 55)
    # Nor a whole answer in one body: all its time falls before its first byte.
    gate.arrive("not_streamed", "batch", 55, RequestSize(100, 10))
    gate.stream("not_streamed", 59)
    gate.finish("not_streamed", 60)
    # 100 prompt tokens and 10 output tokens each: 5, 1, 3 ms per prompt token; 200, 50, 100 ms per output token.
    gate.serve("c1", 60, ttfb_s=0.5, stream_s=2.0)
    gate.serve("c2", 70, ttfb_s=0.1, stream_s=0.5)
    assert (policy.rates.prefill_s_per_token, policy.rates.decode_s_per_token) == (0.002, 0.05)
    assert policy.rates.service_s(RequestSize(100, 10)) == pytest.approx(0.7)
    gate.serve("c3", 80, ttfb_s=0.3, stream_s=1.0)
    assert policy.rates.prefill_s_per_token == pytest.approx(0.003)
    assert policy.rates.decode_s_per_token == pytest.approx(0.1)

    # The same size that fitted at the priors is now predicted at 0.3 + 1.0 s.
    gate.arrive("b1", "batch", 90)
    assert isinstance(gate.arrive("b2", "batch", 90, RequestSize(100, 10)), Waiter)
    assert gate.events(span_exporter, "b2") == [refused("drain_over_budget", BUDGET_S, 1.3)]


@pytest.mark.parametrize(("token_gap_s", "lent"), [(0.05, True), (0.2, False)])
def test_a_loans_remaining_time_follows_its_own_streamed_pace(
        token_gap_s: float, lent: bool, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    # The loan is predicted at 0.02 + 15 * 0.05 s. Four tokens streamed: 11 to come at its own pace,
    # 0.55 s at the prior's pace, 2.2 s at four times slower.
    gate = Gate(budget(), tracer_provider)
    gate.arrive("b1", "batch", 0)
    assert gate.arrive("loan", "batch", 0, RequestSize(10, 15)).slot == "borrowed"
    gate.stream("loan", 0.1, 0.1, 0.1 + token_gap_s, 0.1 + 2 * token_gap_s, 0.1 + 3 * token_gap_s)
    decision = gate.arrive("b3", "batch", 1, RequestSize(1, 1))  # a tiny loan: the first loan's drain decides
    if lent:
        assert decision.slot == "borrowed"
        assert gate.events(span_exporter, "b3") == []
    else:
        assert isinstance(decision, Waiter)
        assert gate.events(span_exporter, "b3") == [refused("drain_over_budget", BUDGET_S, 11 * token_gap_s)]


def test_a_loans_first_two_tokens_in_one_breath_do_not_make_it_look_finished() -> None:
    # A chat stream's first events can come microseconds apart: a pace from two tokens would be ~0.
    gate = Gate(budget())
    gate.arrive("b1", "batch", 0)
    gate.arrive("loan", "batch", 0, RequestSize(10, 15))
    gate.stream("loan", 0.1, 0.1, 0.1 + 1e-5)
    policy = gate.admission.policy
    assert policy.remaining_s(policy._book[gate.grants["loan"].grant_id], T0 + 0.2) == pytest.approx(13 * 0.05)


def test_a_loan_refused_for_a_drain_that_progress_shortens_is_lent_once_it_fits() -> None:
    gate = Gate(budget())
    gate.arrive("b1", "batch", 0)
    gate.arrive("loan", "batch", 0, RequestSize(10, 15))
    gate.stream("loan", 0.1, 0.1, 0.3, 0.5, 0.7)  # 0.2 s a token: 11 to come, 2.2 s
    waiter = gate.arrive("b3", "batch", 1)
    assert isinstance(waiter, Waiter)
    gate.admission.streamed(gate.grants["loan"], T0 + 1.1, tokens=10)  # one to come, at about 70 ms
    if waiter.grant is None:  # not re-decided on the progress itself: the core must say when
        gate.admission.expire(gate.admission.next_deadline_s())
    assert waiter.grant is not None and waiter.grant.granted_at_s == T0 + 1.1


# --- lend-preempt ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("control_period_s", "restored_t"), [(0.0, 1.0), (2.0, 4.0)])
def test_lend_preempt_takes_back_at_the_floors_restoration_only_the_loans_predicted_past_the_budget(
        control_period_s: float, restored_t: float, tracer_provider: TracerProvider,
        span_exporter: InMemorySpanExporter) -> None:
    gate = Gate(PreemptLendPolicy(FLOORS, 2, control_period_s=control_period_s, restore_budget_s=BUDGET_S),
                tracer_provider)
    gate.arrive("b1", "batch", 0)
    assert gate.arrive("long", "batch", 0, LONG).slot == "borrowed"  # lend-preempt lends it: it can take it back
    assert gate.arrive("short", "batch", 0).slot == "borrowed"
    gate.stream("long", 0.2, 0.2, 0.25, 0.3, 0.35, 0.4)  # five tokens, 50 ms apart: 35 to come, 1.75 s

    gate.arrive("i1", "interactive", 1)
    if control_period_s:
        # The controller's revision takes effect at the second tick after the return (T0 + 2, T0 + 4).
        assert gate.preempted == []
        assert gate.admission.next_deadline_s() == T0 + restored_t
        gate.admission.expire(T0 + restored_t - 0.01)
        assert gate.preempted == []
        gate.admission.expire(T0 + restored_t)
    [(grant, preemption)] = gate.preempted
    assert grant is gate.grants["long"]
    assert preemption.grant_id == grant.grant_id
    assert preemption.remaining_s == pytest.approx(1.75)
    assert preemption.lost_tokens == 100 + 5  # the prompt, and the tokens streamed
    assert preemption.retry_after_ms == 500  # b1, on the batch floor, is predicted to free it in 0.5 s

    # The shell aborts the loan, then releases its grant: the restoration drains then.
    gate.finish("short", restored_t + 0.05)
    assert gate.admission.episodes[0].borrowed_drained_s is None
    gate.finish("long", restored_t + 0.1, completed=False)
    [episode] = gate.admission.episodes
    assert episode.grant_restored_s == T0 + restored_t
    assert episode.borrowed_drained_s == T0 + restored_t + 0.1

    [event] = gate.timed_events(span_exporter, "long")
    assert (event.name, event.timestamp) == (S.EVENT_LOAN_PREEMPTED, to_ns(T0 + restored_t))
    assert event.attributes[S.ATTR_GATE_PREEMPT_LOST_TOKENS] == 105
    assert event.attributes[S.ATTR_GATE_PREEMPT_REMAINING_S] == pytest.approx(1.75)
    assert gate.events(span_exporter, "short") == []


def test_with_a_controller_a_release_after_the_floors_restoration_is_the_call_that_takes_loans_back() -> None:
    gate = Gate(PreemptLendPolicy(FLOORS, 2, control_period_s=2.0, restore_budget_s=BUDGET_S))
    gate.arrive("b1", "batch", 0)
    gate.arrive("long", "batch", 0, LONG)
    gate.arrive("i1", "interactive", 1)  # the floor is restored at T0 + 4
    gate.finish("i1", 4.5)  # nothing called the core at T0 + 4: this release is the first to see it
    [(grant, _)] = gate.preempted
    assert grant.request_id == "long"
    assert gate.admission.episodes[0].grant_restored_s == T0 + 4


def test_a_loan_whose_own_release_is_the_first_call_after_the_restoration_is_not_taken_back() -> None:
    gate = Gate(PreemptLendPolicy(FLOORS, 2, control_period_s=2.0, restore_budget_s=BUDGET_S))
    gate.arrive("b1", "batch", 0)
    gate.arrive("long", "batch", 0, LONG)
    gate.arrive("i1", "interactive", 1)  # the floor is restored at T0 + 4
    gate.finish("long", 4.5)  # it finished: nothing to take back, nobody to tell
    assert gate.preempted == []
    assert gate.admission.episodes[0].borrowed_drained_s == T0 + 4.5


def test_a_loan_lent_after_the_floors_restoration_time_is_not_taken_back_by_it() -> None:
    # A withdrawal re-decides the queue after the floor's restoration time, before any other call
    # restored it: the loan it grants is not one that restoration found lent (nor is its lost prefill
    # counted from the future).
    gate = Gate(PreemptLendPolicy(FLOORS, 2, control_period_s=1.0, restore_budget_s=BUDGET_S))
    gate.arrive("b1", "batch", 0, LONG)
    gate.arrive("i1", "interactive", 0)  # the floor is restored at T0 + 2
    gate.finish("i1", 0)  # the hold-off (5 s, the prior) runs from here
    first = gate.arrive("b2", "batch", 0, LONG)
    second = gate.arrive("b3", "batch", 1, LONG)
    gate.admission.withdraw(first, T0 + 6)  # its client left; the hold-off is over: b3 borrows
    assert second.grant is not None and second.grant.slot == "borrowed"
    gate.admission.expire(T0 + 6)  # the core's next call
    assert [(grant.request_id, preemption.lost_tokens) for grant, preemption in gate.preempted] == []


def test_a_preempted_batch_requests_retry_waits_in_the_queue_and_gets_the_batch_floor_when_it_frees() -> None:
    # The gate's own wait timeout is 0 (a 429 at once); the lender keeps batch in a 120 s queue instead.
    gate = Gate(PreemptLendPolicy(FLOORS, 2, restore_budget_s=BUDGET_S), wait_timeout_s=0.0)
    gate.arrive("b1", "batch", 0)
    gate.arrive("b2", "batch", 0, LONG)
    gate.arrive("i1", "interactive", 1)
    [(grant, _)] = gate.preempted
    assert grant.request_id == "b2"
    gate.finish("b2", 1.1, completed=False)
    retry = gate.arrive("b2", "batch", 1.6, LONG)  # after its Retry-After
    assert isinstance(retry, Waiter) and retry.deadline_s == T0 + 1.6 + 120
    assert gate.finish("b1", 2) == ["b2"]
    assert (retry.grant.slot, retry.grant.granted_at_s) == ("own", T0 + 2)


# --- lend ----------------------------------------------------------------------------------------------


#: Request, class and time (or release / expiry at a time), through floors, loans, a return with a
#: queued interactive request, lending again when interactive is idle, and a queue timeout.
LEND_SCRIPT = (
    ("arrive", "b1", "batch", 0), ("arrive", "b2", "batch", 1), ("arrive", "b3", "batch", 2),
    ("arrive", "b4", "batch", 3), ("arrive", "i1", "interactive", 4), ("arrive", "b5", "batch", 4.5),
    ("arrive", "i2", "interactive", 5), ("finish", "b2", 6), ("finish", "i1", 7), ("finish", "i2", 8),
    ("arrive", "b6", "batch", 9), ("finish", "b1", 10), ("arrive", "i3", "interactive", 11),
    ("finish", "b3", 12), ("finish", "i3", 12.5), ("arrive", "b7", "batch", 13), ("expire", 43),
)
#: What LendPolicy decided for LEND_SCRIPT before the lenders changed the core (commit b8788f6):
#: (request, slot or queued or rejection reason, time). With a 2 s controller the floor stays lowered
#: after each return until T0 + 8 and T0 + 14, so b4 and b6 borrow sooner.
LEND_DECISIONS = {
    0.0: [("b1", "own", 0), ("b2", "borrowed", 1), ("b3", "borrowed", 2), ("b4", "queued", 3), ("i1", "own", 4),
          ("b5", "queued", 4.5), ("i2", "queued", 5), ("i2", "own", 6), ("b4", "borrowed", 8), ("b6", "queued", 9),
          ("b5", "own", 10), ("i3", "own", 11), ("b6", "borrowed", 12.5), ("b7", "queued", 13),
          ("b7", "timeout", 43)],
    2.0: [("b1", "own", 0), ("b2", "borrowed", 1), ("b3", "borrowed", 2), ("b4", "queued", 3), ("i1", "own", 4),
          ("b5", "queued", 4.5), ("i2", "queued", 5), ("i2", "own", 6), ("b4", "borrowed", 7), ("b6", "queued", 9),
          ("b5", "own", 10), ("i3", "own", 11), ("b6", "borrowed", 12), ("b7", "queued", 13),
          ("b7", "timeout", 43)],
}


def play(admission: Admission, script: tuple[tuple, ...]) -> list[tuple[str, str, float]]:
    grants: dict[str, Grant] = {}
    decisions: list[tuple[str, str, float]] = []

    def granted(grant: Grant) -> None:
        grants[grant.request_id] = grant
        decisions.append((grant.request_id, grant.slot, grant.granted_at_s - T0))

    for step, *args in script:
        if step == "arrive":
            name, traffic_class, t = args
            decision = admission.request(name, traffic_class, T0 + t)
            if isinstance(decision, Grant):
                granted(decision)
            else:
                decisions.append((name, "queued" if isinstance(decision, Waiter) else decision.reason, t))
        elif step == "finish":
            name, t = args
            for grant in admission.release(grants.pop(name), T0 + t):
                granted(grant)
        else:
            rejections, newly = admission.expire(T0 + args[0])
            decisions += [(r.request_id, r.reason, r.rejected_at_s - T0) for r in rejections]
            for grant in newly:
                granted(grant)
    return decisions


@pytest.mark.parametrize("control_period_s", sorted(LEND_DECISIONS))
def test_lend_decides_a_scripted_sequence_as_it_did_before_the_lenders(control_period_s: float) -> None:
    admission = Admission(LendPolicy(FLOORS, 2, control_period_s=control_period_s), wait_timeout_s=30.0)
    assert play(admission, LEND_SCRIPT) == LEND_DECISIONS[control_period_s]


# --- settings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "setting"), [
    ({"restore_budget_s": 0.0}, "gate.restore_budget_s"),
    ({"restore_budget_s": -1.0}, "gate.restore_budget_s"),
    ({"restore_budget_s": math.nan}, "gate.restore_budget_s"),
    ({"restore_budget_s": math.inf}, "gate.restore_budget_s"),
    ({"kv_blocks": 0}, "gate.kv_blocks"),
    ({"block_size": 0}, "gate.block_size"),
    ({"hold_off_quantile": 0.0}, "gate.hold_off_quantile"),
    ({"hold_off_quantile": 1.5}, "gate.hold_off_quantile"),
    ({"protected_wait_s": -0.5}, "gate.protected_wait_s"),
    ({"protected_wait_s": math.nan}, "gate.protected_wait_s"),
    ({"borrower_wait_s": math.inf}, "gate.borrower_wait_s"),
])
@pytest.mark.parametrize("lender", [BudgetLendPolicy, PreemptLendPolicy])
def test_a_bad_lender_setting_is_a_one_line_error_naming_it(
        lender: type[BudgetLendPolicy], options: dict, setting: str) -> None:
    with pytest.raises(SettingError) as caught:
        lender(FLOORS, 2, **options)
    assert caught.value.setting == setting
    assert setting in str(caught.value) and "\n" not in str(caught.value)


def test_the_lenders_accept_the_edges_of_their_settings() -> None:
    policy = BudgetLendPolicy(FLOORS, 2, restore_budget_s=1e-3, kv_blocks=1, block_size=1, hold_off_quantile=1.0,
                              protected_wait_s=0.0, borrower_wait_s=0.0)
    assert policy.class_wait_s == {"interactive": 0.0, "batch": 0.0}
    assert PriorityLendPolicy(FLOORS, 2, extra_slots=0).extra_slots == 0


@pytest.mark.parametrize(("name", "options", "setting"), [
    ("lend-budget", {"restore_budget_s": -1.0}, "gate.restore_budget_s"),
    ("lend-preempt", {"kv_blocks": 0}, "gate.kv_blocks"),
    ("lend-budget", {"block_size": 0}, "gate.block_size"),
    ("lend-priority", {"extra_slots": -1}, "gate.extra_slots"),
])
def test_build_policy_passes_the_lenders_settings_through_to_their_checks(
        name: str, options: dict, setting: str) -> None:
    with pytest.raises(SettingError) as caught:
        build_policy(name, floors=FLOORS, **options)
    assert caught.value.setting == setting and "\n" not in str(caught.value)


def test_a_loan_of_unknown_length_is_taken_back_by_lend_preempt() -> None:
    gate = Gate(PreemptLendPolicy(FLOORS, 2, restore_budget_s=BUDGET_S))
    gate.arrive("b1", "batch", 0, RequestSize(10, 0))  # on the batch floor, no max_tokens either
    assert gate.arrive("unbounded", "batch", 0, RequestSize(10, 0)).slot == "borrowed"
    gate.stream("unbounded", 0.1, *[0.1 + 0.01 * n for n in range(50)])
    gate.arrive("i1", "interactive", 1)
    [(grant, preemption)] = gate.preempted
    assert grant.request_id == "unbounded" and preemption.remaining_s == float("inf")
    assert 1 <= preemption.retry_after_ms <= 60_000  # no figure for the floor's own unbounded work: the longest hint


def test_the_learnt_hold_off_is_bounded_by_a_quiet_night() -> None:
    policy = budget()
    t = 0.0
    for gap_s in (1.0,) * 7 + (8 * 3600.0,) * 3:  # ten gaps, three of them whole nights
        t += gap_s
        policy.observe_arrival("interactive", RequestSize(10, 10), t)
    assert policy.hold_off.hold_off_s == 12 * policy.hold_off.prior_s
