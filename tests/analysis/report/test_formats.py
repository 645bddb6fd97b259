"""The text report as a person reads it: no header cut mid-word however narrow the terminal, an
empty section in one line, an interval's bounds only where they say something."""

from __future__ import annotations

import json

import polars as pl
import pytest

from restorelens.analysis.report import render

#: The policy summary's columns: fifteen, far wider together than a terminal.
WIDE = pl.DataFrame({
    "policy": ["lend", "static"], "workload": ["balanced", "long-context"], "seed": [0, 0], "runs": [1, 1],
    "contention_window_s": [25.0, 25.0], "borrow_window_s": [35.0, 35.0], "interactive_requests": [16, 16],
    "interactive_contention_arrivals": [12, 12], "interactive_slo_met": [9, 12], "interactive_rejected": [3, 0],
    "interactive_slo_goodput_rps": [0.36, 0.48], "batch_requests": [50, 50], "batch_borrow_arrivals": [28, 28],
    "batch_borrow_completed": [17, 11], "batch_borrow_goodput_rps": [0.4857, 0.3143],
})


def _engine(lower_s: float, upper_s: float) -> pl.DataFrame:
    rows = [("queue_s", 0.5), ("schedule_delay_s", 0.5), ("schedule_delay_lower_s", lower_s),
            ("schedule_delay_upper_s", upper_s)]
    return pl.DataFrame([{"engine": "sim", "traffic_class": "batch", "metric": metric, "count": 4, "p50": value,
                          "p90": value, "p95": value, "p99": value, "max": value} for metric, value in rows])


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_no_header_is_cut_at_any_width(monkeypatch: pytest.MonkeyPatch, columns: int) -> None:
    monkeypatch.setenv("COLUMNS", str(columns))
    text = render({"policy_summary": WIDE}, "table")
    for column in WIDE.columns:
        assert column in text, column  # whole, on one line
    assert max(len(line) for line in text.splitlines()) <= columns
    # every part repeats the names of its rows
    parts = text.count("Policy summary")
    assert parts > 1 and text.count("┃ policy ") == parts and text.count("│ lend ") == parts


def test_a_table_that_fits_is_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    text = render({"engine": _engine(0.25, 0.75)}, "table")
    assert text.count("Engine:") == 1 and "part 1" not in text


def test_an_empty_section_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    text = render({"wake_episodes": pl.DataFrame(schema={"hint_mode": pl.String, "metric": pl.String,
                                                         "count": pl.UInt32})}, "table")
    assert text.splitlines() == ["Wake episodes per hint mode, wake path and attempt link (client: inferred from "
                                 "the sender): hint, ready, observed, overshoot, engine scheduled (s): none"]


def test_bounds_equal_to_their_point_are_left_out_of_the_text_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    pinned = _engine(0.5, 0.5 + 4e-7)  # the same but for a rounding below a microsecond
    for fmt in ("table", "markdown"):
        text = render({"engine": pinned}, fmt)
        assert "schedule_delay_s" in text and "schedule_delay_lower_s" not in text and "upper_s" not in text
    assert len(json.loads(render({"engine": pinned}, "json"))["engine"]) == 4  # the data keeps every row
    spread = render({"engine": _engine(0.25, 0.75)}, "table")
    assert "schedule_delay_lower_s" in spread and "schedule_delay_upper_s" in spread
