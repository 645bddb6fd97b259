"""The overview page's numbers: episode counts, their statistics, time bars and distribution
curves, and the verdicts of the limits (``view.metric.stat=N``) with every episode over one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import polars as pl

from restorelens.analysis import PHASE_VIEW, Analysis, Limit, Slo, Violation, evaluate, parse_limit, percentiles_of
from restorelens.analysis.report import with_no_gate
from restorelens.dashboard.engine import distribution_curves
from restorelens.dashboard.labels import NO_CLASS, with_unnamed_policy
from restorelens.dashboard.segments import time_segments

__all__ = [
    "DEFAULT_LIMITS",
    "LENDING_METRICS",
    "REQUEST_METRICS",
    "WAKE_METRICS",
    "Overview",
    "default_limits",
    "limit_breaches",
    "overview",
    "parse_limits",
]

LENDING_METRICS = ("grant_restore_s", "drain_s", "engine_schedule_s", "ttft_s")
WAKE_METRICS = ("retry_after_s", "ready_s", "observed_s", "overshoot_s", "engine_schedule_s", "total_s")
REQUEST_METRICS = ("ttft_s", "e2e_s", "gate_wait_s", "engine_schedule_s")

#: Limits shown when none are configured: the interactive TTFT SLO (5 s) at p95, and the wake
#: overshoot a client should not wait past a ready engine (1 s) at p95.
DEFAULT_LIMITS = ("lending.ttft_s.p95=5", "wake.overshoot_s.p95=1")


def default_limits(slo: Slo) -> tuple[str, ...]:
    """``DEFAULT_LIMITS`` with ``slo``'s TTFT as the lending episodes' p95 TTFT limit."""
    return (f"lending.ttft_s.p95={slo.ttft_s:g}", *DEFAULT_LIMITS[1:])


@dataclass(frozen=True)
class Overview:
    """Counts, where each episode's time went, distributions and the limits' verdicts."""

    counts: pl.DataFrame
    lending_stats: pl.DataFrame
    wake_stats: pl.DataFrame
    request_stats: pl.DataFrame
    violations: tuple[str, ...]
    breaches: pl.DataFrame
    limits: tuple[str, ...] = field(default=())
    #: Limits with nothing to check (``Evaluation.unchecked``, what fails ``restorelens check``),
    #: each with why: ``wake.overshoot_s.p95=1: no values in 0 wake episodes``.
    unchecked: tuple[str, ...] = field(default=())
    #: Limits that rest on at least one value and hold.
    held: tuple[str, ...] = field(default=())
    #: Rows in each view a limit names (``lending``, ``wake``, ``requests``, ``engine``): the page
    #: shows the limits whenever one of them has rows, episodes or none.
    limited_rows: dict[str, int] = field(default_factory=dict)
    #: ``time_segments`` of the lending and wake episodes (``MAX_TIME_BARS`` of each).
    lending_segments: pl.DataFrame = field(default_factory=pl.DataFrame)
    wake_segments: pl.DataFrame = field(default_factory=pl.DataFrame)
    #: ``distribution_curves`` of the lending metrics per policy and the wake metrics per wake path.
    lending_curves: pl.DataFrame = field(default_factory=pl.DataFrame)
    wake_curves: pl.DataFrame = field(default_factory=pl.DataFrame)


def parse_limits(texts: Sequence[str]) -> list[Limit]:
    """``view.metric.stat=N`` strings -> limits; a bad one raises ``SettingError`` naming it."""
    return [parse_limit(text.strip(), "limit") for text in texts if text.strip()]


def _unchanged(frame: pl.DataFrame) -> pl.DataFrame:
    return frame


def overview(analysis: Analysis, limits: Sequence[str] = DEFAULT_LIMITS, *, include_requests: bool = False,
             keep: Callable[[pl.DataFrame], pl.DataFrame] = _unchanged, method: str = "linear") -> Overview:
    """Episode counts, their time bars, distributions and statistics, and the limits' verdicts, over
    the rows ``keep`` leaves (the sidebar's selection); percentiles by ``method``.

    The requests view is the most expensive one on a large store, so it is read only when asked
    for (``include_requests``) or when a limit names it.
    """
    parsed = parse_limits(limits)
    include_requests = include_requests or any(limit.view == "requests" for limit in parsed)
    frames = {"lending": keep(analysis.lending_episodes()), "wake": keep(analysis.wake_episodes())}
    if include_requests:
        frames["requests"] = keep(analysis.requests())
    if any(limit.view == "engine" for limit in parsed):
        frames["engine"] = keep(analysis.engine_requests())
    if any(limit.view == PHASE_VIEW for limit in parsed):
        # the startup spans of the wakes kept (they carry no run label of their own)
        frames[PHASE_VIEW] = analysis.wake_phases().filter(pl.col("wake_span_id").is_in(frames["wake"]["span_id"].to_list()))
    lending, wakes = frames["lending"], frames["wake"]
    rows = [("lending episodes", lending.height, int(lending["censored"].sum()), int(lending["clock_skew"].sum())),
            ("wake episodes", wakes.height, int(wakes["censored"].sum()), int(wakes["clock_skew"].sum()))]
    request_stats = pl.DataFrame()
    if include_requests:
        requests = frames["requests"]
        rows.insert(0, ("requests", requests.height, 0, int(requests["clock_skew"].sum())))
        shown = with_no_gate(requests).with_columns(pl.col("traffic_class").fill_null(NO_CLASS))
        request_stats = percentiles_of(shown, REQUEST_METRICS, ["traffic_class", "policy"], method=method)
    counts = pl.DataFrame(
        rows, schema={"what": pl.String, "count": pl.Int64, "censored": pl.Int64, "clock_skew": pl.Int64},
        orient="row",
    )
    # one evaluation, as `restorelens check` makes it: broken, nothing to check, or holds
    evaluations = evaluate(_Frames(frames), parsed, percentile=method)  # type: ignore[arg-type]
    violations = [Violation(e.limit, e.value, e.count) for e in evaluations if e.violated]  # type: ignore[arg-type]
    named = with_unnamed_policy(lending)
    return Overview(
        counts=counts,
        lending_stats=percentiles_of(named, LENDING_METRICS, ["policy"], method=method),
        wake_stats=percentiles_of(wakes, WAKE_METRICS, ["model", "wake_path"], method=method),
        request_stats=request_stats,
        violations=tuple(str(v) for v in violations),
        breaches=limit_breaches(frames, parsed),
        limits=tuple(_named(limit) for limit in parsed),
        unchecked=tuple(f"{_named(e.limit)}: {e.describe_unchecked()}" for e in evaluations if e.unchecked),
        held=tuple(_named(e.limit) for e in evaluations if not e.unchecked and not e.violated),
        limited_rows={limit.view: frames[limit.view].height for limit in parsed},
        lending_segments=time_segments(lending, "lending"),
        wake_segments=time_segments(wakes, "wake", phases=frames[PHASE_VIEW] if PHASE_VIEW in frames
                                    else analysis.wake_phases()),
        lending_curves=distribution_curves(named, ("policy",), LENDING_METRICS),
        wake_curves=distribution_curves(wakes, ("wake_path",), WAKE_METRICS),
    )


def _named(limit: Limit) -> str:
    return limit.name + f"={limit.maximum:g}"


class _Frames:
    """Quacks like ``Analysis`` for ``check``: the frames already read, so nothing is read twice."""

    def __init__(self, frames: dict[str, pl.DataFrame]) -> None:
        self._frames = frames

    def lending_episodes(self) -> pl.DataFrame:
        return self._frames["lending"]

    def wake_episodes(self) -> pl.DataFrame:
        return self._frames["wake"]

    def requests(self) -> pl.DataFrame:
        return self._frames["requests"]

    def engine_requests(self) -> pl.DataFrame:
        return self._frames["engine"]

    def wake_phases(self) -> pl.DataFrame:
        return self._frames[PHASE_VIEW]


def limit_breaches(frames: dict[str, pl.DataFrame], limits: Sequence[Limit]) -> pl.DataFrame:
    """Each episode (or request) whose own value is over a limit's maximum, or whose flag is set."""
    schema = {"limit": pl.String, "view": pl.String, "value": pl.Float64, "id": pl.String, "t0": pl.String}
    rows: list[tuple[str, str, float, str, str]] = []
    for limit in limits:
        frame = frames[limit.view]
        if frame.is_empty():
            continue
        column = pl.col(limit.column)
        hit = column.fill_null(False) if limit.statistic == "count" else column.cast(pl.Float64) > limit.maximum
        if limit.phase is not None:
            hit = hit & (pl.col("name") == limit.phase)
        # a startup span's start is seconds from its process start: its wake is what a page opens
        time_column = next(name for name in ("t0", "start", "arrival", "start_s") if name in frame.columns)
        # the id a page opens it by: an episode's span, a request's id, an engine request's trace
        id_column = {"requests": "request_id", "engine": "trace_id", PHASE_VIEW: "wake_span_id"}.get(limit.view,
                                                                                                   "span_id")
        for row in frame.filter(hit).iter_rows(named=True):
            value = float(row[limit.column]) if limit.statistic != "count" else 1.0
            rows.append((f"{limit.name}={limit.maximum:g}", limit.view, value, str(row[id_column]),
                         str(row[time_column])))
    return pl.DataFrame(rows, schema=schema, orient="row")
