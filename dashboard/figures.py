"""Plotly figures for the overview, policy, lifecycle and trace pages (pure: frames in, figure out).

Episode timelines live in ``dashboard/timelines.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

__all__ = ["goodput_strip", "lifecycle_swimlanes", "paired_strip", "statistics_dots", "waterfall"]

_TEMPLATE = "plotly_white"
_STAT_SYMBOLS = {"p50": "circle", "p95": "diamond", "max": "x"}


def _group_label(row: dict, groups: Sequence[str]) -> str:
    return " · ".join(str(row[g]) for g in groups) or "all"


def statistics_dots(stats: pl.DataFrame, groups: Sequence[str], title: str) -> go.Figure:
    """p50, p95 and max of each metric (x) per group (colour); ``stats`` from ``percentiles_of``."""
    figure = go.Figure()
    labelled = stats.with_columns(
        pl.Series("group", [_group_label(row, groups) for row in stats.iter_rows(named=True)], dtype=pl.String)
    )
    for (group,), rows in labelled.group_by("group", maintain_order=True):
        for statistic, symbol in _STAT_SYMBOLS.items():
            figure.add_trace(go.Scatter(
                x=rows["metric"].to_list(), y=rows[statistic].to_list(), mode="markers",
                name=f"{group} {statistic}", legendgroup=str(group), marker={"symbol": symbol, "size": 11},
                customdata=rows["count"].to_list(),
                hovertemplate=f"{group}<br>%{{x}} {statistic} = %{{y:.3f}} s<br>n = %{{customdata}}<extra></extra>",
            ))
    figure.update_layout(template=_TEMPLATE, title=title, height=380, yaxis_title="seconds",
                         xaxis_title="restoration event", legend={"font": {"size": 10}})
    return figure


def goodput_strip(summary: pl.DataFrame) -> go.Figure:
    """Interactive SLO goodput and batch goodput per policy × workload, one dot per seed."""
    workloads = sorted({str(w) for w in summary["workload"].to_list()})
    figure = make_subplots(rows=2, cols=max(len(workloads), 1), shared_yaxes="rows",
                           subplot_titles=[*(f"{w}: interactive SLO goodput" for w in workloads),
                                           *(f"{w}: batch goodput (borrow phase)" for w in workloads)])
    rows = (("interactive_slo_goodput_rps", 1), ("batch_borrow_goodput_rps", 2))
    for col, workload in enumerate(workloads, start=1):
        part = summary.filter(pl.col("workload").cast(pl.String) == workload)
        for column, row in rows:
            figure.add_trace(go.Box(
                x=part["policy"].to_list(), y=part[column].to_list(), boxpoints="all", jitter=0.3,
                pointpos=0, fillcolor="rgba(0,0,0,0)", line={"color": "rgba(0,0,0,0)"},
                marker={"size": 9, "color": "#1f77b4" if row == 1 else "#ff7f0e"},
                customdata=part["seed"].to_list(), name=f"{workload} {column}", showlegend=False,
                hovertemplate="policy %{x}<br>seed %{customdata}<br>%{y:.4f} req/s<extra></extra>",
            ), row=row, col=col)
    figure.update_yaxes(title_text="req/s", rangemode="tozero")
    figure.update_layout(template=_TEMPLATE, height=560, title="Goodput per policy (one dot per seed)")
    return figure


def paired_strip(paired: pl.DataFrame, baseline: str) -> go.Figure:
    """Policy minus ``baseline`` goodput per workload × seed; above zero the policy did better."""
    part = paired.filter(pl.col("baseline") == baseline)
    figure = make_subplots(rows=1, cols=2, subplot_titles=("interactive SLO goodput Δ", "batch goodput Δ"))
    for col, column in enumerate(("interactive_slo_goodput_diff_rps", "batch_borrow_goodput_diff_rps"), start=1):
        for (workload,), rows in part.group_by("workload", maintain_order=True):
            figure.add_trace(go.Box(
                x=rows["policy"].to_list(), y=rows[column].to_list(), boxpoints="all", jitter=0.3, pointpos=0,
                name=str(workload), legendgroup=str(workload), showlegend=col == 1, customdata=rows["seed"].to_list(),
                hovertemplate=f"{workload}<br>%{{x}} − {baseline}<br>seed %{{customdata}}: %{{y:+.4f}} req/s"
                              "<extra></extra>",
            ), row=1, col=col)
        figure.add_hline(y=0, line={"dash": "dash", "color": "#7f7f7f"}, row=1, col=col)
    figure.update_yaxes(title_text="req/s vs " + baseline, col=1)
    figure.update_layout(template=_TEMPLATE, height=420, boxmode="group",
                         title=f"Paired differences: policy − {baseline}, same workload and seed")
    return figure


_PHASE_COLOURS = {"Ready": "#2ca02c", "Sleeping": "#9467bd", "Waking": "#1f77b4", "Starting": "#17becf",
                  "Pending": "#bcbd22", "Moving": "#ff7f0e", "Failed": "#d62728"}


def lifecycle_swimlanes(intervals: pl.DataFrame) -> go.Figure:
    """One lane per model; each state interval a bar coloured by phase (reason on hover)."""
    figure = go.Figure()
    if intervals.is_empty():
        return figure
    origin = intervals["start"].min()
    timed = intervals.with_columns(
        ((pl.col("start") - origin).dt.total_nanoseconds() / 1e9).alias("from_s"),
    )
    for (phase,), rows in timed.group_by("phase", maintain_order=True):
        figure.add_trace(go.Bar(
            base=rows["from_s"].to_list(), x=rows["duration_s"].to_list(), y=rows["model"].to_list(),
            orientation="h", name=str(phase), marker={"color": _PHASE_COLOURS.get(str(phase), "#7f7f7f")},
            customdata=list(zip(rows["reason"].to_list(), rows["pod"].to_list(), strict=True)),
            hovertemplate=f"{phase}<br>%{{y}} on %{{customdata[1]}}<br>reason %{{customdata[0]}}"
                          "<br>from %{base:.2f} s for %{x:.2f} s<extra></extra>",
        ))
    figure.update_layout(template=_TEMPLATE, barmode="overlay", height=120 + 50 * intervals["model"].n_unique(),
                         title="Model lifecycle (state per model over time)",
                         xaxis_title="seconds from the first state", yaxis_title="model")
    return figure


def waterfall(spans: pl.DataFrame) -> go.Figure:
    """One bar per span of a trace (``Analysis.trace``), indented by depth; events as ticks."""
    figure = go.Figure()
    if spans.is_empty():
        return figure
    depth = _depths(spans)
    labels = [f"{'  ' * depth[sid]}{svc} · {name}" for sid, svc, name in
              spans.select("span_id", "service_name", "name").rows()]
    services = spans["service_name"].to_list()
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]
    colours = {svc: palette[i % len(palette)] for i, svc in enumerate(dict.fromkeys(services))}
    figure.add_trace(go.Bar(
        base=spans["offset_s"].to_list(), x=[max(d, 1e-4) for d in spans["duration_s"].to_list()], y=labels,
        orientation="h", marker={"color": [colours[s] for s in services]}, name="spans",
        customdata=spans["span_id"].to_list(),
        hovertemplate="%{y}<br>start +%{base:.3f} s<br>%{x:.3f} s<br>span %{customdata}<extra></extra>",
    ))
    event_x, event_y, event_text = [], [], []
    for label, names, offsets in zip(labels, spans["event_names"].to_list(), spans["event_offsets_s"].to_list(),
                                     strict=True):
        for name, offset in zip(names or [], offsets or [], strict=False):
            event_x.append(offset)
            event_y.append(label)
            event_text.append(name)
    if event_x:
        figure.add_trace(go.Scatter(x=event_x, y=event_y, mode="markers", text=event_text, name="events",
                                    marker={"symbol": "line-ns-open", "size": 16, "color": "#000"},
                                    hovertemplate="%{text} at +%{x:.3f} s<extra></extra>"))
    figure.update_yaxes(autorange="reversed", type="category")
    figure.update_layout(template=_TEMPLATE, height=120 + 32 * spans.height, showlegend=False,
                         title="Trace waterfall", xaxis_title="seconds from the trace's first span",
                         margin={"l": 260})
    return figure


def _depths(spans: pl.DataFrame) -> dict[str, int]:
    parents = dict(zip(spans["span_id"].to_list(), spans["parent_span_id"].to_list(), strict=True))
    depth: dict[str, int] = {}
    for span_id in parents:
        level, current, seen = 0, parents.get(span_id), {span_id}
        while current and current in parents and current not in seen:
            seen.add(current)
            level += 1
            current = parents[current]
        depth[span_id] = level
    return depth
