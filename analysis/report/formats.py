"""The report's sections as text: a rich table, Markdown, JSON or CSV (``FORMATS``)."""

from __future__ import annotations

import io
import json
import shutil
from typing import Any

import polars as pl

from restorelens.analysis.views import STATISTICS

__all__ = ["NO_GATE", "render", "with_no_gate"]

#: How a null policy reads in the text formats: the request passed no gate.
NO_GATE = "no gate"
#: Sections whose policy columns group requests, where a null policy means the request passed no
#: gate (a lending episode's null policy is a gate that named none: left as it is).
_ARM_SECTIONS = ("policy_summary", "paired_differences")
_POLICY_COLUMNS = ("policy", "baseline")

_TITLES = {
    "episode_counts": "Episodes (censored: never completed; clock_skew: a negative cross-service gap)",
    "lending_episodes": "Lending episodes: grant restored, borrowed work drained, engine scheduled (s)",
    "wake_episodes": "Wake episodes per hint mode, wake path and attempt link (client: inferred from the sender): "
                     "hint, ready, observed, overshoot, engine scheduled (s)",
    "wake_phases": "Engine startup phases: the engine's own spans from process start to engine ready (s), by depth; "
                   "outside the engine's spans: ready - process start - the top-level spans' union; share covered: "
                   "that union / (ready - process start)",
    "requests": "Requests: client-observed latency (s)",
    "engine": "Engine: queue, schedule delay after the attempt started (with its lower and upper bound "
              "where they differ from it), TTFT, prefill, decode (s)",
    "policy_summary": "Policy summary: goodput per policy x workload x seed (req/s)",
    "paired_differences": "Paired differences: policy - baseline, each arm minus every earlier one (no gate, fcfs, "
                          "priority, static, lend, then others by name), median over seeds (req/s)",
}
#: Columns that name a row rather than measure it: a table too wide for the terminal repeats them
#: in each of the parts its other columns are split into.
_KEYS = ("episodes", "phase", "depth", "policy", "workload", "seed", "baseline", "engine", "traffic_class", "hint_mode", "wake_path",
         "attempt_link", "metric")
#: What rich adds to a column's text: one space each side and the rule on its right.
_COLUMN_FRAME = 3


def render(sections: dict[str, pl.DataFrame], fmt: str) -> str:
    """Text of the report in one of ``FORMATS`` (``table`` is rich's terminal rendering)."""
    if fmt == "json":
        return json.dumps({name: frame.to_dicts() for name, frame in sections.items()}, indent=2, default=str)
    if fmt == "csv":
        # one CSV block per section, each preceded by a `# section` line and separated by a blank line
        return "\n".join(f"# {name}\n{frame.write_csv()}" for name, frame in sections.items())
    if fmt == "markdown":
        return "\n".join(f"## {_TITLES.get(name, name)}\n\n{_markdown(_shown(name, frame))}\n"
                         for name, frame in sections.items())
    if fmt == "table":
        return _rich({name: _shown(name, frame) for name, frame in sections.items()})
    raise ValueError(f"unknown format {fmt!r}")


def with_no_gate(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (requests, or goodputs of their arms) with a null policy and baseline spelt
    ``NO_GATE``: what the text report and the dashboard show for a request that passed no gate."""
    columns = [name for name in _POLICY_COLUMNS if name in frame.columns and frame.schema[name] == pl.String]
    return frame.with_columns(pl.col(name).fill_null(NO_GATE) for name in columns) if columns else frame


def _shown(section: str, frame: pl.DataFrame) -> pl.DataFrame:
    """What the text formats show of a section (JSON and CSV keep every row, nulls as null)."""
    if section in _ARM_SECTIONS:
        frame = with_no_gate(frame)
    if section == "engine" and not frame.is_empty():
        frame = _bounds_where_they_differ(frame, ["engine", "traffic_class"])
    return frame


#: Interval metrics whose bounds equal their point when the spans pin it down: the bounds' rows
#: are then the point's row again, so they are shown only where they differ from it.
_BOUNDED = {"schedule_delay_s": ("schedule_delay_lower_s", "schedule_delay_upper_s")}
#: Statistics this close are the same: a bound and its point come from the engine's float
#: attributes and the spans' nanosecond times by different sums, which round apart by < 1 µs.
_SAME_S = 1e-6


def _bounds_where_they_differ(stats: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``stats`` (``percentiles_of``'s rows) without a bound's row that repeats its point's."""
    for point, bounds in _BOUNDED.items():
        points = stats.filter(pl.col("metric") == point).select(
            *by, *(pl.col(name).alias(f"point_{name}") for name in ("count", *STATISTICS)))
        same = pl.all_horizontal(
            pl.col("count") == pl.col("point_count"),
            *(((pl.col(name) - pl.col(f"point_{name}")).abs() <= _SAME_S)
              | (pl.col(name).is_null() & pl.col(f"point_{name}").is_null()) for name in STATISTICS))
        repeated = pl.col("metric").is_in(bounds) & same.fill_null(False)
        stats = (stats.join(points, on=by, how="left", nulls_equal=True, maintain_order="left")
                 .filter(~repeated).select(stats.columns))
    return stats


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

    buffer = io.StringIO()
    width = shutil.get_terminal_size((160, 24)).columns
    console = Console(file=buffer, width=width, force_terminal=False)
    for name, frame in sections.items():
        title = _TITLES.get(name, name)
        if frame.is_empty():
            console.print(f"{title}: none", highlight=False, soft_wrap=True)
            continue
        parts = _parts(frame, width)
        for index, columns in enumerate(parts):
            shown = title if len(parts) == 1 else f"{title}, part {index + 1} of {len(parts)}"
            console.print(_table(frame.select(columns), shown))
    return buffer.getvalue()


def _table(frame: pl.DataFrame, title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in frame.columns:
        numeric = frame.schema[column].is_numeric()
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
    for row in frame.iter_rows():
        table.add_row(*(_cell(value) for value in row))
    return table


def _parts(frame: pl.DataFrame, width: int) -> list[list[str]]:
    """The columns of each table ``frame`` is printed as: all of them when they fit ``width``
    whole (no header or value cut), else the row's names (``_KEYS``) and as many further columns
    as fit, part after part, so no header is cut mid-word."""
    def needed(column: str) -> int:
        cells = [len(_cell(value)) for value in frame[column]]
        return max([len(column), *cells]) + _COLUMN_FRAME

    keys = [column for column in frame.columns if column in _KEYS]
    budget = width - 1 - sum(needed(column) for column in keys)
    parts: list[list[str]] = []
    current: list[str] = []
    used = 0
    for column in (column for column in frame.columns if column not in _KEYS):
        if current and used + needed(column) > budget:
            parts.append(current)
            current, used = [], 0
        current.append(column)
        used += needed(column)
    parts.append(current)
    return [keys + part for part in parts]
