"""Limits on episode statistics, for ``restorelens check`` in CI.

A limit names a metric and a statistic: ``overshoot_s.p95=1.0`` or, when a column name exists in
more than one view, ``lending.engine_schedule_s.p95=4``. ``count`` applies to the flags
(``wake.censored.count=0``). Statistics are those of ``Analysis.percentiles`` plus ``min``/``mean``.

An engine startup phase is named as its span is, inside brackets: ``wake.phase[Warmup (CPU)].p95=35``
limits the duration of every span of that name (any depth) in the wakes' startup phases
(``wake_phases``). The name is everything between ``phase[`` and the ``]`` before ``.STAT=``:
spaces, dots, parentheses and ``=`` are part of it; a name holding ``]`` cannot be limited.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import polars as pl

from restorelens.analysis.views import Analysis, percentiles_of
from restorelens.errors import SettingError

__all__ = [
    "FLAGS",
    "METRICS",
    "NUMERIC_STATISTICS",
    "Evaluation",
    "Limit",
    "Violation",
    "check",
    "evaluate",
    "parse_limit",
    "valid_names",
]

#: The view of a phase limit (``wake.phase[NAME].STAT``) and the column it limits.
PHASE_VIEW = "phase"
PHASE_COLUMN = "duration_s"
_PHASE = re.compile(r"^(?:wake\.)?phase\[(?P<name>[^\]]*)\]\.(?P<statistic>[^.=\s]*)\s*=(?P<number>.*)$", re.DOTALL)

#: Short view names -> the Analysis method that returns the view.
VIEWS = {"lending": "lending_episodes", "wake": "wake_episodes", "requests": "requests", "engine": "engine_requests",
         PHASE_VIEW: "wake_phases"}

#: Numeric columns a limit may name, per view.
METRICS: dict[str, tuple[str, ...]] = {
    "lending": ("grant_restore_s", "drain_s", "engine_schedule_s", "ttft_s", "borrowed_at_return"),
    "wake": ("retry_after_s", "ready_s", "observed_s", "hint_error_s", "overshoot_s", "attempts",
             "engine_schedule_s", "total_s", "engine_spans_s", "outside_engine_spans_s", "engine_spans_share",
             "engine_skew_s"),
    "requests": ("ttft_s", "e2e_s", "attempts", "gate_wait_s", "engine_schedule_s"),
    "engine": ("queue_s", "schedule_delay_s", "schedule_delay_lower_s", "schedule_delay_upper_s", "ttft_s",
               "prefill_s", "decode_s"),
}

#: Boolean columns whose ``count`` (rows where true) a limit may name, per view.
FLAGS: dict[str, tuple[str, ...]] = {
    "lending": ("censored", "clock_skew", "served_before_grant"),
    "wake": ("censored", "clock_skew"),
    "requests": ("clock_skew",),
    "engine": ("clock_skew", "via_gate"),
}

NUMERIC_STATISTICS = ("p50", "p90", "p95", "p99", "max", "min", "mean")


@dataclass(frozen=True)
class Limit:
    """``view.column.statistic <= maximum``."""

    view: str
    column: str
    statistic: str
    maximum: float
    #: The startup phase (span name) a ``wake.phase[NAME]`` limit names; None for a view's column.
    phase: str | None = None

    @property
    def name(self) -> str:
        if self.phase is not None:
            return f"wake.phase[{self.phase}].{self.statistic}"
        return f"{self.view}.{self.column}.{self.statistic}"


@dataclass(frozen=True)
class Violation:
    """A limit exceeded: the value found and how many values it was computed from."""

    limit: Limit
    value: float
    count: int

    def __str__(self) -> str:
        return f"{self.limit.name} = {self.value:g} > {self.limit.maximum:g} (n={self.count})"


def valid_names() -> list[str]:
    """Every ``metric.statistic`` a limit may name, qualified by view."""
    names = [f"{view}.{column}.{stat}" for view, columns in METRICS.items() for column in columns
             for stat in NUMERIC_STATISTICS]
    names += [f"{view}.{flag}.count" for view, flags in FLAGS.items() for flag in flags]
    names += [f"wake.phase[NAME].{stat}" for stat in NUMERIC_STATISTICS]
    return names


def _resolve(metric: str, option: str) -> tuple[str, str]:
    """``column`` or ``view.column`` -> (view, column); ambiguity and unknown names are errors."""
    view, _, column = metric.rpartition(".")
    candidates = [v for v in (METRICS.keys() if not view else [view])
                  if column in METRICS.get(v, ()) or column in FLAGS.get(v, ())]
    if not candidates:
        raise SettingError(option, f"unknown metric {metric!r}; valid: {', '.join(_metric_names())}")
    if len(candidates) > 1:
        choices = ", ".join(f"{v}.{column}" for v in candidates)
        raise SettingError(option, f"metric {metric!r} is in several views; name one of: {choices}")
    return candidates[0], column


def _metric_names() -> list[str]:
    columns = [c for v in METRICS for c in (*METRICS[v], *FLAGS[v])]
    names = []
    for view in METRICS:
        for column in (*METRICS[view], *FLAGS[view]):
            names.append(column if columns.count(column) == 1 else f"{view}.{column}")
    return sorted(set(names))


def parse_limit(text: str, option: str = "--max") -> Limit:
    """``[view.]column.statistic=number`` -> Limit; errors name the option and the problem."""
    phase = _PHASE.match(text.strip())
    if phase:
        return _phase_limit(text, phase, option)
    key, sep, number = text.partition("=")
    metric, dot, statistic = key.strip().rpartition(".")
    if not sep or not dot or not metric:
        raise SettingError(option, f"{text!r} is not METRIC.STAT=NUMBER (e.g. overshoot_s.p95=1.0)")
    maximum = _maximum(text, number, option)
    view, column = _resolve(metric, option)
    allowed = ("count",) if column in FLAGS[view] else NUMERIC_STATISTICS
    if statistic not in allowed:
        raise SettingError(option, f"{text!r}: statistic {statistic!r} not one of {', '.join(allowed)}")
    return Limit(view=view, column=column, statistic=statistic, maximum=maximum)


def _maximum(text: str, number: str, option: str) -> float:
    try:
        maximum = float(number)
    except ValueError:
        raise SettingError(option, f"{text!r}: {number.strip()!r} is not a number") from None
    if not math.isfinite(maximum):
        # nothing exceeds inf or nan: such a limit could never fail
        raise SettingError(option, f"{text!r}: {number.strip()!r} is not a finite number")
    return maximum


def _phase_limit(text: str, match: re.Match[str], option: str) -> Limit:
    """``wake.phase[NAME].STAT=NUMBER`` -> the limit on that phase's span durations."""
    name, statistic = match["name"], match["statistic"]
    if not name.strip():
        raise SettingError(option, f"{text!r}: name a phase inside the brackets, e.g. wake.phase[Warmup (CPU)].p95=35")
    if statistic not in NUMERIC_STATISTICS:
        raise SettingError(option, f"{text!r}: statistic {statistic!r} not one of {', '.join(NUMERIC_STATISTICS)}")
    maximum = _maximum(text, match["number"], option)
    return Limit(view=PHASE_VIEW, column=PHASE_COLUMN, statistic=statistic, maximum=maximum, phase=name)


#: Short view names -> what one row is (singular, plural), for messages.
_ROW_NOUNS = {"lending": ("lending episode", "lending episodes"), "wake": ("wake episode", "wake episodes"),
             "requests": ("request", "requests"), "engine": ("engine request", "engine requests"),
             PHASE_VIEW: ("span of that phase", "spans of that phase")}


@dataclass(frozen=True)
class Evaluation:
    """One limit with the statistic found (None when the metric has no values), its sample size
    and the number of rows of its view."""

    limit: Limit
    value: float | None
    count: int
    rows: int = 0

    @property
    def violated(self) -> bool:
        return self.value is not None and self.value > self.limit.maximum

    @property
    def unchecked(self) -> bool:
        """Nothing to compare: no values of the metric (a flag: no rows), e.g. an empty store."""
        return self.count == 0

    def describe_unchecked(self) -> str:
        """``no values in 0 wake episodes``."""
        singular, plural = _ROW_NOUNS[self.limit.view]
        return f"no values in {self.rows} {singular if self.rows == 1 else plural}"


def evaluate(analysis: Analysis, limits: Iterable[Limit] | Mapping[str, float], *,
             percentile: str = "linear") -> list[Evaluation]:
    """Each limit's statistic over the episodes, in the order given (``percentile``: the method)."""
    if isinstance(limits, Mapping):
        limits = [parse_limit(f"{name}={maximum}") for name, maximum in limits.items()]
    frames: dict[str, pl.DataFrame] = {}
    evaluations = []
    for limit in limits:
        if limit.view not in frames:
            frames[limit.view] = getattr(analysis, VIEWS[limit.view])()
        frame = frames[limit.view]
        if limit.phase is not None:
            frame = frame.filter(pl.col("name") == limit.phase)
        value, count = statistic_of(frame, limit.column, limit.statistic, percentile)
        evaluations.append(Evaluation(limit=limit, value=value, count=count, rows=frame.height))
    return evaluations


def check(analysis: Analysis, limits: Iterable[Limit] | Mapping[str, float], *,
          percentile: str = "linear") -> list[Violation]:
    """Every limit whose statistic exceeds its maximum. Metrics with no values pass (n=0): to
    require data, look for ``Evaluation.unchecked`` in ``evaluate`` (what ``restorelens check`` does)."""
    return [Violation(limit=e.limit, value=e.value, count=e.count)  # type: ignore[arg-type]
            for e in evaluate(analysis, limits, percentile=percentile) if e.violated]


def statistic_of(frame: pl.DataFrame, column: str, statistic: str, percentile: str = "linear") -> tuple[float | None, int]:
    """One statistic of one column: (value, number of values it rests on)."""
    if statistic == "count":
        flags = frame[column].fill_null(False)
        return float(flags.sum()), frame.height
    values = frame[column].cast(pl.Float64).drop_nulls()
    if values.is_empty():
        return None, 0
    if statistic == "min":
        return float(values.min()), values.len()  # type: ignore[arg-type]
    if statistic == "mean":
        return float(values.mean()), values.len()  # type: ignore[arg-type]
    row = percentiles_of(pl.DataFrame({column: values}), [column], method=percentile).row(0, named=True)
    return float(row[statistic]), int(row["count"])
