"""Plotly figures shared by the overview, episode and engine pages (pure: frames in, figure out), and
``literal`` for span text in any figure.

Episode timelines live in ``dashboard/timelines.py``, the policy page's in ``frontier.py``, the
lifecycle's in ``lifecycle.py``, the trace explorer's in ``waterfall.py``.

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

__all__ = ["ENGINE_TITLES", "LENDING_TITLES", "TIME_BAR_TITLES", "WAKE_TITLES", "engine_distributions",
           "literal", "literals", "time_bars"]

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


def time_bars(segments: pl.DataFrame, title: str, events: Sequence[str]) -> go.Figure:
    """Where each episode's time went: one horizontal bar per episode (``segments.time_segments``), its
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
                         # above the bars: below, it would cover the axis on a short chart
                         legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0.0,
                                 "traceorder": "normal"},
                         margin={"l": 10, "t": 90})
    return figure


def engine_distributions(curves: pl.DataFrame, titles: Mapping[str, str] = ENGINE_TITLES,
                         groups: Sequence[str] = ("engine", "traffic class"), *,
                         known: Mapping[str, str] | None = None, what: str = "requests") -> go.Figure:
    """One panel per metric (``titles``' order), one step curve (an ECDF) per group: the share of
    the group's ``what`` at or below each time. ``curves`` from ``engine.distribution_curves``; a
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
