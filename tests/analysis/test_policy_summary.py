"""Policy summary (MoFlux goodputs) and paired differences between policies."""

from __future__ import annotations

import pytest
from builders import Traces

from restorelens.analysis import Analysis, Slo
from restorelens.errors import SettingError
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN, ARRIVAL_PHASE_WAKE

#: The MoFlux protocol's phases as the client labels them: (window start, window length) in s.
PHASE_WINDOWS = {"interactive-alone": (0.0, 25.0), ARRIVAL_PHASE_BORROW: (25.0, 35.0),
                 ARRIVAL_PHASE_RETURN: (60.0, 25.0), "drain": (85.0, 20.0)}


def add_request(traces: Traces, *, policy: str, seed: int, start: float, ttft: float, e2e: float,
                traffic_class: str = "interactive", outcome: str = "ok", phase: str = ARRIVAL_PHASE_RETURN,
                decision: str = "admitted", workload: str = "balanced", gate: bool = True,
                windows: bool = True, arm_label: bool = False) -> None:
    trace = traces.new_trace()
    window = PHASE_WINDOWS.get(phase) if windows else None
    client = traces.client_request(trace, start, start + e2e, first_chunk_s=start + ttft if outcome == "ok" else None,
                                   traffic_class=traffic_class, outcome=outcome, arrival_phase=phase, seed=seed,
                                   run_id=f"{policy}-{workload}-{seed}", workload=workload,
                                   arrival_phase_start_s=None if window is None else window[0],
                                   arrival_phase_window_s=None if window is None else window[1],
                                   policy=policy if arm_label else None)
    status = 200 if outcome == "ok" else 429
    attempt = traces.attempt(trace, client, start, start + e2e, status=status)
    if gate:
        traces.gate_request(trace, attempt, start, start + e2e, status=status, policy=policy, decision=decision)


def build() -> Traces:
    traces = Traces()
    for seed in (1, 2):
        # static, contention window (return, 25 s): 3 meet the SLO (TTFT 5 s and e2e 30 s are still
        # on time), 1 too slow (TTFT 6 s), 1 rejected; one more on time but before demand returned.
        add_request(traces, policy="static", seed=seed, start=60.0, ttft=1.0, e2e=2.0)
        add_request(traces, policy="static", seed=seed, start=70.0, ttft=4.0, e2e=5.0)
        add_request(traces, policy="static", seed=seed, start=80.0, ttft=5.0, e2e=30.0)
        add_request(traces, policy="static", seed=seed, start=81.0, ttft=6.0, e2e=7.0)
        add_request(traces, policy="static", seed=seed, start=82.0, ttft=0.0, e2e=0.5, outcome="rejected",
                    decision="rejected")
        add_request(traces, policy="static", seed=seed, start=10.0, ttft=1.0, e2e=2.0, phase="interactive-alone")
        # borrow window (35 s): 1 batch arrival completed, 1 gave up
        add_request(traces, policy="static", seed=seed, start=30.0, ttft=1.0, e2e=50.0, traffic_class="batch",
                    phase=ARRIVAL_PHASE_BORROW)
        add_request(traces, policy="static", seed=seed, start=31.0, ttft=0.0, e2e=1.0, traffic_class="batch",
                    phase=ARRIVAL_PHASE_BORROW, outcome="gave_up")
        # lend: 1 of 2 contention arrivals on time (e2e 31 s is late); 2 borrow arrivals completed,
        # 1 batch arrival of the drain phase, which no goodput counts
        add_request(traces, policy="lend", seed=seed, start=60.0, ttft=1.0, e2e=31.0)
        add_request(traces, policy="lend", seed=seed, start=61.0, ttft=2.0, e2e=3.0)
        add_request(traces, policy="lend", seed=seed, start=40.0, ttft=1.0, e2e=45.0, traffic_class="batch",
                    phase=ARRIVAL_PHASE_BORROW)
        add_request(traces, policy="lend", seed=seed, start=41.0, ttft=1.0, e2e=44.0, traffic_class="batch",
                    phase=ARRIVAL_PHASE_BORROW)
        add_request(traces, policy="lend", seed=seed, start=90.0, ttft=1.0, e2e=2.0, traffic_class="batch",
                    phase="drain")
    return traces


def test_goodputs_count_the_phase_arrivals_and_divide_by_the_phase_windows() -> None:
    summary = Analysis(build().store()).policy_summary()

    assert summary["policy"].to_list() == ["lend", "lend", "static", "static"]
    static = summary.row(2, named=True)
    assert (static["contention_window_s"], static["borrow_window_s"]) == (25.0, 35.0)
    assert static["interactive_requests"] == 6
    assert (static["interactive_contention_arrivals"], static["interactive_slo_met"],
            static["interactive_rejected"]) == (5, 3, 1)
    assert static["interactive_slo_goodput_rps"] == pytest.approx(3 / 25)
    assert (static["batch_borrow_arrivals"], static["batch_borrow_completed"]) == (2, 1)
    assert static["batch_borrow_goodput_rps"] == pytest.approx(1 / 35)
    lend = summary.row(0, named=True)
    assert (lend["interactive_contention_arrivals"], lend["interactive_slo_met"]) == (2, 1)
    assert lend["interactive_slo_goodput_rps"] == pytest.approx(1 / 25)
    assert (lend["batch_requests"], lend["batch_borrow_completed"]) == (3, 2)
    assert lend["batch_borrow_goodput_rps"] == pytest.approx(2 / 35)


def test_a_run_without_phase_windows_has_counts_but_no_goodput() -> None:
    traces = Traces()
    add_request(traces, policy="lend", seed=1, start=60.0, ttft=1.0, e2e=2.0, windows=False)
    add_request(traces, policy="lend", seed=1, start=30.0, ttft=1.0, e2e=2.0, traffic_class="batch",
                phase=ARRIVAL_PHASE_BORROW, windows=False)
    row = Analysis(traces.store()).policy_summary().row(0, named=True)
    assert (row["interactive_slo_met"], row["batch_borrow_completed"]) == (1, 1)
    assert row["interactive_slo_goodput_rps"] is None and row["batch_borrow_goodput_rps"] is None


def test_the_clients_arm_label_keeps_arms_without_a_gate_apart_and_wins_over_the_gates() -> None:
    traces = Traces()
    for arm in ("fcfs", "priority"):
        add_request(traces, policy=arm, seed=1, start=60.0, ttft=1.0, e2e=2.0, gate=False, arm_label=True)
    add_request(traces, policy="none-here", seed=1, start=60.0, ttft=1.0, e2e=2.0, gate=False)
    # a gate that names its policy differently from the experiment's arm: the arm is the client's
    trace = traces.new_trace()
    client = traces.client_request(trace, 60.0, 62.0, first_chunk_s=61.0, arrival_phase=ARRIVAL_PHASE_RETURN,
                                   arrival_phase_start_s=60.0, arrival_phase_window_s=25.0, policy="lend-budget",
                                   run_id="budget")
    attempt = traces.attempt(trace, client, 60.0, 62.0, status=200)
    traces.gate_request(trace, attempt, 60.0, 62.0, status=200, policy="lend", decision="admitted")

    summary = Analysis(traces.store()).policy_summary()
    # the request that passed no gate and carries no arm label has no policy: null, not a name
    assert summary["policy"].to_list() == ["fcfs", "lend-budget", "priority", None]
    assert summary.filter(summary["policy"] == "priority")["interactive_slo_met"].to_list() == [1]


def test_a_looser_slo_counts_more_requests() -> None:
    summary = Analysis(build().store(), slo=Slo(ttft_s=6.0, e2e_s=31.0)).policy_summary()
    assert summary["interactive_slo_met"].to_list() == [2, 2, 4, 4]


def test_paired_differences_subtract_the_baseline_per_seed() -> None:
    paired = Analysis(build().store()).paired_differences()

    lend_vs_static = paired.filter(paired["policy"] == "lend")
    assert lend_vs_static["baseline"].to_list() == ["static", "static"]
    assert lend_vs_static["seed"].to_list() == [1, 2]
    assert lend_vs_static["interactive_slo_goodput_diff_rps"].to_list() == pytest.approx([1 / 25 - 3 / 25] * 2)
    assert lend_vs_static["batch_borrow_goodput_diff_rps"].to_list() == pytest.approx([2 / 35 - 1 / 35] * 2)
    assert paired.height == 4


def test_the_report_shows_each_pair_of_arms_once_the_later_minus_the_earlier() -> None:
    from restorelens.analysis.report import build_report
    from restorelens.analysis.report.build import arm_order

    paired = build_report(Analysis(build().store()))["paired_differences"]
    assert list(zip(paired["policy"], paired["baseline"])) == [("lend", "static")]  # not static - lend too
    assert paired["interactive_slo_goodput_diff_rps"].to_list() == pytest.approx([1 / 25 - 3 / 25])
    assert arm_order(["zeta", "lend", None, "static", "fcfs", "alpha", "priority"]) == [
        None, "fcfs", "priority", "static", "lend", "alpha", "zeta"]


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
    # counted as requests, but they arrived in no contention window: no goodput of theirs
    assert wake_rows["interactive_requests"].to_list() == [1, 1]
    assert wake_rows["interactive_slo_met"].to_list() == [0, 0]
    # excluding another phase instead: the borrow-phase batch requests go, and with them the borrow goodput
    no_borrow = Analysis(traces.store(), slo=Slo(excluded_phases=(ARRIVAL_PHASE_WAKE, ARRIVAL_PHASE_BORROW)))
    assert no_borrow.policy_summary()["batch_borrow_arrivals"].to_list() == [0, 0, 0, 0]


def test_the_slo_defaults_come_from_the_span_contract() -> None:
    assert Slo().borrow_phase == ARRIVAL_PHASE_BORROW
    assert Slo().contention_phase == ARRIVAL_PHASE_RETURN
    assert Slo().excluded_phases == (ARRIVAL_PHASE_WAKE,)



@pytest.mark.parametrize("field", ["ttft_s", "e2e_s"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_an_slo_must_be_a_finite_non_negative_duration(field: str, value: float) -> None:
    with pytest.raises(SettingError, match=f"setting Slo.{field}: must be a finite number of seconds >= 0"):
        Slo(**{field: value})


def test_the_no_gate_arm_is_paired_like_any_other() -> None:
    traces = Traces()
    add_request(traces, policy="fcfs", seed=1, start=60.0, ttft=1.0, e2e=2.0, gate=False, arm_label=True)
    add_request(traces, policy="unused", seed=1, start=60.0, ttft=1.0, e2e=2.0, gate=False)
    paired = Analysis(traces.store()).paired_differences()
    assert sorted(zip(paired["policy"], paired["baseline"]), key=str) == [("fcfs", None), (None, "fcfs")]


def test_the_text_report_names_the_no_gate_arm_on_both_sides_of_a_difference() -> None:
    from restorelens.analysis.report import build_report, render

    traces = Traces()
    add_request(traces, policy="fcfs", seed=1, start=60.0, ttft=1.0, e2e=2.0, gate=False, arm_label=True)
    add_request(traces, policy="unused", seed=1, start=60.0, ttft=1.0, e2e=2.0, gate=False)
    # a lending episode whose gate named no policy: a gate was there, so it is no "no gate"
    traces.gate_restore(60.0, 64.5, link=None, policy=None, grant_restored_s=61.0, drained_s=64.5)
    sections = build_report(Analysis(traces.store()))
    text = render({"paired_differences": sections["paired_differences"]}, "markdown")
    # one direction: no gate is every arm's baseline
    assert "| balanced | fcfs | no gate |" in text and "| balanced | no gate | fcfs |" not in text
    lending = render({"lending_episodes": sections["lending_episodes"]}, "markdown")
    assert "no gate" not in lending
