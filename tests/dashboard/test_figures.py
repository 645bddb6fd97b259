"""Overview, policy, lifecycle and trace figures built from the realistic store."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from restorelens.analysis import Analysis, percentiles_of
from restorelens.dashboard import figures


@pytest.fixture(scope="module")
def analysis(store_path: Path) -> Analysis:
    opened = Analysis.open(store_path)
    yield opened
    opened.close()


def test_statistics_dots_plot_p50_p95_and_max_per_group(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    stats = percentiles_of(wakes, ["overshoot_s", "ready_s"], ["wake_path"])
    figure = figures.statistics_dots(stats, ["wake_path"], "wakes")
    names = {trace.name for trace in figure.data}
    assert "cold-start max" in names and "in-place p50" in names
    (cold_max,) = [trace for trace in figure.data if trace.name == "cold-start max"]
    assert dict(zip(cold_max.x, cold_max.y, strict=True)) == {"overshoot_s": 0.5, "ready_s": 31.25}


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
