"""The report's sections as text: a rich table, Markdown, JSON or CSV (``FORMATS``)."""

from __future__ import annotations

import io
import json
import shutil
from typing import Any

import polars as pl

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
    "wake_episodes": "Wake episodes per hint mode and wake path: hint, ready, observed, overshoot, engine scheduled (s)",
    "requests": "Requests: client-observed latency (s)",
    "engine": "Engine: queue, schedule delay after the attempt started (point, lower and upper bound), "
              "TTFT, prefill, decode (s)",
    "policy_summary": "Policy summary: goodput per policy x workload x seed (req/s)",
    "paired_differences": "Paired differences: policy - baseline, median over seeds (req/s)",
}


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
