"""The policy page's data and figures: the MoFlux study's table, as ``restorelens experiment`` scores it.

``policy_page`` scores the store's policy summary, requests and lending episodes with the study's
own code (``restorelens.analysis.study.score_frames``: one decision in one place), one scenario
per workload, and keeps the result as frames for the page's tables and figures:

- the frontier: per scenario, each arm × seed's (interactive SLO goodput, batch borrow goodput)
  and each arm's nearest-rank median over its seeds;
- the gates H1-H3: per scenario the paired difference per seed, its median and the threshold;
- the interactive TTFT p95 of the contention window per arm × seed.

Pure: frames in, frames and Plotly figures out (no Streamlit, no SQL). A null policy reads
``NO_GATE`` and a null workload ``NO_WORKLOAD``, as on every page (``labels.with_arm_labels``).
Text from the spans (policies, workloads, seeds) reaches a figure through ``figures.literal``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from restorelens.analysis import FRONTIER_AXES, GATES, RUN_COLUMNS, STUDY_ARMS, Slo, StudyTable, score_frames
from restorelens.dashboard import palette
from restorelens.dashboard.figures import literal
from restorelens.dashboard.labels import NO_WORKLOAD, with_arm_labels

__all__ = ["PolicyPage", "VERDICTS", "frontier_figure", "gates_figure", "policy_page", "ttft_figure"]

#: A gate's verdict as the page names it (its median against its threshold), and its colour.
VERDICTS = {"holds": palette.GOOD, "fails": palette.BAD, "n/a": palette.NEUTRAL}

#: The per-run table's columns (``RUN_COLUMNS``): seconds and goodputs are floats.
_RUN_TYPES = {"scenario": pl.String, "arm": pl.String, "seed": pl.Int64, "episodes": pl.Int64}
_RUN_SCHEMA = {name: _RUN_TYPES.get(name, pl.Float64) for name in RUN_COLUMNS}
_AXES_SCHEMA = {axis: pl.Float64 for axis in FRONTIER_AXES}
_GATE_SCHEMA = {"scenario": pl.String, "gate": pl.String, "label": pl.String, "per_seed": pl.String,
                "median_rps": pl.Float64, "threshold_rps": pl.Float64, "holds": pl.Boolean, "verdict": pl.String}
_DELTA_SCHEMA = {"scenario": pl.String, "gate": pl.String, "seed": pl.Int64, "delta_rps": pl.Float64,
                 "verdict": pl.String}
_DOMINANCE_SCHEMA = {"scenario": pl.String, "arm": pl.String, "dominates_study_arms": pl.Boolean,
                     **{f"best_study_{axis}": pl.Float64 for axis in FRONTIER_AXES}}
_AXIS_TITLES = {"interactive_slo_goodput_rps": "interactive SLO goodput (req/s)",
                "batch_borrow_goodput_rps": "batch borrow goodput (req/s)"}


@dataclass(frozen=True)
class PolicyPage:
    """The study's table of one store (``table``) and its parts as frames, for the policy page."""

    table: StudyTable
    #: Workloads, sorted, ``NO_WORKLOAD`` last; arms in the study's order, others by name.
    scenarios: tuple[str, ...]
    arms: tuple[str, ...]
    #: One row per scenario × arm × seed (``RUN_COLUMNS``).
    runs: pl.DataFrame
    #: The frontier: ``points`` per scenario × arm × seed, ``medians`` per scenario × arm (nearest-rank).
    points: pl.DataFrame
    medians: pl.DataFrame
    #: Per scenario × gate: the per-seed deltas as text, median, threshold, holds and its ``VERDICTS`` name.
    gates: pl.DataFrame
    #: Per scenario × gate × seed: the paired difference (policy − baseline) and the gate's verdict.
    deltas: pl.DataFrame
    #: Per scenario, each arm that is not one of the study's: does its median point dominate theirs?
    dominance: pl.DataFrame

    @property
    def empty(self) -> bool:
        """No policy arm in the store: nothing to score."""
        return self.runs.is_empty()


def policy_page(summary: pl.DataFrame, requests: pl.DataFrame, lending: pl.DataFrame) -> PolicyPage:
    """The policy page of ``Analysis.policy_summary()``, ``requests()`` and ``lending_episodes()``:
    the study's table with one scenario per workload (``score_frames``)."""
    # a lending episode's null policy and workload as its requests' (not UNNAMED_POLICY): so it meets their run
    summary, requests, lending = (with_arm_labels(frame) for frame in (summary, requests, lending))
    workloads = sorted(set(summary["workload"].to_list()), key=lambda w: (w == NO_WORKLOAD, w))
    table = score_frames(summary, requests, lending, {workload: workload for workload in workloads})
    rank = {arm: i for i, arm in enumerate(STUDY_ARMS)}
    arms = tuple(sorted({run["arm"] for run in table.runs}, key=lambda arm: (rank.get(arm, len(rank)), arm)))
    frontier = table.frontier()
    return PolicyPage(
        table=table,
        scenarios=tuple(workloads),
        arms=arms,
        runs=pl.DataFrame(table.runs, schema=_RUN_SCHEMA),
        points=pl.DataFrame(frontier["points"],
                            schema={"scenario": pl.String, "arm": pl.String, "seed": pl.Int64, **_AXES_SCHEMA}),
        medians=pl.DataFrame(frontier["medians"],
                             schema={"scenario": pl.String, "arm": pl.String, "seeds": pl.Int64, **_AXES_SCHEMA}),
        gates=pl.DataFrame([_gate_row(gate) for gate in table.gates], schema=_GATE_SCHEMA),
        deltas=pl.DataFrame([{"scenario": gate["scenario"], "gate": gate["gate"], "seed": seed, "delta_rps": delta,
                              "verdict": _verdict(gate["holds"])}
                             for gate in table.gates for seed, delta in gate["per_seed"].items()],
                            schema=_DELTA_SCHEMA),
        dominance=pl.DataFrame(frontier["dominance"], schema=_DOMINANCE_SCHEMA),
    )


def _verdict(holds: bool | None) -> str:
    return "n/a" if holds is None else "holds" if holds else "fails"


def _gate_row(gate: dict[str, Any]) -> dict[str, Any]:
    per_seed = ", ".join(f"{seed}: {delta:+.3f}" for seed, delta in gate["per_seed"].items())
    return {"scenario": gate["scenario"], "gate": gate["gate"], "label": gate["label"], "per_seed": per_seed,
            "median_rps": gate["median"], "threshold_rps": gate["threshold_rps"], "holds": gate["holds"],
            "verdict": _verdict(gate["holds"])}


def _seed_text(seed: object) -> str:
    return "no seed" if seed is None else literal(seed)


def _panels(page: PolicyPage, title: str, subtitle: str, *, shared_yaxes: bool = True) -> go.Figure:
    """One column per scenario, each titled by it (a store with none still gets one empty panel)."""
    scenarios = page.scenarios or ("",)
    return make_subplots(rows=1, cols=len(scenarios), shared_yaxes=shared_yaxes,
                         subplot_titles=[literal(s) for s in scenarios]).update_layout(
        template=palette.TEMPLATE, title={"text": title, "subtitle": {"text": subtitle}}, height=480,
        margin={"t": 110}, legend={"title": {"text": "policy"}})


def _legend_rank(page: PolicyPage, arm: str) -> int:
    """The legend lists the arms in ``page.arms``'s order, whichever panel draws an arm first."""
    return 1 + page.arms.index(arm)


def frontier_figure(page: PolicyPage) -> go.Figure:
    """Per scenario, interactive SLO goodput (x) against batch borrow goodput (y): one dot per
    arm × seed, and each arm's median over its seeds as a larger diamond in the arm's colour.
    Traces carry ``meta`` "seeds" or "median"; the legend lists each policy once, by its name."""
    figure = _panels(page, "Frontier: interactive SLO goodput against batch borrow goodput",
                     "dots: one per arm × seed; diamonds: each arm's median over its seeds (nearest-rank)")
    x_axis, y_axis = FRONTIER_AXES
    shown: set[str] = set()
    for col, scenario in enumerate(page.scenarios, start=1):
        points = page.points.filter(pl.col("scenario") == scenario)
        medians = page.medians.filter(pl.col("scenario") == scenario)
        for arm in page.arms:
            seeds = points.filter(pl.col("arm") == arm)
            if seeds.is_empty():
                continue
            name, colour = literal(arm), palette.colour(arm, palette.POLICIES)
            figure.add_trace(go.Scatter(
                x=seeds[x_axis].to_list(), y=seeds[y_axis].to_list(), mode="markers", name=name, legendgroup=name,
                showlegend=arm not in shown, legendrank=_legend_rank(page, arm), meta="seeds",
                marker={"color": colour, "size": 11, "opacity": 0.8, "line": {"width": 1, "color": "white"}},
                customdata=[[name, _seed_text(seed)] for seed in seeds["seed"].to_list()],
                hovertemplate="%{customdata[0]}, seed %{customdata[1]}<br>interactive SLO goodput %{x:.4f} req/s"
                              "<br>batch borrow goodput %{y:.4f} req/s<extra></extra>",
            ), row=1, col=col)
            shown.add(arm)
            for median in medians.filter(pl.col("arm") == arm).iter_rows(named=True):
                if median[x_axis] is None or median[y_axis] is None:
                    continue  # no seed of the arm has that goodput: no point to draw
                figure.add_trace(go.Scatter(
                    x=[median[x_axis]], y=[median[y_axis]], mode="markers", name=name, legendgroup=name,
                    showlegend=False, meta="median",
                    marker={"color": colour, "size": 20, "symbol": "diamond", "line": {"width": 2, "color": "black"}},
                    customdata=[[name, median["seeds"]]],
                    hovertemplate="%{customdata[0]}, median over %{customdata[1]} seeds<br>interactive SLO goodput "
                                  "%{x:.4f} req/s<br>batch borrow goodput %{y:.4f} req/s<extra></extra>",
                ), row=1, col=col)
        figure.update_xaxes(title_text=_AXIS_TITLES[x_axis], rangemode="tozero", row=1, col=col)
    figure.update_yaxes(title_text=_AXIS_TITLES[y_axis], rangemode="tozero", col=1)
    return figure


def _gate_tick(gate_name: str) -> str:
    gate = next(g for g in GATES if g.name == gate_name)
    return f"{gate.name}: {gate.policy} − {gate.baseline}"


def gates_figure(page: PolicyPage) -> go.Figure:
    """Per scenario, each gate's paired differences (policy − baseline, same seed): one dot per
    seed, the median as a diamond, both coloured by the gate's verdict (``VERDICTS``: the median
    against the threshold), and the threshold as a black bar. A gate whose arms were not both
    played reads "n/a" at its threshold."""
    figure = _panels(page, "The study's gates: policy − baseline, paired per seed",
                     "dots: one per seed; diamonds: the median over seeds (nearest-rank); bars: the gate's threshold",
                     shared_yaxes=False)
    figure.update_layout(legend={"title": {"text": "gate"}})
    ticks = [_gate_tick(gate.name) for gate in GATES]
    shown: set[str] = set()
    for col, scenario in enumerate(page.scenarios, start=1):
        gates = page.gates.filter(pl.col("scenario") == scenario)
        deltas = page.deltas.filter(pl.col("scenario") == scenario)
        figure.add_trace(go.Scatter(  # first, so the gates keep their order on the axis
            x=[_gate_tick(g) for g in gates["gate"].to_list()], y=gates["threshold_rps"].to_list(), mode="markers",
            name="threshold", legendgroup="threshold", showlegend=col == 1, meta="threshold",
            marker={"symbol": "line-ew-open", "size": 46, "line": {"width": 3, "color": "black"}, "color": "black"},
            customdata=gates["label"].to_list(),
            hovertemplate="%{customdata}<br>threshold %{y:+.3f} req/s<extra></extra>",
        ), row=1, col=col)
        for verdict, colour in VERDICTS.items():
            judged = gates.filter(pl.col("verdict") == verdict)
            if judged.is_empty():
                continue
            if verdict == "n/a":
                figure.add_trace(go.Scatter(
                    x=[_gate_tick(g) for g in judged["gate"].to_list()], y=judged["threshold_rps"].to_list(),
                    mode="text", text=["n/a: an arm not played"] * judged.height, textposition="top center",
                    textfont={"color": colour}, showlegend=False, meta="n/a", hoverinfo="skip",
                ), row=1, col=col)
                continue
            seeds = deltas.filter(pl.col("verdict") == verdict)
            figure.add_trace(go.Scatter(
                x=[_gate_tick(g) for g in seeds["gate"].to_list()], y=seeds["delta_rps"].to_list(), mode="markers",
                name=verdict, legendgroup=verdict, showlegend=verdict not in shown, meta="seeds",
                marker={"color": colour, "size": 10, "opacity": 0.8},
                customdata=[[_gate_tick(g), _seed_text(s)] for g, s in zip(seeds["gate"], seeds["seed"], strict=True)],
                hovertemplate="%{customdata[0]}, seed %{customdata[1]}: %{y:+.4f} req/s<extra></extra>",
            ), row=1, col=col)
            figure.add_trace(go.Scatter(
                x=[_gate_tick(g) for g in judged["gate"].to_list()], y=judged["median_rps"].to_list(),
                mode="markers", name=verdict, legendgroup=verdict, showlegend=False, meta="median",
                marker={"color": colour, "size": 18, "symbol": "diamond", "line": {"width": 2, "color": "black"}},
                customdata=[[label, verdict] for label in judged["label"].to_list()],
                hovertemplate="%{customdata[0]}<br>median %{y:+.4f} req/s: %{customdata[1]}<extra></extra>",
            ), row=1, col=col)
            shown.add(verdict)
        figure.update_xaxes(categoryorder="array", categoryarray=ticks, row=1, col=col)
        figure.add_hline(y=0, line={"dash": "dot", "color": palette.NEUTRAL, "width": 1}, row=1, col=col)
    figure.update_yaxes(title_text="policy − baseline (req/s)", col=1)
    return figure


def ttft_figure(page: PolicyPage, slo: Slo) -> go.Figure:
    """Per scenario, the interactive TTFT p95 of the contention window (nearest-rank) per arm:
    one dot per seed in the arm's colour, and the SLO's TTFT threshold as a dashed line."""
    figure = _panels(page, "Interactive TTFT p95 in the contention window",
                     "one dot per arm × seed (nearest-rank p95); dashed: the SLO's TTFT threshold")
    shown: set[str] = set()
    for col, scenario in enumerate(page.scenarios, start=1):
        runs = page.runs.filter(pl.col("scenario") == scenario)
        for arm in page.arms:
            seeds = runs.filter(pl.col("arm") == arm)
            if seeds.is_empty():
                continue
            name = literal(arm)
            figure.add_trace(go.Scatter(
                x=[name] * seeds.height, y=seeds["interactive_ttft_p95_s"].to_list(), mode="markers", name=name,
                legendgroup=name, showlegend=arm not in shown, legendrank=_legend_rank(page, arm), meta="seeds",
                marker={"color": palette.colour(arm, palette.POLICIES), "size": 11, "opacity": 0.8},
                customdata=[[name, _seed_text(seed)] for seed in seeds["seed"].to_list()],
                hovertemplate="%{customdata[0]}, seed %{customdata[1]}<br>TTFT p95 %{y:.3f} s<extra></extra>",
            ), row=1, col=col)
            shown.add(arm)
        figure.add_hline(y=slo.ttft_s, line={"dash": "dash", "color": palette.BAD, "width": 2}, row=1, col=col,
                         annotation_text=f"SLO: TTFT ≤ {slo.ttft_s:g} s", annotation_position="top left")
    figure.update_yaxes(title_text="TTFT p95 (s)", rangemode="tozero", col=1)
    return figure
