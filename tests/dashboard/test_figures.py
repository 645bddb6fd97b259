"""Overview, policy, lifecycle and trace figures built from the realistic store."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from restorelens.analysis import Analysis
from restorelens.dashboard import data, figures, palette


@pytest.fixture(scope="module")
def analysis(store_path: Path) -> Analysis:
    opened = Analysis.open(store_path)
    yield opened
    opened.close()


def test_time_bars_draw_one_bar_per_episode_stacked_in_time_order(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    segments = data.time_segments(wakes, "wake")
    figure = figures.time_bars(segments, "wakes", data.SEGMENTS["wake"])
    # legend: the stretches in causal order, each once, in the palette's colour
    assert [trace.name for trace in figure.data] == [e for e in data.WAKE_SEGMENTS if e in set(segments["event"])]
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
    segments = data.time_segments(episodes, "lending")
    figure = figures.time_bars(segments, "lending", data.SEGMENTS["lending"])
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
    curves = data.distribution_curves(wakes, ("wake_path",), data.WAKE_METRICS)
    figure = figures.engine_distributions(curves, figures.WAKE_TITLES, ("wake path",), known=palette.WAKE_PATHS,
                                          what="episodes")
    shown = [trace for trace in figure.data if trace.showlegend]
    assert sorted(trace.name for trace in shown) == sorted(set(wakes["wake_path"]))
    assert all(trace.line.color == palette.WAKE_PATHS[trace.name] for trace in figure.data)
    for trace in figure.data:  # each curve rises to 100 % of its episodes
        assert trace.y[0] == 0.0 and trace.y[-1] == 1.0 and list(trace.y) == sorted(trace.y)


def test_goodput_strip_has_one_dot_per_seed(analysis: Analysis) -> None:
    summary = analysis.policy_summary().filter(pl.col("workload") == "balanced")
    figure = figures.goodput_strip(summary)
    slo = [trace for trace in figure.data if trace.name == "balanced interactive_slo_goodput_rps"]
    assert len(slo) == 1 and sorted(slo[0].x) == sorted(summary["policy"].to_list())
    assert sorted(slo[0].y) == sorted(summary["interactive_slo_goodput_rps"].to_list())


def test_paired_strip_compares_against_the_baseline(analysis: Analysis) -> None:
    paired = analysis.paired_differences()
    figure = figures.paired_strip(paired, "static")
    lend = paired.filter((pl.col("baseline") == "static") & (pl.col("policy") == "lend"))
    ys = [y for trace in figure.data if trace.xaxis in ("x", None) for y in trace.y]
    assert sorted(ys) == sorted(lend["interactive_slo_goodput_diff_rps"].to_list())


def test_lifecycle_swimlanes_one_bar_per_interval(analysis: Analysis) -> None:
    intervals = analysis.lifecycle_intervals()
    figure = figures.lifecycle_swimlanes(intervals)
    assert sum(len(trace.x) for trace in figure.data) == intervals.height
    assert {trace.name for trace in figure.data} == {"Sleeping", "Waking", "Ready"}
    assert set(figure.data[0].y) <= {"tiny", "small"}
    assert figures.lifecycle_swimlanes(intervals.clear()).data == ()


def test_waterfall_spans_client_gate_and_engine(analysis: Analysis) -> None:
    request = analysis.requests().filter(pl.col("policy") == "lend").row(0, named=True)
    spans = analysis.trace(request["trace_id"])
    figure = figures.waterfall(spans)
    bars = figure.data[0]
    assert len(bars.y) == spans.height
    joined = " ".join(bars.y)
    for name in ("client.request", "gate.request", "llm_request"):
        assert name in joined
    assert "grant.acquired" in figure.data[1].text


def test_the_package_exports_exactly_its_public_names() -> None:
    import restorelens.dashboard as package

    assert package.__all__ == sorted(package.__all__)
    for name in package.__all__:
        assert getattr(package, name) is not None


def test_the_policy_figures_name_the_no_gate_arm_and_a_missing_workload_from_the_analysis_frames() -> None:
    from restorelens.analysis.report import NO_GATE

    # as Analysis.policy_summary() / paired_differences() give them: a null policy is the no-gate arm
    summary = pl.DataFrame({"policy": [None, None, "lend"], "workload": [None, "balanced", "balanced"],
                            "seed": [None, 1, 1], "interactive_slo_goodput_rps": [0.1, 0.2, 0.3],
                            "batch_borrow_goodput_rps": [None, None, 0.4]},
                           schema_overrides={"policy": pl.String, "workload": pl.String, "seed": pl.Int64})
    goodput = figures.goodput_strip(summary)
    titles = [annotation.text for annotation in goodput.layout.annotations]
    assert titles[:2] == ["balanced: interactive SLO goodput", f"{NO_GATE}, no workload: interactive SLO goodput"]
    assert {x for trace in goodput.data for x in trace.x} == {NO_GATE, "lend"}
    paired = pl.DataFrame({"workload": [None, "balanced"], "seed": [None, 1], "policy": ["lend", "lend"],
                           "baseline": [None, None], "interactive_slo_goodput_diff_rps": [0.25, 0.125],
                           "batch_borrow_goodput_diff_rps": [None, None]},
                          schema_overrides={"workload": pl.String, "seed": pl.Int64, "baseline": pl.String})
    figure = figures.paired_strip(paired, NO_GATE)
    assert {trace.name for trace in figure.data} == {"balanced", "no workload"}
    assert figure.layout.title.text == f"Paired differences: policy − {NO_GATE}, same workload and seed"
    # a workload holding gated requests too is named by its workload alone
    mixed = summary.with_columns(pl.lit(None, pl.String).alias("workload"))
    titles = [annotation.text for annotation in figures.goodput_strip(mixed).layout.annotations]
    assert titles == ["no workload: interactive SLO goodput", "no workload: batch goodput (borrow phase)"]
