"""The window an analysis reads a source over: the options read into it, what is refused, and the
``where`` clause pushed down to the spans (parameters, never SQL text)."""

from __future__ import annotations

import pytest

from restorelens.analysis.window import Window, checked_window, parse_window, window_filter
from restorelens.errors import SettingError


@pytest.mark.parametrize("dialect", ["duckdb", "clickhouse"])
def test_the_window_is_parameters_never_sql_text(dialect: str) -> None:
    runs = ("it's'); drop table otel_traces; --",)
    clause, parameters = window_filter(Window(since_ns=1, until_ns=2, runs=runs), dialect=dialect, table="t")
    assert "drop" not in clause and parameters == {"rl_since_ns": 1, "rl_until_ns": 2, "rl_runs": list(runs)}
    assert window_filter(Window(), dialect=dialect, table="t") == ("true", {})


def test_the_window_options_are_read_into_a_window() -> None:
    assert parse_window(None, None, ()) == Window()
    assert parse_window("1970-01-01T00:00:01Z", "1970-01-01T00:00:02", ["a", "b"]) == Window(
        since_ns=1_000_000_000, until_ns=2_000_000_000, runs=("a", "b"))
    assert parse_window(None, "1970-01-01T00:00:02Z", ()) == Window(until_ns=2_000_000_000)


@pytest.mark.parametrize(("since", "until", "runs", "message"), [
    ("yesterday", None, (), "setting --since: 'yesterday' is not an ISO 8601 time"),
    ("", None, (), "setting --since: '' is not an ISO 8601 time"),  # an empty value is not "no window"
    (None, "2300-01-01", (), "setting --until: '2300-01-01' is outside what nanoseconds"),
    ("2026-01-02", "2026-01-01", (), "setting --until: must be after --since"),
    ("2026-01-01T00:00:00Z", "2026-01-01T01:00:00+01:00", (), "setting --until: must be after --since"),
    (None, None, ("a", ""), "setting --run: needs a run id"),
    (None, None, (" \t",), "setting --run: needs a run id"),
])
def test_a_bad_window_is_one_line_naming_the_option(since: str | None, until: str | None, runs: tuple[str, ...],
                                                    message: str) -> None:
    with pytest.raises(SettingError) as raised:
        parse_window(since, until, runs)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value)


@pytest.mark.parametrize(("window", "message"), [
    (Window(since_ns=1.5), "setting S: is not a whole number of nanoseconds"),  # type: ignore[arg-type]
    (Window(until_ns=True), "setting U: is not a whole number of nanoseconds"),  # type: ignore[arg-type]
    (Window(until_ns=2**63), "setting U: is not a whole number of nanoseconds since 1970 from 1677 to 2262"),
    (Window(runs=(3,)), "setting R: needs a run id"),  # type: ignore[arg-type]
    (Window(since_ns=5, until_ns=5), "setting U: must be after S"),
])
def test_a_window_from_elsewhere_is_checked_naming_its_settings(window: Window, message: str) -> None:
    with pytest.raises(SettingError) as raised:
        checked_window(window, since="S", until="U", run="R")
    assert str(raised.value).startswith(message)
    assert checked_window(Window(since_ns=-(2**63), until_ns=2**63 - 1, runs=("a",))).runs == ("a",)


@pytest.mark.parametrize(("window", "words"), [
    (Window(), ""),
    (Window(since_ns=1_767_225_600 * 10**9, until_ns=1_767_229_200 * 10**9 + 500),
     "spans from 2026-01-01T00:00:00Z to 2026-01-01T01:00:00.0000005Z"),
    (Window(since_ns=-500_000_000), "spans from 1969-12-31T23:59:59.5Z on"),
    (Window(until_ns=0, runs=("a",)), "spans before 1970-01-01T00:00:00Z, run a"),
    (Window(runs=tuple("abcdefg")), "runs a, b, c, d, e and 2 more"),
    (Window(runs=("x" * 200,)), "run " + "x" * 119 + "…"),
])
def test_a_window_says_what_it_holds(window: Window, words: str) -> None:
    assert window.describe() == words
