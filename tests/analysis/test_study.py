"""The MoFlux study's scoring core (``analysis.study``) over hand-built frames: the runs, the gates
H1-H3 paired per seed with nearest-rank medians, the frontier and the dominance of new arms."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from restorelens.analysis import GATES, STUDY_ARMS, StudyTable, score_frames
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN

_SUMMARY = {"policy": pl.String, "workload": pl.String, "seed": pl.Int64, "interactive_slo_goodput_rps": pl.Float64,
            "batch_borrow_goodput_rps": pl.Float64}
_REQUESTS = {"policy": pl.String, "workload": pl.String, "seed": pl.Int64, "traffic_class": pl.String,
             "arrival_phase": pl.String, "outcome": pl.String, "ttft_s": pl.Float64, "e2e_s": pl.Float64}
_LENDING = {"policy": pl.String, "workload": pl.String, "seed": pl.Int64, "t0": pl.Int64, "grant_restore_s": pl.Float64,
            "drain_s": pl.Float64, "engine_schedule_s": pl.Float64}


def summary(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=_SUMMARY, orient="row")


def nothing(schema: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def test_gates_pair_seeds_and_take_the_nearest_rank_median_with_a_float_tolerance() -> None:
    # interactive: priority beats fcfs by 0.1, 0.0, -0.1 -> median (rank 2 of 3) 0.0: H1 holds.
    # lend - priority: 0.28 - 0.32 in every seed, -0.04 as floats see it: H2 holds at its threshold.
    rows = [(arm, "w", seed, value, batch) for arm, values, batch in (
        ("fcfs", (0.22, 0.32, 0.42), 0.1), ("priority", (0.32, 0.32, 0.32), 0.1), ("lend", (0.28, 0.28, 0.28), 0.12),
        ("static", (0.3, 0.3, 0.3), 0.11)) for seed, value in zip((1, 2, 3), values, strict=True)]
    table = score_frames(summary(rows), nothing(_REQUESTS), nothing(_LENDING), {"w": "scenario"})
    gates = {gate["gate"]: gate for gate in table.gates}
    assert list(gates) == [gate.name for gate in GATES]
    assert gates["H1"]["per_seed"] == {1: pytest.approx(0.1), 2: 0.0, 3: pytest.approx(-0.1)}
    assert gates["H1"]["median"] == 0.0 and gates["H1"]["holds"] is True
    assert gates["H2"]["median"] == pytest.approx(-0.04) and gates["H2"]["holds"] is True
    # lend - static batch borrow: 0.01 per seed, under 0.02
    assert gates["H3"]["median"] == pytest.approx(0.01) and gates["H3"]["holds"] is False
    assert {gate["scenario"] for gate in table.gates} == {"scenario"}
    assert gates["H3"]["label"] == "lend − static batch borrow goodput ≥ 0.02 req/s"


def test_a_gate_without_both_arms_or_values_is_not_judged() -> None:
    rows = [("lend", "w", 1, 0.3, None), ("static", "w", 1, 0.3, 0.1), ("lend", "w", 2, 0.3, 0.2)]
    table = score_frames(summary(rows), nothing(_REQUESTS), nothing(_LENDING), {"w": "w"})
    gates = {gate["gate"]: gate for gate in table.gates}
    assert gates["H1"]["per_seed"] == {} and gates["H1"]["holds"] is None and gates["H1"]["median"] is None
    # seed 1: lend has no batch goodput; seed 2: no static run to pair with
    assert gates["H3"]["per_seed"] == {} and gates["H3"]["holds"] is None


def test_runs_follow_the_scenarios_then_the_study_arms_then_other_arms_by_name_and_leave_out_other_workloads() -> None:
    rows = [(arm, workload, seed, 0.1, 0.1) for workload in ("b", "a", "x") for arm in ("zeta", "lend", "alpha", "fcfs")
            for seed in (2, 1)]
    table = score_frames(summary(rows), nothing(_REQUESTS), nothing(_LENDING), {"b": "B", "a": "A"})
    assert [(r["scenario"], r["arm"], r["seed"]) for r in table.runs] == [
        (scenario, arm, seed) for scenario in ("B", "A") for arm in ("fcfs", "lend", "alpha", "zeta")
        for seed in (1, 2)]


def test_a_runs_ttft_p95_and_lending_times_come_from_its_own_requests_and_first_episode() -> None:
    requests = pl.DataFrame([
        *(("lend", "w", 1, "interactive", ARRIVAL_PHASE_RETURN, "ok", float(ttft), 9.0) for ttft in range(1, 21)),
        ("lend", "w", 1, "interactive", ARRIVAL_PHASE_RETURN, "rejected", 99.0, 99.0),  # no answer: no TTFT
        ("lend", "w", 1, "interactive", ARRIVAL_PHASE_BORROW, "ok", 50.0, 50.0),  # outside the contention window
        ("lend", "w", 1, "batch", ARRIVAL_PHASE_BORROW, "ok", None, 7.0),
        ("lend", "w", 1, "batch", ARRIVAL_PHASE_BORROW, "ok", None, 3.0),
        ("lend", "w", 2, "interactive", ARRIVAL_PHASE_RETURN, "ok", 100.0, 100.0),  # another seed
    ], schema=_REQUESTS, orient="row")
    lending = pl.DataFrame([("lend", "w", 1, 20, 0.75, 2.0, 4.0), ("lend", "w", 1, 10, 0.5, 1.0, 3.0),
                            ("lend", "w", 1, 30, 0.25, None, None)], schema=_LENDING, orient="row")
    table = score_frames(summary([("lend", "w", 1, 0.2, 0.1)]), requests, lending, {"w": "w"})
    [run] = table.runs
    assert run["interactive_ttft_p95_s"] == 19.0  # rank ceil(0.95 * 20) = 19
    assert run["batch_borrow_e2e_p50_s"] == 3.0  # rank ceil(0.5 * 2) = 1
    assert (run["grant_restore_s"], run["drain_s"], run["engine_schedule_s"]) == (0.5, 1.0, 3.0)  # t0 = 10 first
    assert run["episodes"] == 2 and run["worst_engine_schedule_s"] == 4.0


def test_the_frontier_medians_and_a_new_arms_dominance() -> None:
    rows = [(arm, "w", seed, i, b) for arm, points in (
        ("fcfs", ((0.1, 0.3), (0.2, 0.3))), ("priority", ((0.3, 0.2), (0.3, 0.2))), ("static", ((0.3, 0.1),)),
        ("lend", ((0.25, 0.3), (0.2, 0.25))), ("lend-budget", ((0.3, 0.3), (0.4, 0.35))),
        ("lend-preempt", ((0.3, 0.2), (0.3, 0.2)))) for seed, (i, b) in enumerate(points, start=1)]
    table = score_frames(summary(rows), nothing(_REQUESTS), nothing(_LENDING), {"w": "w"})
    frontier = table.frontier()
    assert len(frontier["points"]) == len(rows)
    medians = {m["arm"]: (m["interactive_slo_goodput_rps"], m["batch_borrow_goodput_rps"], m["seeds"])
               for m in frontier["medians"]}
    assert medians["lend"] == (0.2, 0.25, 2) and medians["static"] == (0.3, 0.1, 1)
    assert [m["arm"] for m in frontier["medians"]][:4] == list(STUDY_ARMS)
    dominance = {d["arm"]: d["dominates_study_arms"] for d in frontier["dominance"]}
    # the study arms' best medians: interactive 0.3 (priority, static), batch 0.3 (fcfs)
    assert dominance == {"lend-budget": True, "lend-preempt": False}
    assert set(StudyTable(table.runs, table.gates).to_json()) == {"runs", "gates", "frontier"}


def test_runs_without_a_seed_or_policy_are_scored_not_dropped() -> None:
    # requests that passed no gate (null policy) and runs without a seed sort among the others, no type error
    rows = [(None, "w", None, 0.1, None), ("zeta", "w", 2, 0.2, 0.1), ("lend", "w", 1, 0.3, 0.2),
            ("zeta", "w", None, 0.2, 0.1)]
    table = score_frames(summary(rows), nothing(_REQUESTS), nothing(_LENDING), {"w": "w"})
    assert [(r["arm"], r["seed"]) for r in table.runs] == [("lend", 1), (None, None), ("zeta", None), ("zeta", 2)]
    assert [len(g["per_seed"]) for g in table.gates] == [0, 0, 0]
