"""The MoFlux study's table, scored from span-store frames: per run, then the study's gates over seeds.

Per scenario × arm × seed: interactive SLO goodput of the contention window, batch borrow goodput
(both from ``policy_summary``: the study's own definitions), the interactive TTFT p95 of the
contention window, and the first lending episode's grant, drain and engine-schedule times. Then
the study's three preregistered gates, each a paired difference per seed and its median over
seeds: H1 priority − fcfs ≥ 0, H2 lend − priority ≥ −0.04 (interactive SLO goodput), H3
lend − static ≥ 0.02 (batch borrow goodput). Medians and p95s are nearest-rank (the value at rank
⌈q·n⌉), as the study reports them, so with 5 seeds the median is the 3rd value.

The frontier is the trade every arm makes between the two goodputs: per scenario × arm × seed the
point (interactive SLO goodput, batch borrow goodput), and per scenario × arm both medians over
seeds, each over the seeds that have that goodput.

One decision in one place: ``restorelens experiment`` and the dashboard's policy page both score
with ``score_frames``, so the page shows the figures the experiment printed. Pure over polars
frames: no store, no SQL.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from restorelens.analysis.views import nearest_rank
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN

__all__ = ["FRONTIER_AXES", "GATES", "RUN_COLUMNS", "STUDY_ARMS", "Gate", "StudyTable", "score", "score_frames",
           "table_cell"]


@dataclass(frozen=True, slots=True)
class Gate:
    name: str
    policy: str
    baseline: str
    metric: str
    threshold_rps: float

    @property
    def label(self) -> str:
        what = "interactive SLO goodput" if self.metric == "interactive_slo_goodput_rps" else "batch borrow goodput"
        return f"{self.policy} − {self.baseline} {what} ≥ {self.threshold_rps:g} req/s"


GATES = (
    Gate("H1", "priority", "fcfs", "interactive_slo_goodput_rps", 0.0),
    Gate("H2", "lend", "priority", "interactive_slo_goodput_rps", -0.04),
    Gate("H3", "lend", "static", "batch_borrow_goodput_rps", 0.02),
)
#: The frontier's two axes: what an arm gives interactive traffic, and what it lends batch.
FRONTIER_AXES = ("interactive_slo_goodput_rps", "batch_borrow_goodput_rps")
RUN_COLUMNS = (
    "scenario", "arm", "seed", "interactive_slo_goodput_rps", "batch_borrow_goodput_rps", "interactive_ttft_p95_s",
    "batch_borrow_e2e_p50_s", "grant_restore_s", "drain_s", "engine_schedule_s", "episodes",
    "worst_engine_schedule_s",
)  # fmt: skip
#: The study's own arms, in the order its table lists them: what a new arm must dominate on the
#: frontier (``dominance``).
STUDY_ARMS = ("fcfs", "priority", "static", "lend")
#: Gates and frontier compare two floats from sums: 0.28 − 0.32 must read as the −0.04 it is.
_TOLERANCE = 1e-9


@dataclass
class StudyTable:
    runs: list[dict[str, Any]]
    gates: list[dict[str, Any]] = field(default_factory=list)

    def frontier(self) -> dict[str, list[dict[str, Any]]]:
        """``points``: per scenario × arm × seed, (interactive SLO goodput, batch borrow goodput);
        ``medians``: per scenario × arm, each goodput's nearest-rank median over the seeds that
        have one (null when none has), with how many seeds were played. Rows in the table's order."""
        points = [{key: run[key] for key in ("scenario", "arm", "seed", *FRONTIER_AXES)} for run in self.runs]
        by_arm: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for point in points:
            by_arm.setdefault((point["scenario"], point["arm"]), []).append(point)
        medians = [{"scenario": scenario, "arm": arm, "seeds": len(seeds),
                    **{axis: nearest_rank([p[axis] for p in seeds], 0.5) for axis in FRONTIER_AXES}}
                   for (scenario, arm), seeds in by_arm.items()]
        return {"points": points, "medians": medians, "dominance": _dominance(medians)}

    def to_json(self) -> dict[str, Any]:
        return {"runs": self.runs, "gates": self.gates, "frontier": self.frontier()}

    def to_markdown(self) -> str:
        lines = ["| " + " | ".join(RUN_COLUMNS) + " |", "|" + "---|" * len(RUN_COLUMNS)]
        lines += ["| " + " | ".join(table_cell(run[c]) for c in RUN_COLUMNS) + " |" for run in self.runs]
        lines += ["", "| scenario | gate | per seed | median | holds |", "|---|---|---|---|---|"]
        for gate in self.gates:
            per_seed = ", ".join(f"{seed}: {table_cell(v)}" for seed, v in gate["per_seed"].items())
            verdict = "n/a" if gate["holds"] is None else ("yes" if gate["holds"] else "**no**")
            lines.append(f"| {gate['scenario']} | {gate['gate']}: {gate['label']} | {per_seed} | "
                         f"{table_cell(gate['median'])} | {verdict} |")
        lines += ["", "| scenario | arm | seeds | interactive SLO goodput, median | batch borrow goodput, median |",
                  "|---|---|---|---|---|"]
        frontier = self.frontier()
        lines += [f"| {m['scenario']} | {m['arm']} | {m['seeds']} | {table_cell(m[FRONTIER_AXES[0]])} | "
                  f"{table_cell(m[FRONTIER_AXES[1]])} |" for m in frontier["medians"]]
        if frontier["dominance"]:
            lines += ["", "| scenario | arm | dominates every study arm (both medians ≥ the best of fcfs, priority, "
                      "static, lend) |", "|---|---|---|"]
            lines += [f"| {d['scenario']} | {d['arm']} | "
                      f"{'n/a' if d['dominates_study_arms'] is None else 'yes' if d['dominates_study_arms'] else 'no'} |"
                      for d in frontier["dominance"]]
        return "\n".join(lines) + "\n"


def _dominance(medians: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per scenario, each arm that is not one of the study's: does its median point dominate every
    study arm's (interactive and batch each at least the best of theirs)? None when a study arm
    was not played or a median is missing."""
    verdicts = []
    for scenario in dict.fromkeys(m["scenario"] for m in medians):
        rows = {m["arm"]: m for m in medians if m["scenario"] == scenario}
        study = [rows.get(arm) for arm in STUDY_ARMS]
        for arm, row in rows.items():
            if arm in STUDY_ARMS:
                continue
            known = all(r is not None and all(r[a] is not None for a in FRONTIER_AXES) for r in (*study, row))
            best = {a: max(r[a] for r in study) for a in FRONTIER_AXES} if known else {}  # type: ignore[index]
            holds = all(row[a] >= best[a] - _TOLERANCE for a in FRONTIER_AXES) if known else None
            verdicts.append({"scenario": scenario, "arm": arm, "dominates_study_arms": holds,
                             **{f"best_study_{a}": best.get(a) for a in FRONTIER_AXES}})
    return verdicts


def table_cell(value: Any) -> str:
    """A value in a markdown table: — for none, floats to 3 decimals."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def score(analysis: Any, scenario_of: Mapping[str, str], arms: Sequence[str] = STUDY_ARMS) -> StudyTable:
    """The table of the store ``analysis`` (an ``Analysis``) reads: ``score_frames`` over its policy
    summary, requests and lending episodes."""
    return score_frames(analysis.policy_summary(), analysis.requests(), analysis.lending_episodes(), scenario_of,
                        arms)


def score_frames(summary: pl.DataFrame, requests: pl.DataFrame, lending: pl.DataFrame,
                 scenario_of: Mapping[str, str], arms: Sequence[str] = STUDY_ARMS) -> StudyTable:
    """The study's table from ``Analysis.policy_summary()``, ``requests()`` and
    ``lending_episodes()``: runs are matched across the three by (policy, workload, seed).
    ``scenario_of`` maps a workload to its scenario (workloads it does not name are left out, its
    order orders the scenarios), and ``arms`` orders the rows (other arms follow, by name)."""
    rank = {arm: i for i, arm in enumerate(arms)}
    ttfts: dict[tuple[str, str, int], list[float]] = {}
    batch_e2es: dict[tuple[str, str, int], list[float]] = {}
    for row in requests.iter_rows(named=True):
        key = (row["policy"], row["workload"], row["seed"])
        phase = (row["traffic_class"], row["arrival_phase"], row["outcome"])
        if phase == ("interactive", ARRIVAL_PHASE_RETURN, "ok"):
            ttfts.setdefault(key, []).append(row["ttft_s"])
        elif phase == ("batch", ARRIVAL_PHASE_BORROW, "ok"):
            # What queueing hides from the borrow goodput: how long a completed batch request took.
            batch_e2es.setdefault(key, []).append(row["e2e_s"])
    first_episode: dict[tuple[str, str, int], dict[str, Any]] = {}
    gaps: dict[tuple[str, str, int], list[float]] = {}
    for row in sorted(lending.iter_rows(named=True), key=lambda r: r["t0"]):
        key = (row["policy"], row["workload"], row["seed"])
        first_episode.setdefault(key, row)
        gaps.setdefault(key, [])
        if row["engine_schedule_s"] is not None:
            gaps[key].append(row["engine_schedule_s"])
    runs = []
    order = list(scenario_of)
    for row in sorted(summary.iter_rows(named=True), key=lambda r: (
            order.index(r["workload"]) if r["workload"] in order else len(order),
            rank.get(r["policy"], len(rank)), r["policy"] or "", r["seed"] or 0)):
        if row["workload"] not in scenario_of:
            continue
        key = (row["policy"], row["workload"], row["seed"])
        episode = first_episode.get(key, {})
        runs.append({
            "scenario": scenario_of[row["workload"]],
            "arm": row["policy"],
            "seed": row["seed"],
            "interactive_slo_goodput_rps": row["interactive_slo_goodput_rps"],
            "batch_borrow_goodput_rps": row["batch_borrow_goodput_rps"],
            "interactive_ttft_p95_s": nearest_rank(ttfts.get(key, []), 0.95),
            "batch_borrow_e2e_p50_s": nearest_rank(batch_e2es.get(key, []), 0.5),
            "grant_restore_s": episode.get("grant_restore_s"),
            "drain_s": episode.get("drain_s"),
            "engine_schedule_s": episode.get("engine_schedule_s"),
            "episodes": len(gaps.get(key, [])) if key in gaps else 0,
            "worst_engine_schedule_s": max(gaps[key]) if gaps.get(key) else None,
        })
    return StudyTable(runs, _gates(runs))


def _gates(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_key = {(r["scenario"], r["arm"], r["seed"]): r for r in runs}
    gates = []
    for scenario in dict.fromkeys(r["scenario"] for r in runs):
        for gate in GATES:
            per_seed = {}
            # seeds in order (a run without one last): the per-seed deltas read as the seeds go
            for (name, arm, seed), run in sorted(by_key.items(), key=lambda item: (item[0][2] is None,
                                                                                   item[0][2] or 0)):
                baseline = by_key.get((scenario, gate.baseline, seed))
                if name != scenario or arm != gate.policy or baseline is None:
                    continue
                if run[gate.metric] is not None and baseline[gate.metric] is not None:
                    per_seed[seed] = run[gate.metric] - baseline[gate.metric]
            median = nearest_rank(list(per_seed.values()), 0.5)
            holds = None if median is None else median >= gate.threshold_rps - _TOLERANCE
            gates.append({"scenario": scenario, "gate": gate.name, "label": gate.label, "per_seed": per_seed,
                          "median": median, "threshold_rps": gate.threshold_rps, "holds": holds})
    return gates
