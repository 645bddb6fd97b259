"""Plotly figures for the overview, engine, policy, lifecycle and trace pages (pure: frames in, figure out).

Episode timelines live in ``dashboard/timelines.py``.

Plotly reads a subset of HTML in every text it draws (names, legends, hover text, tick labels,
annotations, titles): ``<a href>``, ``<b>``, ``<br>``, ``<span style>``. Text that comes from the
spans (span, service and model names, policies, attribute values) goes through ``literal`` (or
``literals`` for a column) before it reaches a figure, so it shows as written and never becomes a
link or markup. Our own hover templates keep their ``<br>``; data is never formatted into them but
reaches them through ``%{...}`` fields (customdata, the axes, the trace's name).
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from restorelens.dashboard import palette
from restorelens.dashboard.data import NO_GATE, NO_WORKLOAD, with_arm_labels

__all__ = ["ENGINE_TITLES", "LENDING_TITLES", "TIME_BAR_TITLES", "WAKE_TITLES", "engine_distributions", "goodput_strip",
           "lifecycle_swimlanes", "literal", "literals", "paired_strip", "time_bars", "waterfall"]

_TEMPLATE = palette.TEMPLATE
_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#bcbd22", "#7f7f7f",
            "#d62728"]

#: The engine page's panels: metric -> its short title (the page's caption says what each measures).
ENGINE_TITLES = {
    "queue_s": "queue (time_in_queue)",
    "schedule_delay_s": "schedule delay",
    "ttft_s": "TTFT",
    "prefill_s": "prefill",
    "decode_s": "decode",
}


#: The "where the time went" charts' titles, per episode kind.
TIME_BAR_TITLES = {"lending": "Lending episodes: where the time went (seconds from demand returned, t0)",
                   "wake": "Wake episodes: where the time went (seconds from the first 503, t0)"}
#: The overview's distribution panels: an episode metric -> its title.
LENDING_TITLES = {
    "grant_restore_s": "grant restored (from t0)",
    "drain_s": "borrowed drained (from t0)",
    "engine_schedule_s": "engine scheduled (after the grant)",
    "ttft_s": "first token (from t0)",
}
WAKE_TITLES = {
    "ready_s": "engine ready (from the first 503)",
    "overshoot_s": "overshoot (ready → retry)",
    "retry_after_s": "Retry-After hint",
    "observed_s": "readiness observed",
    "engine_schedule_s": "engine scheduled (after the retry)",
    "total_s": "first token (from the first 503)",
}


def literal(value: object) -> str:
    """``value`` as Plotly text that shows as written: ``&``, ``<`` and ``>`` as the entities Plotly
    draws as those characters, so no tag in it is read (quotes need none: they mean nothing outside
    a tag, and Plotly would draw ``&quot;`` as written)."""
    return html.escape(str(value), quote=False)


def literals(values: Iterable[Any]) -> list[Any]:
    """A column for a figure: each string through ``literal``; numbers and nulls as they are."""
    return [literal(value) if isinstance(value, str) else value for value in values]


def _group_label(row: dict, groups: Sequence[str]) -> str:
    return literal(" · ".join(str(row[g]) for g in groups) or "all")


def time_bars(segments: pl.DataFrame, title: str, events: Sequence[str]) -> go.Figure:
    """Where each episode's time went: one horizontal bar per episode (``data.time_segments``), its
    stretches stacked in time order and coloured by the instant that ends each (legend: ``events``,
    in causal order, named as the pages name them). Longest on top; a censored episode's bar is
    hatched and a clock-skewed one outlined in red, and both say so in their name."""
    figure = go.Figure()
    if segments.is_empty():
        return figure
    order = list(dict.fromkeys(segments["episode"].to_list()))
    for event in dict.fromkeys([*events, *segments["event"].to_list()]):
        rows = segments.filter(pl.col("event") == event)
        if rows.is_empty():
            continue
        censored, skewed = rows["censored"].to_list(), rows["clock_skew"].to_list()
        figure.add_trace(go.Bar(
            base=rows["from_s"].to_list(), x=rows["seconds"].to_list(), y=literals(rows["episode"]),
            orientation="h", name=literal(event), legendgroup=literal(event),
            marker={"color": palette.colour(event, palette.EVENTS),
                    "pattern": {"shape": ["/" if c else "" for c in censored]},
                    "line": {"color": [palette.BAD if k else "rgba(0,0,0,0)" for k in skewed], "width": 2}},
            customdata=list(zip(rows["to_s"].to_list(), rows["total_s"].to_list(), strict=True)),
            hovertemplate="%{y}<br>until %{fullData.name}: %{x:.3f} s<br>at t0 + %{customdata[0]:.3f} s"
                          " of %{customdata[1]:.3f} s<extra></extra>",
        ))
    figure.update_yaxes(categoryorder="array", categoryarray=literals(order), autorange="reversed", type="category")
    figure.update_layout(template=palette.TEMPLATE, barmode="overlay", title=literal(title),
                         height=160 + 26 * len(order), xaxis_title="seconds from t0",
                         legend={"orientation": "h", "y": -0.15 if len(order) < 8 else -0.05,
                                 "traceorder": "normal"},
                         margin={"l": 10})
    return figure


def engine_distributions(curves: pl.DataFrame, titles: Mapping[str, str] = ENGINE_TITLES,
                         groups: Sequence[str] = ("engine", "traffic class"), *,
                         known: Mapping[str, str] | None = None, what: str = "requests") -> go.Figure:
    """One panel per metric (``titles``' order), one step curve (an ECDF) per group: the share of
    the group's ``what`` at or below each time. ``curves`` from ``data.distribution_curves``; a
    group's name (its ``groups`` values, e.g. engine · traffic class, or a policy) is its legend
    entry, shared by its curves in every panel, coloured from ``known`` (a palette map) when given."""
    metrics = list(titles)
    columns = 3
    rows = max(1, math.ceil(len(metrics) / columns))
    figure = make_subplots(rows=rows, cols=columns, subplot_titles=[literal(titles[m]) for m in metrics],
                           horizontal_spacing=0.07, vertical_spacing=0.16)
    names = list(dict.fromkeys(curves["group"].to_list()))
    colours = ({group: palette.colour(group, known) for group in names} if known is not None
               else {group: _PALETTE[i % len(_PALETTE)] for i, group in enumerate(names)})
    shown: set[str] = set()
    for index, metric in enumerate(metrics):
        row, col = index // columns + 1, index % columns + 1
        for (group,), part in curves.filter(pl.col("metric") == metric).group_by("group", maintain_order=True):
            seconds, count = part["seconds"].to_list(), part["count"].to_list()
            # from 0 % at the smallest value, so that a group of one request is a visible step too
            figure.add_trace(go.Scatter(
                x=[seconds[0], *seconds], y=[0.0, *part["fraction"].to_list()], mode="lines",
                line={"shape": "hv", "color": colours[group], "width": 2},
                name=literal(group), legendgroup=literal(group), showlegend=group not in shown,
                customdata=[count[0], *count],
                hovertemplate=f"%{{fullData.name}}<br>%{{y:.1%}} of %{{customdata}} {what} at or below "
                              "%{x:.3f} s<extra></extra>",
            ), row=row, col=col)
            shown.add(group)
        figure.update_xaxes(title_text="seconds", row=row, col=col)
    figure.update_yaxes(range=[0, 1.02], tickformat=".0%")
    figure.update_yaxes(title_text=f"{what} at or below", col=1)
    # the legend sits in the free cell of the last row when there is one
    free = len(metrics) % columns != 0
    legend = {"x": 0.72, "y": 0.0, "yanchor": "bottom", "font": {"size": 11}} if free else {"orientation": "h"}
    figure.update_layout(template=_TEMPLATE, height=300 * rows + 120, legend=legend,
                         title=f"Distribution per {' · '.join(groups)} (share of {what} at or below)")
    return figure


def _workload_title(summary: pl.DataFrame, workload: str) -> str:
    """A goodput panel's name: its workload; for requests without one that all passed no gate (the
    usual no-gate arm), "no gate, no workload"."""
    if workload == NO_WORKLOAD:
        policies = set(summary.filter(pl.col("workload") == workload)["policy"].to_list())
        if policies == {NO_GATE}:
            return literal(f"{NO_GATE}, {NO_WORKLOAD}")
    return literal(workload)


def goodput_strip(summary: pl.DataFrame) -> go.Figure:
    """Interactive SLO goodput and batch goodput per policy × workload, one dot per seed; a null
    policy reads "no gate" and a null workload "no workload" (``data.with_arm_labels``)."""
    summary = with_arm_labels(summary)
    workloads = sorted({str(w) for w in summary["workload"].to_list()})
    shown = [_workload_title(summary, w) for w in workloads]
    figure = make_subplots(rows=2, cols=max(len(workloads), 1), shared_yaxes="rows",
                           subplot_titles=[*(f"{w}: interactive SLO goodput" for w in shown),
                                           *(f"{w}: batch goodput (borrow phase)" for w in shown)])
    rows = (("interactive_slo_goodput_rps", 1), ("batch_borrow_goodput_rps", 2))
    for col, workload in enumerate(workloads, start=1):
        part = summary.filter(pl.col("workload").cast(pl.String) == workload)
        for column, row in rows:
            figure.add_trace(go.Box(
                x=literals(part["policy"]), y=part[column].to_list(), boxpoints="all", jitter=0.3,
                pointpos=0, fillcolor="rgba(0,0,0,0)", line={"color": "rgba(0,0,0,0)"},
                marker={"size": 9, "color": "#1f77b4" if row == 1 else "#ff7f0e"},
                customdata=literals(part["seed"]), name=f"{literal(workload)} {column}", showlegend=False,
                hovertemplate="policy %{x}<br>seed %{customdata}<br>%{y:.4f} req/s<extra></extra>",
            ), row=row, col=col)
    figure.update_yaxes(title_text="req/s", rangemode="tozero")
    figure.update_layout(template=_TEMPLATE, height=560, title="Goodput per policy (one dot per seed)")
    return figure


def paired_strip(paired: pl.DataFrame, baseline: str) -> go.Figure:
    """Policy minus ``baseline`` goodput per workload × seed; above zero the policy did better. A
    null policy or baseline reads "no gate", a null workload "no workload" (``data.with_arm_labels``)."""
    part = with_arm_labels(paired).filter(pl.col("baseline") == baseline)
    shown = literal(baseline)
    figure = make_subplots(rows=1, cols=2, subplot_titles=("interactive SLO goodput Δ", "batch goodput Δ"))
    for col, column in enumerate(("interactive_slo_goodput_diff_rps", "batch_borrow_goodput_diff_rps"), start=1):
        for (workload,), rows in part.group_by("workload", maintain_order=True):
            figure.add_trace(go.Box(
                x=literals(rows["policy"]), y=rows[column].to_list(), boxpoints="all", jitter=0.3, pointpos=0,
                name=literal(workload), legendgroup=literal(workload), showlegend=col == 1,
                customdata=[[seed, shown] for seed in literals(rows["seed"])],
                hovertemplate="%{fullData.name}<br>%{x} − %{customdata[1]}<br>seed %{customdata[0]}: "
                              "%{y:+.4f} req/s<extra></extra>",
            ), row=1, col=col)
        figure.add_hline(y=0, line={"dash": "dash", "color": "#7f7f7f"}, row=1, col=col)
    figure.update_yaxes(title_text="req/s vs " + shown, col=1)
    figure.update_layout(template=_TEMPLATE, height=420, boxmode="group",
                         title=f"Paired differences: policy − {shown}, same workload and seed")
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
            base=rows["from_s"].to_list(), x=rows["duration_s"].to_list(), y=literals(rows["model"]),
            orientation="h", name=literal(phase), marker={"color": _PHASE_COLOURS.get(str(phase), "#7f7f7f")},
            customdata=list(zip(literals(rows["reason"]), literals(rows["pod"]), strict=True)),
            hovertemplate="%{fullData.name}<br>%{y} on %{customdata[1]}<br>reason %{customdata[0]}"
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
    labels = [literal(f"{'  ' * depth[sid]}{svc} · {name}") for sid, svc, name in
              spans.select("span_id", "service_name", "name").rows()]
    services = spans["service_name"].to_list()
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]
    colours = {svc: palette[i % len(palette)] for i, svc in enumerate(dict.fromkeys(services))}
    figure.add_trace(go.Bar(
        base=spans["offset_s"].to_list(), x=[max(d, 1e-4) for d in spans["duration_s"].to_list()], y=labels,
        orientation="h", marker={"color": [colours[s] for s in services]}, name="spans",
        customdata=literals(spans["span_id"]),
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
        figure.add_trace(go.Scatter(x=event_x, y=event_y, mode="markers", text=literals(event_text), name="events",
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
