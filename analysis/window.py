"""The window an analysis reads a source over: a time range and a run filter, and the ``where``
clause that pushes it down to the spans every layer reads (``window_filter``), in DuckDB's or
ClickHouse's dialect. ``sources.open_analysis`` applies it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from restorelens.errors import SettingError
from restorelens.sources import parse_time
from restorelens.spans import ATTR_RUN_ID

__all__ = ["Window", "checked_window", "parse_window", "window_filter"]

#: What a signed 64-bit count of nanoseconds holds: DuckDB's and ClickHouse's instants both are one.
_MIN_NS, _MAX_NS = -(2**63), 2**63 - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: ``Window.describe`` names at most this many runs, and this many characters of each.
_SHOWN_RUNS, _SHOWN_RUN_CHARS = 5, 120


@dataclass(frozen=True)
class Window:
    """The spans a source is read for: started in [since, until) (epoch ns; None: open) and, when
    ``runs`` is not empty, of those runs (``restore.run_id`` on the span or its resource)."""

    since_ns: int | None = None
    until_ns: int | None = None
    runs: tuple[str, ...] = field(default=())

    @property
    def everything(self) -> bool:
        return self.since_ns is None and self.until_ns is None and not self.runs

    def describe(self) -> str:
        """The window in words, e.g. ``spans from 2026-01-01T00:00:00Z to 2026-01-01T01:00:00Z, runs
        a, b`` (at most five runs named, each cut at 120 characters); empty for everything."""
        parts = []
        if self.since_ns is not None and self.until_ns is not None:
            parts.append(f"spans from {_instant(self.since_ns)} to {_instant(self.until_ns)}")
        elif self.since_ns is not None:
            parts.append(f"spans from {_instant(self.since_ns)} on")
        elif self.until_ns is not None:
            parts.append(f"spans before {_instant(self.until_ns)}")
        if self.runs:
            shown = [run if len(run) <= _SHOWN_RUN_CHARS else run[: _SHOWN_RUN_CHARS - 1] + "…"
                     for run in self.runs[:_SHOWN_RUNS]]
            more = f" and {len(self.runs) - _SHOWN_RUNS} more" if len(self.runs) > _SHOWN_RUNS else ""
            parts.append(("run " if len(self.runs) == 1 else "runs ") + ", ".join(shown) + more)
        return ", ".join(parts)


def _instant(nanoseconds: int) -> str:
    """Epoch nanoseconds as ISO 8601 in UTC, exact (the fraction only when there is one)."""
    seconds, fraction = divmod(nanoseconds, 1_000_000_000)
    text = (_EPOCH + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{fraction:09d}".rstrip("0") if fraction else "") + "Z"


def parse_window(since: str | None, until: str | None, runs: Iterable[str]) -> Window:
    """The window ``--since``, ``--until`` and ``--run`` name (None: not given); a bad value is a
    one-line ``SettingError`` naming its option."""
    return checked_window(Window(since_ns=None if since is None else parse_time(since, "--since"),
                                 until_ns=None if until is None else parse_time(until, "--until"),
                                 runs=tuple(runs)))


def checked_window(window: Window, *, since: str = "--since", until: str = "--until", run: str = "--run") -> Window:
    """``window`` when the analysis can read it, else a one-line ``SettingError`` naming the setting
    (``since``, ``until``, ``run``): instants are whole nanoseconds a signed 64-bit count holds,
    ``until`` after ``since``, and every run a non-empty id."""
    for setting, value in ((since, window.since_ns), (until, window.until_ns)):
        if value is not None and (type(value) is not int or not _MIN_NS <= value <= _MAX_NS):
            raise SettingError(setting, "is not a whole number of nanoseconds since 1970 from 1677 to 2262")
    if any(type(value) is not str or not value.strip() for value in window.runs):
        raise SettingError(run, "needs a run id (restore.run_id), not an empty one")
    if window.since_ns is not None and window.until_ns is not None and window.until_ns <= window.since_ns:
        raise SettingError(until, f"must be after {since}")
    return window


def window_filter(window: Window, *, dialect: str, table: str) -> tuple[str, dict[str, Any]]:
    """The ``where`` clause of ``window`` on ``table`` (the spans) and its parameters (never inlined).

    A run keeps whole traces: every span of a trace holding a span of the run, so the engine's
    spans (vLLM's carry no run id) stay with the requests they served."""
    clauses: list[str] = []
    parameters: dict[str, Any] = {}
    if dialect == "duckdb":
        since, until = '"Timestamp" >= make_timestamp_ns($rl_since_ns)', '"Timestamp" < make_timestamp_ns($rl_until_ns)'
        run_of = '"{column}"[' + f"'{ATTR_RUN_ID}']"
        contains, trace = "list_contains($rl_runs, {value})", '"TraceId"'
    else:
        # compared as DateTime64 (not as nanoseconds), so the exporter's primary key and partitions prune
        since = "Timestamp >= fromUnixTimestamp64Nano({rl_since_ns:Int64}, 'UTC')"
        until = "Timestamp < fromUnixTimestamp64Nano({rl_until_ns:Int64}, 'UTC')"
        # a missing key is '' in ClickHouse: only a present one names a run
        run_of = "if(mapContains({column}, " + f"'{ATTR_RUN_ID}'), " + "{column}[" + f"'{ATTR_RUN_ID}'], NULL)"
        contains, trace = "has({{rl_runs:Array(String)}}, {value})", "TraceId"
    if window.since_ns is not None:
        clauses.append(since)
        parameters["rl_since_ns"] = window.since_ns
    if window.until_ns is not None:
        clauses.append(until)
        parameters["rl_until_ns"] = window.until_ns
    if window.runs:
        either = " or ".join(contains.format(value=run_of.format(column=column))
                             for column in ("SpanAttributes", "ResourceAttributes"))
        within = " and ".join([*clauses, f"({either})"])
        clauses.append(f"{trace} in (select {trace} from {table} where {within})")
        parameters["rl_runs"] = list(window.runs)
    return (" and ".join(clauses) or "true"), parameters
