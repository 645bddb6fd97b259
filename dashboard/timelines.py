"""Episode timelines: one picture per restoration, each separate event a labelled mark.

Pure builders: a detail from ``dashboard.episodes`` or ``dashboard.pressure`` in, a Plotly figure
out. Event names are the markers' text (so they are in the figure spec, not only drawn), times are
seconds from t0. Text from the spans (models, policies, wake paths, request ids, event details)
goes through ``figures.literal`` first: Plotly draws it as written, never as a link or markup.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from restorelens.dashboard import palette
from restorelens.dashboard.episodes import LendingDetail, WakeDetail
from restorelens.dashboard.labels import UNNAMED_POLICY
from restorelens.dashboard.pressure import EpisodePressure
from restorelens.dashboard.figures import literal, literals

__all__ = ["EVENT_COLOURS", "hint_scatter", "lending_timeline", "pressure_timeline", "wake_timeline"]

#: The episode pages' event colours: the palette's, shared with every other page.
EVENT_COLOURS = palette.EVENTS
_CLIENT, _LIFECYCLE, _HINT = "client", "lifecycle", "Retry-After hint"
_TEMPLATE = palette.TEMPLATE


def _colour(event: str) -> str:
    if event.startswith("success"):  # the retry that got through: the wake bars' "retry"
        return palette.EVENTS["retry"]
    if event.startswith(("first 5", "retry")):
        return palette.BAD
    return EVENT_COLOURS.get(event, palette.NEUTRAL)


def _hover(events: pl.DataFrame) -> list[str]:
    return [f"<b>{literal(e)}</b><br>t0 + {t:.3f} s<br>{literal(d)}"
            for e, t, d in events.select("event", "offset_s", "detail").rows()]


def lending_timeline(detail: LendingDetail) -> go.Figure:
    """Events on top, own and borrowed slots in use below, on one time axis (seconds from t0)."""
    events = detail.events
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.45, 0.55], vertical_spacing=0.08,
                           subplot_titles=("restoration events", "gate slots in use"))
    # One lane per event, in causal order: events milliseconds apart stay readable side by side.
    lanes = literals(reversed(events["event"].to_list()))
    for event, offset in events.select("event", "offset_s").rows():
        figure.add_trace(go.Scatter(x=[0, offset], y=[literal(event)] * 2, mode="lines", hoverinfo="skip",
                                    line={"color": _colour(event), "width": 3}, showlegend=False), row=1, col=1)
    figure.add_trace(
        go.Scatter(
            x=events["offset_s"].to_list(), y=literals(events["event"]), mode="markers+text", name="events",
            text=literals(events["event"]), textposition="middle right", hovertext=_hover(events),
            hoverinfo="text", showlegend=False,
            marker={"size": 13, "symbol": "diamond", "color": [_colour(e) for e in events["event"]]},
        ),
        row=1, col=1,
    )
    for event, offset in events.select("event", "offset_s").rows():
        figure.add_vline(x=offset, line={"dash": "dot", "width": 1, "color": _colour(event)})
    occupancy = detail.occupancy
    for column, colour in (("own", "#1f77b4"), ("borrowed", "#ff7f0e")):
        figure.add_trace(
            go.Scatter(x=occupancy["offset_s"].to_list(), y=occupancy[column].to_list(), name=f"{column} slots",
                       mode="lines", line={"shape": "hv", "color": colour, "width": 2}),
            row=2, col=1,
        )
    episode = detail.episode
    figure.update_yaxes(type="category", categoryorder="array", categoryarray=lanes, showticklabels=False,
                        row=1, col=1)
    figure.update_yaxes(title_text="slots", rangemode="tozero", dtick=1, row=2, col=1)
    figure.update_xaxes(title_text="seconds from demand return (t0)", row=2, col=1)
    figure.update_layout(
        template=_TEMPLATE, height=560, margin={"t": 60, "b": 40, "l": 50, "r": 20},
        title=f"Lending episode · policy {literal(episode.get('policy') or UNNAMED_POLICY)} · "
              f"{literal(episode.get('returning_request_id') or '')}",
        legend={"orientation": "h", "y": -0.18},
    )
    return figure


def wake_timeline(detail: WakeDetail) -> go.Figure:
    """Client attempts, lifecycle instants and the hint on three lanes; the overshoot shaded."""
    events = detail.events
    lanes = [_lane(e) for e in events["event"]]
    figure = go.Figure()
    for lane in (_HINT, _LIFECYCLE, _CLIENT):
        chosen = [i for i, value in enumerate(lanes) if value == lane]
        if not chosen:
            continue
        rows = events[chosen]
        figure.add_trace(go.Scatter(
            x=rows["offset_s"].to_list(), y=[lane] * rows.height, mode="markers+text", name=lane,
            text=literals(rows["event"]),
            textposition=["top center" if i % 2 == 0 else "bottom center" for i in range(rows.height)],
            hovertext=_hover(rows), hoverinfo="text", showlegend=False,
            marker={"size": 13, "symbol": "diamond", "color": [_colour(e) for e in rows["event"]]},
        ))
    hint = detail.episode.get("retry_after_s")
    if hint is not None:
        figure.add_trace(go.Scatter(x=[0, hint], y=[_HINT, _HINT], mode="lines", name="Retry-After wait",
                                    line={"color": "#bcbd22", "width": 6}, hoverinfo="skip", showlegend=False))
    if detail.overshoot is not None:
        start, end = detail.overshoot
        figure.add_vrect(x0=start, x1=end, fillcolor="#d62728", opacity=0.15, line_width=0,
                         annotation_text=f"overshoot {end - start:.2f} s", annotation_position="bottom left")
    episode = detail.episode
    figure.update_yaxes(type="category", categoryorder="array", categoryarray=[_HINT, _LIFECYCLE, _CLIENT])
    figure.update_xaxes(title_text="seconds from the first 503 (t0)", zeroline=True)
    figure.update_layout(
        template=_TEMPLATE, height=380, margin={"t": 60, "b": 40, "l": 110, "r": 20},
        title=f"Wake episode · {literal(episode.get('model'))} · {literal(episode.get('wake_path'))} · "
              f"{literal(episode.get('retry_policy') or '')}",
    )
    return figure


def _lane(event: str) -> str:
    if event in ("wake start", "engine ready", "readiness observed"):
        return _LIFECYCLE
    if event == "Retry-After elapses":
        return _HINT
    return _CLIENT


def hint_scatter(wakes: pl.DataFrame) -> go.Figure:
    """Retry-After hint against actual readiness, one dot per episode; above the diagonal the hint
    was optimistic, below it the client waited past a ready engine."""
    figure = go.Figure()
    usable = wakes.filter(pl.col("retry_after_s").is_not_null() & pl.col("ready_s").is_not_null())
    for path, group in usable.group_by("wake_path", maintain_order=True):
        figure.add_trace(go.Scatter(
            x=group["retry_after_s"].to_list(), y=group["ready_s"].to_list(), mode="markers",
            name=literal(path[0]), marker={"size": 10, "color": palette.colour(path[0], palette.WAKE_PATHS)}, customdata=literals(group["span_id"]),
            hovertemplate="hint %{x:.1f} s<br>ready %{y:.2f} s<extra>%{fullData.name}</extra>",
        ))
    top = max([*usable["retry_after_s"].to_list(), *usable["ready_s"].to_list(), 1.0])
    figure.add_trace(go.Scatter(x=[0, top], y=[0, top], mode="lines", name="hint = ready",
                                line={"dash": "dash", "color": palette.NEUTRAL}))
    figure.update_layout(template=_TEMPLATE, height=380, title="Retry-After hint vs actual readiness",
                         xaxis_title="Retry-After hint (s)", yaxis_title="engine ready after t0 (s)")
    return figure


_ENGINE_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]


def pressure_timeline(pressure: EpisodePressure) -> go.Figure:
    """The engines' KV-cache usage above their running and waiting requests, as scraped, on the
    episode's time axis (seconds from t0, t0 marked). One colour per engine (the scraped target);
    running solid, waiting dashed."""
    samples = pressure.samples
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.45, 0.55], vertical_spacing=0.1,
                           subplot_titles=("KV-cache usage", "requests running and waiting"))
    ordered = samples.sort("engine", "offset_s", maintain_order=True)
    for index, ((engine,), rows) in enumerate(ordered.group_by("engine", maintain_order=True)):
        colour = _ENGINE_COLOURS[index % len(_ENGINE_COLOURS)]
        name = literal(engine)
        x = rows["offset_s"].to_list()
        # a gauge holds its value until the next scrape: steps, and a dot where each was read
        figure.add_trace(go.Scatter(
            x=x, y=rows["kv_cache_usage_fraction"].to_list(), mode="lines+markers", name=f"{name} KV cache",
            legendgroup=name, line={"shape": "hv", "color": colour, "width": 2}, marker={"size": 4},
            hovertemplate="%{fullData.name}<br>t0 %{x:+.3f} s: %{y:.1%}<extra></extra>",
        ), row=1, col=1)
        for column, dash in (("running", "solid"), ("waiting", "dash")):
            figure.add_trace(go.Scatter(
                x=x, y=rows[column].to_list(), mode="lines+markers", name=f"{name} {column}", legendgroup=name,
                line={"shape": "hv", "color": colour, "width": 2, "dash": dash}, marker={"size": 4},
                hovertemplate="%{fullData.name}<br>t0 %{x:+.3f} s: %{y:g}<extra></extra>",
            ), row=2, col=1)
    figure.add_vline(x=0, line={"dash": "dot", "width": 1, "color": "#636363"})
    figure.update_xaxes(range=[pressure.start_s, pressure.end_s])
    figure.update_xaxes(title_text="seconds from t0", row=2, col=1)
    figure.update_yaxes(range=[0, 1.02], tickformat=".0%", title_text="used", row=1, col=1)
    figure.update_yaxes(rangemode="tozero", title_text="requests", row=2, col=1)
    figure.update_layout(
        template=_TEMPLATE, height=460, margin={"t": 60, "b": 40, "l": 50, "r": 20},
        title=f"Engine pressure · {literal(pressure.model)} · {samples['engine'].n_unique()} engine(s) scraped",
        legend={"orientation": "h", "y": -0.2},
    )
    return figure
