"""Policy summary (MoFlux goodputs) and paired differences between policies."""

from __future__ import annotations

import pytest
from builders import Traces

from restorelens.analysis import Analysis, Slo
from restorelens.errors import SettingError
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_WAKE


def add_request(traces: Traces, *, policy: str, seed: int, start: float, ttft: float, e2e: float,
                traffic_class: str = "interactive", outcome: str = "ok", phase: str = "return",
                decision: str = "admitted", workload: str = "balanced") -> None:
    trace = traces.new_trace()
    client = traces.client_request(trace, start, start + e2e, first_chunk_s=start + ttft if outcome == "ok" else None,
                                   traffic_class=traffic_class, outcome=outcome, arrival_phase=phase, seed=seed,
                                   run_id=f"{policy}-{workload}-{seed}", workload=workload)
    status = 200 if outcome == "ok" else 429
    attempt = traces.attempt(trace, client, start, start + e2e, status=status)
    traces.gate_request(trace, attempt, start, start + e2e, status=status, policy=policy, decision=decision)


def build() -> Traces:
    traces = Traces()
    for seed in (1, 2):
        # static: 100 s window; 3 interactive meet the SLO, 1 too slow (TTFT 6 s), 1 rejected
        add_request(traces, policy="static", seed=seed, start=0.0, ttft=1.0, e2e=2.0)
        add_request(traces, policy="static", seed=seed, start=10.0, ttft=4.0, e2e=5.0)
        add_request(traces, policy="static", seed=seed, start=20.0, ttft=5.0, e2e=30.0)
        add_request(traces, policy="static", seed=seed, start=30.0, ttft=6.0, e2e=7.0)
        add_request(traces, policy="static", seed=seed, start=40.0, ttft=0.0, e2e=0.5, outcome="rejected",
                    decision="rejected")
        add_request(traces, policy="static", seed=seed, start=50.0, ttft=1.0, e2e=50.0, traffic_class="batch",
                    phase=ARRIVAL_PHASE_BORROW)
        # lend: 50 s window; 1 interactive meets, batch borrow: 2 completed + 1 outside the phase
        add_request(traces, policy="lend", seed=seed, start=0.0, ttft=1.0, e2e=31.0)
        add_request(traces, policy="lend", seed=seed, start=1.0, ttft=2.0, e2e=3.0)
        add_request(traces, policy="lend", seed=seed, start=5.0, ttft=1.0, e2e=45.0, traffic_class="batch",
                    phase=ARRIVAL_PHASE_BORROW)
        add_request(traces, policy="lend", seed=seed, start=6.0, ttft=1.0, e2e=44.0, traffic_class="batch",
                    phase=ARRIVAL_PHASE_BORROW)
        add_request(traces, policy="lend", seed=seed, start=7.0, ttft=1.0, e2e=2.0, traffic_class="batch",
                    phase="drain")
    return traces


def test_goodputs_per_policy_workload_seed() -> None:
    summary = Analysis(build().store()).policy_summary()

    assert summary["policy"].to_list() == ["lend", "lend", "static", "static"]
    static = summary.row(2, named=True)
    assert static["window_s"] == 100.0
    assert (static["interactive_requests"], static["interactive_slo_met"], static["interactive_rejected"]) == (5, 3, 1)
    assert static["interactive_slo_goodput_rps"] == 0.03
    assert (static["batch_borrow_arrivals"], static["batch_borrow_completed"]) == (1, 1)
    assert static["batch_borrow_goodput_rps"] == 0.01
    lend = summary.row(0, named=True)
    assert lend["window_s"] == 50.0
    assert lend["interactive_slo_goodput_rps"] == 0.02
    assert lend["batch_borrow_goodput_rps"] == 0.04


def test_a_looser_slo_counts_more_requests() -> None:
    summary = Analysis(build().store(), slo=Slo(ttft_s=6.0, e2e_s=31.0)).policy_summary()
    assert summary["interactive_slo_met"].to_list() == [2, 2, 4, 4]


def test_paired_differences_subtract_the_baseline_per_seed() -> None:
    paired = Analysis(build().store()).paired_differences()

    lend_vs_static = paired.filter(paired["policy"] == "lend")
    assert lend_vs_static["baseline"].to_list() == ["static", "static"]
    assert lend_vs_static["seed"].to_list() == [1, 2]
    assert [round(v, 12) for v in lend_vs_static["interactive_slo_goodput_diff_rps"]] == [-0.01, -0.01]
    assert [round(v, 12) for v in lend_vs_static["batch_borrow_goodput_diff_rps"]] == [0.03, 0.03]
    assert paired.height == 4


def add_wake_scenario(traces: Traces, *, seed: int) -> None:
    """A ModelClaim wake scenario's requests: they pass a gate (policy fcfs) but are no MoFlux arm."""
    add_request(traces, policy="fcfs", seed=seed, start=0.0, ttft=1.0, e2e=2.0, phase=ARRIVAL_PHASE_WAKE,
                workload="modelclaim")
    add_request(traces, policy="fcfs", seed=seed, start=1.0, ttft=1.0, e2e=2.0, phase=ARRIVAL_PHASE_WAKE,
                workload="balanced")


def test_wake_scenario_requests_are_left_out_of_the_summary_and_the_pairs() -> None:
    traces = build()
    for seed in (1, 2):
        add_wake_scenario(traces, seed=seed)
    analysis = Analysis(traces.store())

    summary = analysis.policy_summary()
    assert summary["policy"].to_list() == ["lend", "lend", "static", "static"]
    assert summary.equals(Analysis(build().store()).policy_summary())
    paired = analysis.paired_differences()
    assert set(paired["policy"]) == set(paired["baseline"]) == {"lend", "static"}


def test_excluded_phases_can_be_overridden() -> None:
    traces = build()
    add_wake_scenario(traces, seed=1)

    everything = Analysis(traces.store(), slo=Slo(excluded_phases=())).policy_summary()
    wake_rows = everything.filter(everything["policy"] == "fcfs")
    assert wake_rows["workload"].to_list() == ["balanced", "modelclaim"]
    assert wake_rows["interactive_slo_met"].to_list() == [1, 1]
    # excluding another phase instead: the borrow-phase batch requests go, and with them the borrow goodput
    no_borrow = Analysis(traces.store(), slo=Slo(excluded_phases=(ARRIVAL_PHASE_WAKE, ARRIVAL_PHASE_BORROW)))
    assert no_borrow.policy_summary()["batch_borrow_arrivals"].to_list() == [0, 0, 0, 0]


def test_the_slo_defaults_come_from_the_span_contract() -> None:
    assert Slo().borrow_phase == ARRIVAL_PHASE_BORROW
    assert Slo().excluded_phases == (ARRIVAL_PHASE_WAKE,)



@pytest.mark.parametrize("field", ["ttft_s", "e2e_s"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_an_slo_must_be_a_finite_non_negative_duration(field: str, value: float) -> None:
    with pytest.raises(SettingError, match=f"setting Slo.{field}: must be a finite number of seconds >= 0"):
        Slo(**{field: value})
