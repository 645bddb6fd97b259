"""The lifecycle page's figures: a lane per (run, model, pod), a colour and a legend entry per real
phase, and the memory each pod held over time."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest

from restorelens.dashboard import palette
from restorelens.dashboard.lifecycle import carries_memory, lifecycle_swimlanes, memory_over_time
from restorelens.gate.modelclaim.phases import PHASES

GIB = 2**30
T0 = datetime(2025, 1, 1, 12, 0, 0)


def intervals(*rows: tuple) -> pl.DataFrame:
    """``lifecycle_intervals`` rows from (run, model, pod, phase, from s, to s, GPU bytes, host RAM bytes)."""
    return pl.DataFrame(
        [{"run_id": run, "model": model, "pod": pod, "phase": phase, "reason": "because",
          "start": T0 + timedelta(seconds=start), "end": T0 + timedelta(seconds=end), "duration_s": end - start,
          "gpu_bytes": gpu, "host_ram_bytes": host}
         for run, model, pod, phase, start, end, gpu, host in rows],
        schema={"run_id": pl.String, "model": pl.String, "pod": pl.String, "phase": pl.String, "reason": pl.String,
                "start": pl.Datetime("ns"), "end": pl.Datetime("ns"), "duration_s": pl.Float64,
                "gpu_bytes": pl.Int64, "host_ram_bytes": pl.Int64},
    )


#: Two runs of one scenario (the same model on the same pod), a state outside any run, and a move.
TWO_RUNS = intervals(
    ("run-1", "tiny", "pod-1", "Sleeping", 0.0, 10.0, GIB, 16 * GIB),
    ("run-1", "tiny", "pod-1", "Activating", 10.0, 14.0, 20 * GIB, 16 * GIB),
    ("run-1", "tiny", "pod-1", "Active", 14.0, 30.0, 20 * GIB, 0),
    ("run-1", "small", "pod-1", "Active", 0.0, 12.0, 8 * GIB, 0),
    ("run-2", "tiny", "pod-1", "Sleeping", 0.0, 10.0, GIB, 16 * GIB),
    ("run-2", "tiny", None, "Scheduling", 10.0, 11.0, 0, 0),
    ("run-2", "tiny", "pod-2", "Loading", 11.0, 40.0, 20 * GIB, 0),
    (None, "tiny", "pod-1", "Active", 0.0, 5.0, None, None),
)


def test_the_palette_has_every_lifecycle_phase_in_lifecycle_order() -> None:
    assert tuple(palette.PHASES) == PHASES


def test_one_lane_per_run_model_and_pod() -> None:
    figure = lifecycle_swimlanes(TWO_RUNS)

    lanes = {y for trace in figure.data for y in trace.y if y is not None}
    assert lanes == {"run-1 · tiny · pod-1", "run-1 · small · pod-1", "run-2 · tiny · pod-1",
                     "run-2 · tiny · no pod", "run-2 · tiny · pod-2", "tiny · pod-1"}
    assert list(figure.layout.yaxis.categoryarray) == [
        "run-1 · small · pod-1", "run-1 · tiny · pod-1", "run-2 · tiny · pod-1", "run-2 · tiny · pod-2",
        "run-2 · tiny · no pod", "tiny · pod-1"]


def test_each_interval_is_a_bar_of_its_phase_on_its_lane() -> None:
    figure = lifecycle_swimlanes(TWO_RUNS)

    bars = sorted((trace.name, y, round(base, 9), length) for trace in figure.data if trace.base is not None
                  for y, base, length in zip(trace.y, trace.base, trace.x, strict=True))
    assert bars == sorted([
        ("Sleeping", "run-1 · tiny · pod-1", 0.0, 10.0), ("Activating", "run-1 · tiny · pod-1", 10.0, 4.0),
        ("Active", "run-1 · tiny · pod-1", 14.0, 16.0), ("Active", "run-1 · small · pod-1", 0.0, 12.0),
        ("Sleeping", "run-2 · tiny · pod-1", 0.0, 10.0), ("Scheduling", "run-2 · tiny · no pod", 10.0, 1.0),
        ("Loading", "run-2 · tiny · pod-2", 11.0, 29.0), ("Active", "tiny · pod-1", 0.0, 5.0),
    ])


@pytest.mark.parametrize("frame", [TWO_RUNS, TWO_RUNS.filter(pl.col("phase") == "Active")], ids=["all", "one phase"])
def test_the_legend_lists_every_phase_in_lifecycle_order_with_the_palettes_colour(frame: pl.DataFrame) -> None:
    figure = lifecycle_swimlanes(frame)

    legend = [(trace.name, trace.marker.color) for trace in figure.data if trace.showlegend is not False]
    assert legend == [(phase, palette.PHASES[phase]) for phase in PHASES]
    assert len({colour for _, colour in legend}) == len(PHASES)  # no two phases look alike


def test_a_phase_the_palette_does_not_know_follows_with_a_colour_of_its_own() -> None:
    figure = lifecycle_swimlanes(intervals(("r", "tiny", "pod-1", "Hibernating", 0.0, 1.0, None, None)))

    names = [trace.name for trace in figure.data]
    assert names == [*PHASES, "Hibernating"]
    assert figure.data[-1].marker.color == palette.colour("Hibernating", palette.PHASES)
    assert figure.data[-1].marker.color not in palette.PHASES.values()


def test_span_text_is_drawn_as_written() -> None:
    figure = lifecycle_swimlanes(intervals(("<b>r</b>", "<a href='x'>m</a>", "p&1", "Active", 0.0, 1.0, None, None)))

    (lane,) = {y for trace in figure.data for y in trace.y if y is not None}
    assert lane == "&lt;b&gt;r&lt;/b&gt; · &lt;a href='x'&gt;m&lt;/a&gt; · p&amp;1"


def test_memory_per_pod_is_a_step_line_in_gib_summed_over_its_models() -> None:
    figure = memory_over_time(TWO_RUNS)

    # seconds and GiB as polars computes them (a division by 1e9 is a multiplication by 1e-9)
    lines = {(trace.name, trace.yaxis): (pytest.approx(list(trace.x)), list(trace.y)) for trace in figure.data}
    # run-1's pod-1 holds tiny and small together until small's state ends at 12 s
    assert lines["run-1 · pod-1", "y"] == ([0.0, 10.0, 12.0, 14.0, 30.0], [9.0, 28.0, 20.0, 20.0, 0.0])
    assert lines["run-1 · pod-1", "y2"] == ([0.0, 10.0, 12.0, 14.0, 30.0], [16.0, 16.0, 16.0, 0.0, 0.0])
    assert lines["run-2 · pod-1", "y"] == ([0.0, 10.0], [1.0, 0.0])
    assert lines["run-2 · pod-2", "y"] == ([11.0, 40.0], [20.0, 0.0])
    # no pod holds nothing, and a state without memory figures adds none
    assert set(lines) == {(pod, axis) for pod in ("run-1 · pod-1", "run-2 · pod-1", "run-2 · pod-2")
                          for axis in ("y", "y2")}
    assert all(trace.line.shape == "hv" for trace in figure.data)
    # one colour per pod on both panels, one legend entry per pod
    colours = {trace.name: {t.line.color for t in figure.data if t.name == trace.name} for trace in figure.data}
    assert all(len(c) == 1 for c in colours.values()) and len({c.pop() for c in colours.values()}) == 3
    assert sorted(trace.name for trace in figure.data if trace.showlegend) == sorted(
        ["run-1 · pod-1", "run-2 · pod-1", "run-2 · pod-2"])
    assert "GiB" in figure.layout.yaxis.title.text and "GiB" in figure.layout.yaxis2.title.text


def test_without_memory_figures_there_is_no_memory_line() -> None:
    bare = TWO_RUNS.with_columns(pl.lit(None, pl.Int64).alias("gpu_bytes"),
                                 pl.lit(None, pl.Int64).alias("host_ram_bytes"))

    assert carries_memory(TWO_RUNS) and not carries_memory(bare) and not carries_memory(TWO_RUNS.clear())
    assert memory_over_time(bare).data == ()


def test_an_empty_frame_draws_nothing() -> None:
    assert lifecycle_swimlanes(TWO_RUNS.clear()).data == ()
    assert memory_over_time(TWO_RUNS.clear()).data == ()
