"""Episode timelines: every event is a labelled mark at its offset; occupancy and overshoot drawn."""

from __future__ import annotations

import polars as pl
import pytest

from restorelens.analysis import Analysis
from restorelens.dashboard import timelines
from restorelens.dashboard.episodes import LENDING_EVENTS, lending_detail, wake_detail


def labelled_marks(figure) -> dict[str, float]:
    marks = {}
    for trace in figure.data:
        if trace.text is not None and trace.mode and "text" in trace.mode:
            marks.update(zip(trace.text, trace.x, strict=True))
    return marks


def test_lending_timeline_marks_the_five_events_over_the_occupancy(analysis: Analysis) -> None:
    episode = analysis.lending_episodes().row(0, named=True)
    detail = lending_detail(episode, analysis.view("gate_requests"))
    figure = timelines.lending_timeline(detail)
    marks = labelled_marks(figure)
    assert set(marks) == set(LENDING_EVENTS)
    assert marks["borrowed drained"] == pytest.approx(episode["drain_s"])
    steps = {trace.name: trace for trace in figure.data if trace.name in ("own slots", "borrowed slots")}
    assert set(steps) == {"own slots", "borrowed slots"}
    assert steps["borrowed slots"].line.shape == "hv"
    assert list(steps["borrowed slots"].y) == detail.occupancy["borrowed"].to_list()


def test_wake_timeline_shades_the_overshoot_and_labels_each_retry(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    cold = wakes.filter(pl.col("wake_path") == "cold-start").row(0, named=True)
    typed = analysis.view("typed_model_wakes").filter(pl.col("span_id") == cold["span_id"]).row(0, named=True)
    attempts = analysis.attempts().filter(pl.col("trace_id") == cold["request_trace_id"])
    figure = timelines.wake_timeline(wake_detail(cold, typed, attempts))
    marks = labelled_marks(figure)
    for label in ("first 503", "wake start", "engine ready", "readiness observed", "retry 1 → 503",
                  "retry 2 → 503", "success 200", "first token", "Retry-After elapses"):
        assert label in marks
    (band,) = [shape for shape in figure.layout.shapes if shape.type == "rect"]
    assert (band.x0, band.x1) == (31.25, 31.75)
    assert any("overshoot 0.50 s" in (note.text or "") for note in figure.layout.annotations)


def test_wake_timeline_without_a_ready_engine_has_no_band() -> None:
    episode = {"t0": pl.datetime(2026, 1, 1), "retry_after_s": 10.0, "first_status": 503, "ready_s": None,
               "observed_s": None, "overshoot_s": None, "total_s": None, "model": "m", "wake_path": "in-place"}
    episode["t0"] = pl.select(episode["t0"]).item()
    attempts = pl.DataFrame(schema={"start": pl.Datetime("ns"), "attempt_index": pl.Int64, "status_code": pl.Int64})
    figure = timelines.wake_timeline(wake_detail(episode, None, attempts))
    assert not [shape for shape in figure.layout.shapes if shape.type == "rect"]
    assert set(labelled_marks(figure)) == {"first 503", "Retry-After elapses"}


def test_hint_scatter_has_one_dot_per_episode_and_the_diagonal(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    figure = timelines.hint_scatter(wakes)
    dots = [trace for trace in figure.data if trace.name != "hint = ready"]
    assert sum(len(trace.x) for trace in dots) == wakes.height
    assert {trace.name for trace in dots} == set(wakes["wake_path"])
    points = {(x, y) for trace in dots for x, y in zip(trace.x, trace.y, strict=True)}
    assert (10.0, 31.25) in points
