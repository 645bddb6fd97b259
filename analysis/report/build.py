"""The report's sections computed from an analysis: percentiles of each view's metrics, the
episode counts and the policy summary with its paired differences (median over seeds)."""

from __future__ import annotations

import polars as pl

from restorelens.analysis.study import STUDY_ARMS
from restorelens.analysis.views import Analysis, nearest_rank_expr, percentiles_of

__all__ = ["ENGINE_METRICS", "LENDING_METRICS", "OUTSIDE_ENGINE_SPANS", "PHASE_STATISTICS", "REQUEST_METRICS",
           "WAKE_METRICS", "arm_order", "build_report", "phase_statistics"]

LENDING_METRICS = ("grant_restore_s", "drain_s", "engine_schedule_s", "ttft_s")
WAKE_METRICS = ("retry_after_s", "hint_s", "ready_s", "observed_s", "hint_error_s", "overshoot_s", "attempts",
                "engine_schedule_s", "total_s")
REQUEST_METRICS = ("ttft_s", "e2e_s", "attempts")
#: The statistics of each engine startup phase (a phase's p90 or p99 over a few wakes says little).
PHASE_STATISTICS = ("count", "p50", "p95", "max")
#: The phase rows that are no span: the stretch no top-level span covers, the covered union and
#: its share of process start -> engine ready (wake_episodes' columns of those names).
OUTSIDE_ENGINE_SPANS = "outside the engine's spans"
_EPISODE_ROWS = {OUTSIDE_ENGINE_SPANS: "outside_engine_spans_s", "engine spans (covered)": "engine_spans_s",
                 "share covered": "engine_spans_share"}
ENGINE_METRICS = ("queue_s", "schedule_delay_s", "schedule_delay_lower_s", "schedule_delay_upper_s", "ttft_s",
                  "prefill_s", "decode_s")


def build_report(analysis: Analysis, *, percentile: str = "linear") -> dict[str, pl.DataFrame]:
    """Every section, computed from the analysis views; ``percentile`` is the method of every
    percentile and median (``PERCENTILE_METHODS``)."""
    lending = analysis.lending_episodes()
    wakes = analysis.wake_episodes()
    # the statistics' columns only: a store's requests and engine requests are as many as its
    # spans, and each of their other columns would be read, sent and held for nothing
    requests = analysis.view("requests", ["traffic_class", *REQUEST_METRICS])
    counts = pl.DataFrame(
        {
            "episodes": ["lending", "wake"],
            "count": [lending.height, wakes.height],
            "censored": [int(lending["censored"].sum()), int(wakes["censored"].sum())],
            "clock_skew": [int(lending["clock_skew"].sum()), int(wakes["clock_skew"].sum())],
        },
        schema={"episodes": pl.String, "count": pl.Int64, "censored": pl.Int64, "clock_skew": pl.Int64},
    )
    paired = _later_minus_earlier(analysis.paired_differences())
    medians = (
        paired.group_by("workload", "policy", "baseline")
        .agg(
            pl.len().alias("seeds"),
            _median("interactive_slo_goodput_diff_rps", percentile),
            _median("batch_borrow_goodput_diff_rps", percentile),
        )
        .sort("workload", "policy", "baseline", nulls_last=True)
    )
    phases = analysis.wake_phases()
    sections = {
        "episode_counts": counts,
        "lending_episodes": _stats(lending, LENDING_METRICS, "policy", percentile),
        # by how the attempts were linked too: an inferred chain's figures never mix with traced ones
        "wake_episodes": percentiles_of(wakes, WAKE_METRICS, ["hint_mode", "wake_path", "attempt_link"],
                                        method=percentile),
        "wake_phases": phase_statistics(phases, wakes, percentile),
        "requests": _stats(requests, REQUEST_METRICS, "traffic_class", percentile),
        "engine": percentiles_of(analysis.view("engine_requests", ["engine", "traffic_class", *ENGINE_METRICS]),
                                 ENGINE_METRICS, ["engine", "traffic_class"], method=percentile),
        "policy_summary": analysis.policy_summary(),
        "paired_differences": medians,
    }
    if phases.is_empty():  # no engine exported startup spans: the report is as it was without them
        del sections["wake_phases"]
    return sections


def phase_statistics(phases: pl.DataFrame, wakes: pl.DataFrame, percentile: str = "linear") -> pl.DataFrame:
    """Per engine startup phase (span name, at the shallowest depth it has; in the order the phases
    start): count,
    p50, p95 and max of its duration (s); then the stretch outside the engine's spans, the covered
    union (s) and the share covered, one value per wake episode with engine spans."""
    schema = {"phase": pl.String, "depth": pl.Int64, **{name: pl.Float64 for name in PHASE_STATISTICS}}
    schema["count"] = pl.Int64
    if phases.is_empty():
        return pl.DataFrame(schema=schema)
    # one row per name, as a limit names a phase; its depth the shallowest it was found at
    order = (phases.group_by("name").agg(pl.col("start_s").median().alias("_start"), pl.col("depth").min())
             .sort("_start", "depth", "name"))
    per_phase = percentiles_of(phases, ["duration_s"], ["name"], method=percentile)
    per_phase = order.join(per_phase, on="name", how="left", maintain_order="left")
    per_phase = per_phase.select(pl.col("name").alias("phase"), pl.col("depth").cast(pl.Int64),
                                 *(pl.col(name) for name in PHASE_STATISTICS))
    episode_rows = []
    for label, column in _EPISODE_ROWS.items():
        row = percentiles_of(wakes, [column], method=percentile).select(PHASE_STATISTICS)
        episode_rows.append(row.with_columns(pl.lit(label).alias("phase"), pl.lit(None, pl.Int64).alias("depth")))
    frames = [per_phase, *(row.select(per_phase.columns) for row in episode_rows)]
    return pl.concat([frame.cast(schema) for frame in frames], how="vertical")


def _stats(frame: pl.DataFrame, metrics: tuple[str, ...], by: str, percentile: str) -> pl.DataFrame:
    return percentiles_of(frame, metrics, [by], method=percentile)


def _median(column: str, percentile: str) -> pl.Expr:
    if percentile == "linear":
        return pl.col(column).median()
    return nearest_rank_expr(pl.col(column).drop_nulls(), 0.5).alias(column)  # the 3rd of 5 seeds


def arm_order(arms: list[str | None]) -> list[str | None]:
    """``arms`` in the order paired differences subtract them: no gate (null) first, then the
    study's arms as ``STUDY_ARMS`` lists them (fcfs, priority, static, lend), then any other by name."""
    def key(arm: str | None) -> tuple[int, int, str]:
        if arm is None:
            return (0, 0, "")
        return (1, STUDY_ARMS.index(arm), "") if arm in STUDY_ARMS else (2, 0, arm)
    return sorted(set(arms), key=key)


def _later_minus_earlier(paired: pl.DataFrame) -> pl.DataFrame:
    """One direction per pair of arms: the later arm (``arm_order``) minus the earlier one, e.g.
    lend - static, never also static - lend (the same number, negated)."""
    order = arm_order([*paired["policy"].to_list(), *paired["baseline"].to_list()])
    rank = {arm: index for index, arm in enumerate(order)}
    keep = [rank[policy] > rank[baseline] for policy, baseline in zip(paired["policy"], paired["baseline"])]
    return paired.filter(pl.Series(keep, dtype=pl.Boolean))
