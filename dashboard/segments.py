"""Where each episode's time went: its restoration as consecutive stretches, one stacked bar per
episode (the overview's and the episode pages' "where the time went" charts)."""

from __future__ import annotations

from typing import Any

import polars as pl

from restorelens.analysis.report import OUTSIDE_ENGINE_SPANS
from restorelens.dashboard.episodes import LENDING_EVENTS
from restorelens.dashboard.labels import UNNAMED_POLICY

__all__ = ["MAX_TIME_BARS", "OUTSIDE_ENGINE_SPANS", "PROCESS_STARTED", "SEGMENTS", "WAKE_SEGMENTS", "legend",
           "time_segments"]

#: The stretches of a wake episode's bar, each named by the instant that ends it (docs/dashboard.md).
WAKE_SEGMENTS = ("engine ready", "readiness observed", "retry", "engine scheduled", "first token")
#: A wake whose engine exported startup spans splits its "engine ready" stretch: t0 -> the process
#: started, then each top-level startup phase (named as its span) and the time outside them.
PROCESS_STARTED = "process started"
#: Each episode kind's stretches, in causal order (the legend of its "where the time went" chart).
SEGMENTS = {"lending": LENDING_EVENTS[1:], "wake": WAKE_SEGMENTS}
#: The most episodes a "where the time went" chart draws (censored first, then the longest): a bar stays readable and the
#: figure's size bounded whatever the store holds; the page says how many it left out.
MAX_TIME_BARS = 40


def legend(segments: pl.DataFrame, kind: str) -> list[str]:
    """The stretches of ``kind``'s chart in causal order: a wake's process start, startup phases
    (in the order they appear) and the time outside them come before "engine ready"."""
    base = list(SEGMENTS[kind])
    if kind != "wake" or segments.is_empty() or PROCESS_STARTED not in segments["event"].to_list():
        return base
    known = {*base, PROCESS_STARTED, OUTSIDE_ENGINE_SPANS}
    phases = [event for event in dict.fromkeys(segments["event"].to_list()) if event not in known]
    return [PROCESS_STARTED, *phases, OUTSIDE_ENGINE_SPANS, *base]


def time_segments(episodes: pl.DataFrame, kind: str, *, limit: int = MAX_TIME_BARS,
                  phases: pl.DataFrame | None = None) -> pl.DataFrame:
    """Each episode's restoration as consecutive stretches, for a stacked bar per episode.

    ``kind`` ``"lending"`` (``lending_episodes``: demand returned → grant restored → borrowed
    drained → engine scheduled → first token) or ``"wake"`` (``wake_episodes``: first 503 → engine
    ready → readiness observed → retry → engine scheduled → first token). An episode's instants are
    put in time order and each stretch is named by the instant that ends it, so the bar's length is
    the time to the last known instant and a missing instant just has no stretch. ``limit``
    episodes are kept: the censored ones first (their end is unknown, so at least as late as any
    other's), then the longest, each its bar in that order; an episode with no known instant has
    nothing to draw and none. Columns: episode (a label unique per episode),
    span_id, event, from_s, to_s, seconds, censored, clock_skew, total_s.

    ``phases`` (``wake_phases``): a wake whose engine exported startup spans has its stretch to
    engine ready split into "process started", each top-level phase's part of the spans' union
    (named as its span) and "outside the engine's spans" between and around them; they add up
    to engine ready exactly, as the analysis splits it.
    """
    schema = {"episode": pl.String, "span_id": pl.String, "event": pl.String, "from_s": pl.Float64,
              "to_s": pl.Float64, "seconds": pl.Float64, "censored": pl.Boolean, "clock_skew": pl.Boolean,
              "total_s": pl.Float64}
    rows: list[tuple[Any, ...]] = []
    # chosen in polars (a store holds tens of thousands of episodes, a chart 40): the censored ones
    # first, whose end is unknown and so at least as late as any, then the longest, ties by span
    chosen = (episodes.with_columns(_last_instant(kind).alias("_last_s"),
                                    pl.col("censored").fill_null(False).alias("_censored"))
              .filter(pl.col("_last_s").is_not_null())
              .sort("_censored", "_last_s", "span_id", descending=[True, True, False])
              .head(limit))
    startup: dict[str, list[dict[str, Any]]] = {}
    if phases is not None and not phases.is_empty() and kind == "wake":
        top = phases.filter((pl.col("depth") == 0) & (pl.col("adds_s") > 0)
                            & pl.col("wake_span_id").is_in(chosen["span_id"].to_list()))
        for row in top.iter_rows(named=True):
            startup.setdefault(row["wake_span_id"], []).append(row)
    labels = [_episode_label(episode, kind) for episode in chosen.iter_rows(named=True)]
    if len(set(labels)) < len(labels):  # two episodes alike to the millisecond: the whole span id tells them apart
        labels = [f"{label[:-6]}{span_id}" for label, span_id in zip(labels, chosen["span_id"], strict=True)]
    for episode, label in zip(chosen.iter_rows(named=True), labels, strict=True):
        instants = _instants(episode, kind)
        known = sorted(((offset, event) for event, offset in instants if offset is not None),
                       key=lambda item: item[0])
        if not known:
            continue
        total = max(0.0, known[-1][0])
        previous = 0.0
        engine = _engine_stretches(episode, startup.get(episode["span_id"])) if kind == "wake" else []
        for event, start, offset in engine:
            rows.append((label, episode["span_id"], event, start, offset, offset - start,
                         bool(episode.get("censored")), bool(episode.get("clock_skew")), total))
        if engine:  # the engine's stretches end at engine ready
            previous = engine[-1][2]
            known = [(offset, event) for offset, event in known if event != WAKE_SEGMENTS[0]]
        for offset, event in known:
            start = min(previous, offset)
            rows.append((label, episode["span_id"], event, start, offset, max(0.0, offset - start),
                         bool(episode.get("censored")), bool(episode.get("clock_skew")), total))
            previous = max(previous, offset)
    return pl.DataFrame(rows, schema=schema, orient="row")


def _engine_stretches(episode: dict[str, Any], top: list[dict[str, Any]] | None) -> list[tuple[str, float, float]]:
    """(name, from s, to s) from t0 to engine ready: the process start, each top-level phase's
    part of the union (it ends where the span, clipped to ready, ends) and the gaps outside them."""
    started, ready = episode.get("process_started_s"), episode.get("ready_s")
    if not top or started is None or ready is None:
        return []
    stretches = [(PROCESS_STARTED, 0.0, started)] if started > 0 else []
    previous = started
    parts = sorted((started + min(row["end_s"], ready - started) - row["adds_s"],
                    started + min(row["end_s"], ready - started), row["name"]) for row in top)
    for start, end, name in parts:
        if start > previous:
            stretches.append((OUTSIDE_ENGINE_SPANS, previous, start))
        stretches.append((name, start, end))
        previous = end
    if ready > previous:
        stretches.append((OUTSIDE_ENGINE_SPANS, previous, ready))
    return stretches


def _last_instant(kind: str) -> pl.Expr:
    """An episode's last known instant (seconds from t0) as an expression: what ``_instants`` gives,
    at most, so the longest episodes can be picked before any row is read in Python."""
    if kind == "lending":
        grant = pl.col("grant_restore_s")
        parts = [grant, pl.col("drain_s"), grant + pl.col("engine_schedule_s"), pl.col("ttft_s")]
    else:
        retry = pl.col("ready_s") + pl.col("overshoot_s")
        parts = [pl.col("ready_s"), pl.col("observed_s"), retry, retry + pl.col("engine_schedule_s"),
                 pl.col("total_s")]
    return pl.max_horizontal(parts)


def _instants(episode: dict[str, Any], kind: str) -> list[tuple[str, float | None]]:
    """An episode's instants after t0 (seconds), as its stacked bar names them."""
    if kind == "lending":
        grant, schedule = episode.get("grant_restore_s"), episode.get("engine_schedule_s")
        return [(LENDING_EVENTS[1], grant), (LENDING_EVENTS[2], episode.get("drain_s")),
                (LENDING_EVENTS[3], grant + schedule if grant is not None and schedule is not None else None),
                (LENDING_EVENTS[4], episode.get("ttft_s"))]
    ready, overshoot, schedule = (episode.get(k) for k in ("ready_s", "overshoot_s", "engine_schedule_s"))
    retry = ready + overshoot if ready is not None and overshoot is not None else None
    return list(zip(WAKE_SEGMENTS, (ready, episode.get("observed_s"), retry,
                                    retry + schedule if retry is not None and schedule is not None else None,
                                    episode.get("total_s")), strict=True))


def _episode_label(episode: dict[str, Any], kind: str) -> str:
    """A bar's name: when, what and which run; unique by the span id's head."""
    when = f"{episode['t0']:%H:%M:%S.%f}"[:-3]
    what = (episode.get("policy") or UNNAMED_POLICY) if kind == "lending" else \
        f"{episode.get('model')} · {episode.get('wake_path')}"
    run = f" · {episode['run_id']}" if episode.get("run_id") else ""
    flags = (" · censored" if episode.get("censored") else "") + (" · clock skew" if episode.get("clock_skew") else "")
    return f"{when} · {what}{run}{flags} · {str(episode['span_id'])[:6]}"
