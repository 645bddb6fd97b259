"""The report: the numbers a user acts on, as named sections of polars DataFrames, and renderers.

Sections: episode counts (how many, how many censored or clock-skewed), lending and wake episode
statistics, request latencies, the engine's view of every request it served (per engine x traffic
class, gate or not), the policy summary and the paired differences (median over seeds). A null
policy (a request that passed no gate and carries no arm label) reads "no gate" in the text
formats; JSON and CSV keep it null (empty).
"""

from __future__ import annotations

import io
import json
import shutil
from typing import Any

import polars as pl

from restorelens.analysis.views import Analysis, nearest_rank_expr, percentiles_of

__all__ = ["ENGINE_METRICS", "FORMATS", "NO_GATE", "SECTIONS", "build_report", "render", "with_no_gate"]

FORMATS = ("table", "json", "markdown", "csv")

SECTIONS = (
    "episode_counts",
    "lending_episodes",
    "wake_episodes",
    "requests",
    "engine",
    "policy_summary",
    "paired_differences",
)

LENDING_METRICS = ("grant_restore_s", "drain_s", "engine_schedule_s", "ttft_s")
WAKE_METRICS = ("retry_after_s", "hint_s", "ready_s", "observed_s", "hint_error_s", "overshoot_s", "attempts",
                "engine_schedule_s", "total_s")
REQUEST_METRICS = ("ttft_s", "e2e_s", "attempts")
ENGINE_METRICS = ("queue_s", "schedule_delay_s", "schedule_delay_lower_s", "schedule_delay_upper_s", "ttft_s",
                  "prefill_s", "decode_s")
#: How a null policy reads in the text formats: the request passed no gate.
NO_GATE = "no gate"
#: Sections whose policy columns group requests, where a null policy means the request passed no
#: gate (a lending episode's null policy is a gate that named none: left as it is).
_ARM_SECTIONS = ("policy_summary", "paired_differences")
_POLICY_COLUMNS = ("policy", "baseline")

_TITLES = {
    "episode_counts": "Episodes (censored: never completed; clock_skew: a negative cross-service gap)",
    "lending_episodes": "Lending episodes: grant restored, borrowed work drained, engine scheduled (s)",
    "wake_episodes": "Wake episodes per hint mode and wake path: hint, ready, observed, overshoot, engine scheduled (s)",
    "requests": "Requests: client-observed latency (s)",
    "engine": "Engine: queue, schedule delay after the attempt started (point, lower and upper bound), "
              "TTFT, prefill, decode (s)",
    "policy_summary": "Policy summary: goodput per policy x workload x seed (req/s)",
    "paired_differences": "Paired differences: policy - baseline, median over seeds (req/s)",
}


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
    paired = analysis.paired_differences()
    medians = (
        paired.group_by("workload", "policy", "baseline")
        .agg(
            pl.len().alias("seeds"),
            _median("interactive_slo_goodput_diff_rps", percentile),
            _median("batch_borrow_goodput_diff_rps", percentile),
        )
        .sort("workload", "policy", "baseline", nulls_last=True)
    )
    return {
        "episode_counts": counts,
        "lending_episodes": _stats(lending, LENDING_METRICS, "policy", percentile),
        "wake_episodes": percentiles_of(wakes, WAKE_METRICS, ["hint_mode", "wake_path"], method=percentile),
        "requests": _stats(requests, REQUEST_METRICS, "traffic_class", percentile),
        "engine": percentiles_of(analysis.view("engine_requests", ["engine", "traffic_class", *ENGINE_METRICS]),
                                 ENGINE_METRICS, ["engine", "traffic_class"], method=percentile),
        "policy_summary": analysis.policy_summary(),
        "paired_differences": medians,
    }


def _stats(frame: pl.DataFrame, metrics: tuple[str, ...], by: str, percentile: str) -> pl.DataFrame:
    return percentiles_of(frame, metrics, [by], method=percentile)


def _median(column: str, percentile: str) -> pl.Expr:
    if percentile == "linear":
        return pl.col(column).median()
    return nearest_rank_expr(pl.col(column).drop_nulls(), 0.5).alias(column)  # the 3rd of 5 seeds


def render(sections: dict[str, pl.DataFrame], fmt: str) -> str:
    """Text of the report in one of ``FORMATS`` (``table`` is rich's terminal rendering)."""
    if fmt == "json":
        return json.dumps({name: frame.to_dicts() for name, frame in sections.items()}, indent=2, default=str)
    if fmt == "csv":
        # one CSV block per section, each preceded by a `# section` line and separated by a blank line
        return "\n".join(f"# {name}\n{frame.write_csv()}" for name, frame in sections.items())
    if fmt == "markdown":
        return "\n".join(f"## {_TITLES.get(name, name)}\n\n{_markdown(_no_gate(name, frame))}\n"
                         for name, frame in sections.items())
    if fmt == "table":
        return _rich({name: _no_gate(name, frame) for name, frame in sections.items()})
    raise ValueError(f"unknown format {fmt!r}")


def with_no_gate(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (requests, or goodputs of their arms) with a null policy and baseline spelt
    ``NO_GATE``: what the text report and the dashboard show for a request that passed no gate."""
    columns = [name for name in _POLICY_COLUMNS if name in frame.columns and frame.schema[name] == pl.String]
    return frame.with_columns(pl.col(name).fill_null(NO_GATE) for name in columns) if columns else frame


def _no_gate(section: str, frame: pl.DataFrame) -> pl.DataFrame:
    return with_no_gate(frame) if section in _ARM_SECTIONS else frame


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _markdown(frame: pl.DataFrame) -> str:
    if frame.is_empty():
        return "_no data_"
    lines = ["| " + " | ".join(frame.columns) + " |", "|" + "---|" * frame.width]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in frame.iter_rows()]
    return "\n".join(lines)


def _rich(sections: dict[str, pl.DataFrame]) -> str:
    from rich.console import Console
    from rich.table import Table

    buffer = io.StringIO()
    width = shutil.get_terminal_size((160, 24)).columns
    console = Console(file=buffer, width=width, force_terminal=False)
    for name, frame in sections.items():
        table = Table(title=_TITLES.get(name, name), title_justify="left")
        for column in frame.columns:
            numeric = frame.schema[column].is_numeric()
            table.add_column(column, justify="right" if numeric else "left", overflow="fold")
        for row in frame.iter_rows():
            table.add_row(*(_cell(value) for value in row))
        if frame.is_empty():
            table.caption = "no data"
        console.print(table)
    return buffer.getvalue()
