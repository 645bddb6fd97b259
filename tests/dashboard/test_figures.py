"""Overview, policy, lifecycle and trace figures built from the realistic store."""

from __future__ import annotations

import polars as pl
import pytest

from restorelens.analysis import Analysis
from restorelens.dashboard import figures, palette
from restorelens.dashboard.engine import distribution_curves
from restorelens.dashboard.overview import WAKE_METRICS
from restorelens.dashboard.segments import SEGMENTS, WAKE_SEGMENTS, time_segments


def test_time_bars_draw_one_bar_per_episode_stacked_in_time_order(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    segments = time_segments(wakes, "wake")
    figure = figures.time_bars(segments, "wakes", SEGMENTS["wake"])
    # legend: the stretches in causal order, each once, in the palette's colour
    assert [trace.name for trace in figure.data] == [e for e in WAKE_SEGMENTS if e in set(segments["event"])]
    assert all(trace.marker.color == palette.EVENTS[trace.name] for trace in figure.data)
    bars = {y for trace in figure.data for y in trace.y}
    assert len(bars) == wakes.height
    cold = wakes.filter(pl.col("wake_path") == "cold-start").row(0, named=True)
    ends = {trace.name: base + width for trace in figure.data
            for base, width, y in zip(trace.base, trace.x, trace.y, strict=True) if "cold-start" in y}
    assert ends["engine ready"] == pytest.approx(cold["ready_s"])
    assert ends["retry"] == pytest.approx(cold["ready_s"] + cold["overshoot_s"])
    assert max(ends.values()) == pytest.approx(cold["total_s"])
    # longest on top: the category order follows the total, descending
    totals = segments.group_by("episode").agg(pl.col("total_s").first()).sort("total_s", descending=True)
    assert list(figure.layout.yaxis.categoryarray) == totals["episode"].to_list()


def test_a_censored_or_skewed_episode_is_marked_on_its_bar() -> None:
    from datetime import datetime

    episodes = pl.DataFrame({"t0": [datetime(2026, 1, 1)] * 2, "span_id": ["aa" * 8, "bb" * 8], "policy": ["lend"] * 2,
                             "run_id": [None, "r"], "grant_restore_s": [0.5, 1.0], "drain_s": [2.0, None],
                             "engine_schedule_s": [0.25, None], "ttft_s": [3.0, None], "censored": [False, True],
                             "clock_skew": [True, False]})
    segments = time_segments(episodes, "lending")
    figure = figures.time_bars(segments, "lending", SEGMENTS["lending"])
    censored = [y for y in segments.filter(pl.col("censored"))["episode"]]
    assert censored and all("censored" in y for y in censored)
    grant = next(trace for trace in figure.data if trace.name == "grant restored")
    hatched = dict(zip(grant.y, grant.marker.pattern.shape, strict=True))
    outlined = dict(zip(grant.y, grant.marker.line.color, strict=True))
    assert [y for y, shape in hatched.items() if shape] == censored
    assert [y for y, colour in outlined.items() if colour == palette.BAD] == [
        y for y in grant.y if "clock skew" in y]


def test_the_overview_distributions_are_ecdfs_per_wake_path(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    curves = distribution_curves(wakes, ("wake_path",), WAKE_METRICS)
    figure = figures.engine_distributions(curves, figures.WAKE_TITLES, ("wake path",), known=palette.WAKE_PATHS,
                                          what="episodes")
    shown = [trace for trace in figure.data if trace.showlegend]
    assert sorted(trace.name for trace in shown) == sorted(set(wakes["wake_path"]))
    assert all(trace.line.color == palette.WAKE_PATHS[trace.name] for trace in figure.data)
    for trace in figure.data:  # each curve rises to 100 % of its episodes
        assert trace.y[0] == 0.0 and trace.y[-1] == 1.0 and list(trace.y) == sorted(trace.y)


def test_the_package_exports_exactly_its_public_names() -> None:
    import restorelens.dashboard as package

    assert package.__all__ == sorted(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None


