"""Lifecycle figures: each model's ModelClaim phases and the memory its pods held, over time.

Pure builders: ``lifecycle_intervals`` rows in (``Analysis.lifecycle_intervals``: run_id, model,
pod, phase, reason, start, end, duration_s, gpu_bytes, host_ram_bytes), a Plotly figure out. Both
figures count seconds from the first state of the frame, so they line up one above the other.
Text from the spans (run ids, models, pods, phases, reasons) goes through ``figures.literal``
first: Plotly draws it as written, never as a link or markup.
"""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from plotly.subplots import make_subplots

from restorelens.dashboard import palette
from restorelens.dashboard.figures import literal, literals

__all__ = ["MAX_INTERVALS", "carries_memory", "lifecycle_swimlanes", "memory_over_time"]

#: The most states the page draws (the latest): a figure's size stays bounded whatever the store holds.
MAX_INTERVALS = 2000
#: A lane's pod when the state had none (not placed: Pending, Scheduling, Failed).
NO_POD = "no pod"
_LANE = " · "
_GIB = 2**30


def _lane(run_id: str | None, *parts: str | None) -> str:
    """``run · model · pod`` (the run left out when null, a missing pod named ``NO_POD``), as literal text."""
    named = [run_id] if run_id is not None else []
    named += [part if part is not None else NO_POD for part in parts]
    return literal(_LANE.join(str(part) for part in named))


def _timed(intervals: pl.DataFrame) -> pl.DataFrame:
    """The intervals with ``from_s`` / ``to_s``: seconds from the frame's first state."""
    origin = intervals["start"].min()
    return intervals.with_columns(
        # nanoseconds from the first state -> seconds
        ((pl.col("start") - origin).dt.total_nanoseconds() / 1e9).alias("from_s"),
        ((pl.col("end") - origin).dt.total_nanoseconds() / 1e9).alias("to_s"),
    )


def _phases_in_order(present: list[str]) -> list[str]:
    """Every phase of the palette in lifecycle order, then any other phase present (a newer lifecycle's)."""
    return [*palette.PHASES, *(phase for phase in dict.fromkeys(present) if phase not in palette.PHASES)]


def lifecycle_swimlanes(intervals: pl.DataFrame) -> go.Figure:
    """One lane per (run, model, pod); each state interval a bar coloured by its phase (reason on
    hover). The legend lists every phase of the lifecycle, in its order, whether present or not,
    each named as the spans spell it."""
    figure = go.Figure()
    figure.update_layout(template=palette.TEMPLATE, title="Model lifecycle (phase per run, model and pod over time)")
    if intervals.is_empty():
        return figure
    ordered = _timed(intervals).sort("run_id", "model", "pod", "start", nulls_last=True)
    lanes = [_lane(run, model, pod) for run, model, pod in ordered.select("run_id", "model", "pod").rows()]
    ordered = ordered.with_columns(pl.Series("lane", lanes, dtype=pl.String))
    for phase in _phases_in_order(ordered["phase"].drop_nulls().to_list()):
        rows = ordered.filter(pl.col("phase") == phase)
        style = {"name": literal(phase), "legendgroup": literal(phase), "orientation": "h",
                 "marker": {"color": palette.colour(phase, palette.PHASES)}}
        if rows.is_empty():  # not in this store: still in the legend, so it always lists every phase
            figure.add_trace(go.Bar(x=[None], y=[None], showlegend=True, hoverinfo="skip", **style))
            continue
        figure.add_trace(go.Bar(
            base=rows["from_s"].to_list(), x=rows["duration_s"].to_list(), y=rows["lane"].to_list(),
            customdata=list(zip(literals(rows["reason"]), rows["to_s"].to_list(), strict=True)),
            hovertemplate="%{fullData.name}<br>%{y}<br>reason %{customdata[0]}"
                          "<br>from %{base:.2f} s to %{customdata[1]:.2f} s (%{x:.2f} s)<extra></extra>",
            **style,
        ))
    order = list(dict.fromkeys(lanes))
    figure.update_layout(barmode="overlay", height=160 + 40 * len(order), legend={"traceorder": "normal"},
                         xaxis_title="seconds from the first state", yaxis_title="run · model · pod")
    # categorical, said outright: the legend-only traces' null lanes would let Plotly guess linear and
    # draw no bar at all
    figure.update_yaxes(type="category", categoryorder="array", categoryarray=order, autorange="reversed")
    return figure


def carries_memory(intervals: pl.DataFrame) -> bool:
    """Whether any state says what memory it held (``modelclaim.gpu_bytes`` / ``host_ram_bytes``)."""
    return not intervals.is_empty() and bool(
        intervals.select(pl.col("gpu_bytes").is_not_null().any() | pl.col("host_ram_bytes").is_not_null().any()).item()
    )


def _memory_steps(intervals: pl.DataFrame) -> pl.DataFrame:
    """Per (run, pod): the bytes held from each instant on, summed over the models on the pod.

    Every placed state with memory figures adds its bytes at its start and takes them off at its end.
    """
    placed = _timed(intervals).filter(pl.col("pod").is_not_null()
                                       & (pl.col("gpu_bytes").is_not_null() | pl.col("host_ram_bytes").is_not_null()))
    held = [pl.col("gpu_bytes").fill_null(0), pl.col("host_ram_bytes").fill_null(0)]
    changes = pl.concat([
        placed.select("run_id", "pod", pl.col("from_s").alias("at_s"), *held),
        placed.select("run_id", "pod", pl.col("to_s").alias("at_s"), *(-column for column in held)),
    ])
    return (changes.group_by("run_id", "pod", "at_s").agg(pl.col("gpu_bytes").sum(), pl.col("host_ram_bytes").sum())
            .sort("run_id", "pod", "at_s", nulls_last=True)
            .with_columns(pl.col("gpu_bytes", "host_ram_bytes").cum_sum().over("run_id", "pod")))


def memory_over_time(intervals: pl.DataFrame) -> go.Figure:
    """GPU memory (top) and host RAM (bottom) each pod held over time, in GiB: step lines, one
    colour per (run, pod), summed over the models on the pod, from the states' memory figures."""
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                           subplot_titles=["GPU memory held", "host RAM held"])
    figure.update_layout(template=palette.TEMPLATE, title="Memory per pod (from the lifecycle states)")
    if not carries_memory(intervals):
        return figure
    steps = _memory_steps(intervals)
    pods = list(dict.fromkeys(steps.select("run_id", "pod").rows()))
    for index, (run_id, pod) in enumerate(pods):
        rows = steps.filter(pl.col("pod") == pod,
                            pl.col("run_id").is_null() if run_id is None else pl.col("run_id") == run_id)
        label = _lane(run_id, pod)
        colour = palette.EXTRA[index % len(palette.EXTRA)]
        for row, column in ((1, "gpu_bytes"), (2, "host_ram_bytes")):
            figure.add_trace(go.Scatter(
                x=rows["at_s"].to_list(),
                # bytes -> GiB (2^30 bytes)
                y=[value / _GIB for value in rows[column].to_list()],
                mode="lines", line={"shape": "hv", "color": colour}, name=label, legendgroup=label,
                showlegend=row == 1,
                hovertemplate="%{fullData.name}<br>from %{x:.2f} s: %{y:.2f} GiB<extra></extra>",
            ), row=row, col=1)
    figure.update_layout(height=520)
    figure.update_yaxes(title_text="GPU GiB", rangemode="tozero", row=1, col=1)
    figure.update_yaxes(title_text="host RAM GiB", rangemode="tozero", row=2, col=1)
    figure.update_xaxes(title_text="seconds from the first state", row=2, col=1)
    return figure
