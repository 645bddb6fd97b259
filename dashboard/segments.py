"""Where each episode's time went: its restoration as consecutive stretches, one stacked bar per
episode (the overview's and the episode pages' "where the time went" charts)."""

from __future__ import annotations

from typing import Any

import polars as pl

from restorelens.dashboard.episodes import LENDING_EVENTS
from restorelens.dashboard.labels import UNNAMED_POLICY

__all__ = ["MAX_TIME_BARS", "SEGMENTS", "WAKE_SEGMENTS", "time_segments"]

#: The stretches of a wake episode's bar, each named by the instant that ends it (docs/dashboard.md).
WAKE_SEGMENTS = ("engine ready", "readiness observed", "retry", "engine scheduled", "first token")
#: Each episode kind's stretches, in causal order (the legend of its "where the time went" chart).
SEGMENTS = {"lending": LENDING_EVENTS[1:], "wake": WAKE_SEGMENTS}
#: The most episodes a "where the time went" chart draws (censored first, then the longest): a bar stays readable and the
#: figure's size bounded whatever the store holds; the page says how many it left out.
MAX_TIME_BARS = 40


def time_segments(episodes: pl.DataFrame, kind: str, *, limit: int = MAX_TIME_BARS) -> pl.DataFrame:
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
        for offset, event in known:
            start = min(previous, offset)
            rows.append((label, episode["span_id"], event, start, offset, max(0.0, offset - start),
                         bool(episode.get("censored")), bool(episode.get("clock_skew")), total))
            previous = max(previous, offset)
    return pl.DataFrame(rows, schema=schema, orient="row")


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
