"""One episode in detail: its instants as offsets in seconds from its t0, the slots held at the
gate around a lending episode, and the window its charts span."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

__all__ = [
    "LENDING_EVENTS",
    "LendingDetail",
    "WakeDetail",
    "epoch_ns",
    "episode_window",
    "lending_detail",
    "lending_events",
    "occupancy_steps",
    "wake_detail",
    "wake_events",
]

#: The five instants of a lending episode, in causal order (docs/design.md, "Lending").
LENDING_EVENTS = ("demand returned", "grant restored", "borrowed drained", "engine scheduled", "first token")

_EVENT_COLUMNS = {"event": pl.String, "offset_s": pl.Float64, "detail": pl.String}


def _events(rows: list[tuple[str, float | None, str]]) -> pl.DataFrame:
    kept = [row for row in rows if row[1] is not None]
    return pl.DataFrame(kept, schema=_EVENT_COLUMNS, orient="row").sort("offset_s", maintain_order=True)


def epoch_ns(value: Any) -> int | None:
    """A polars datetime (python ``datetime``) or ns integer -> epoch nanoseconds."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    return int(pl.Series([value]).cast(pl.Datetime("ns")).cast(pl.Int64)[0])


# --- lending episodes -------------------------------------------------------------------------


def lending_events(episode: dict[str, Any]) -> pl.DataFrame:
    """The five instants of one lending episode (a ``lending_episodes`` row), seconds from t0."""
    grant = episode.get("grant_restore_s")
    schedule = episode.get("engine_schedule_s")
    scheduled = grant + schedule if grant is not None and schedule is not None else None
    borrowed = episode.get("borrowed_at_return")
    return _events([
        (LENDING_EVENTS[0], 0.0, f"{borrowed} borrowed slot(s) in use" if borrowed is not None else ""),
        (LENDING_EVENTS[1], grant, "the gate admits the protected class again"),
        (LENDING_EVENTS[2], episode.get("drain_s"), "every borrowed request has finished"),
        (LENDING_EVENTS[3], scheduled, "the engine runs the returning request"),
        (LENDING_EVENTS[4], episode.get("ttft_s"), "the returning request's first token"),
    ])


def occupancy_steps(gates: pl.DataFrame, t0_ns: int, start_s: float, end_s: float) -> pl.DataFrame:
    """Own and borrowed slots held at the gate over [start_s, end_s] from t0, as a step series.

    ``gates`` is ``gate_requests`` for the episode's run: a slot is held from ``grant_ns`` (the
    grant) to ``end_ns`` (the answer finished).
    """
    schema = {"offset_s": pl.Float64, "own": pl.Int64, "borrowed": pl.Int64}
    held = gates.filter(pl.col("grant_ns").is_not_null() & pl.col("slot").is_in(["own", "borrowed"]))
    if held.is_empty():
        return pl.DataFrame({"offset_s": [start_s, end_s], "own": [0, 0], "borrowed": [0, 0]}, schema=schema)
    changes = pl.concat([
        held.select(pl.col("grant_ns").alias("at_ns"), pl.col("slot"), pl.lit(1).alias("delta")),
        held.select(pl.col("end_ns").alias("at_ns"), pl.col("slot"), pl.lit(-1).alias("delta")),
    ]).with_columns(((pl.col("at_ns") - t0_ns) / 1e9).alias("offset_s"))
    wide = (
        changes.with_columns(
            pl.when(pl.col("slot") == "own").then(pl.col("delta")).otherwise(0).alias("own"),
            pl.when(pl.col("slot") == "borrowed").then(pl.col("delta")).otherwise(0).alias("borrowed"),
        )
        .group_by("offset_s")
        .agg(pl.col("own").sum(), pl.col("borrowed").sum())
        .sort("offset_s")
        .with_columns(pl.col("own").cum_sum(), pl.col("borrowed").cum_sum())
    )
    before = wide.filter(pl.col("offset_s") <= start_s).tail(1)
    first = before.row(0, named=True) if before.height else {"own": 0, "borrowed": 0}
    inside = wide.filter((pl.col("offset_s") > start_s) & (pl.col("offset_s") < end_s))
    last = inside.tail(1).row(0, named=True) if inside.height else first
    edges = pl.DataFrame({"offset_s": [start_s], "own": [first["own"]], "borrowed": [first["borrowed"]]},
                         schema=schema)
    tail = pl.DataFrame({"offset_s": [end_s], "own": [last["own"]], "borrowed": [last["borrowed"]]}, schema=schema)
    return pl.concat([edges, inside.select(schema.keys()).cast(schema), tail])  # type: ignore[arg-type]


@dataclass(frozen=True)
class LendingDetail:
    episode: dict[str, Any]
    events: pl.DataFrame
    occupancy: pl.DataFrame


def lending_detail(episode: dict[str, Any], gates: pl.DataFrame, *, margin_s: float = 5.0) -> LendingDetail:
    """One episode's events and the occupancy around them (``gates``: ``gate_requests``)."""
    events = lending_events(episode)
    t0_ns = epoch_ns(episode["t0"])
    assert t0_ns is not None
    run_gates = gates
    if episode.get("run_id") is not None and "run_id" in gates.columns:
        same_run = gates.filter(pl.col("run_id") == episode["run_id"])
        run_gates = same_run if same_run.height else gates
    if episode.get("policy") is not None:
        run_gates = run_gates.filter(pl.col("policy") == episode["policy"])
    occupancy = occupancy_steps(run_gates, t0_ns, *episode_window(events, margin_s))
    return LendingDetail(episode=episode, events=events, occupancy=occupancy)


# --- wake episodes ----------------------------------------------------------------------------


def wake_events(episode: dict[str, Any], wake: dict[str, Any] | None, attempts: pl.DataFrame) -> pl.DataFrame:
    """Every instant of one wake episode, seconds from t0 (the first 503).

    ``wake``: the episode's ``typed_model_wakes`` row (for the wake's own start), ``attempts``: the
    ``attempts`` rows of its request. Retries are labelled with the status each got.
    """
    t0_ns = epoch_ns(episode["t0"])
    assert t0_ns is not None
    hint = episode.get("retry_after_s")
    first_status = episode.get("first_status")
    first_detail = f"Retry-After {hint:g} s" if hint is not None else "no Retry-After"
    rows: list[tuple[str, float | None, str]] = [(f"first {first_status or '503'}", 0.0, first_detail)]
    if hint is not None:
        rows.append(("Retry-After elapses", float(hint), f"the hint said retry after {hint:g} s"))
    if wake is not None:
        start_ns = wake.get("start_ns")
        rows.append(("wake start", (start_ns - t0_ns) / 1e9 if start_ns is not None else None,
                     str(episode.get("wake_path") or "")))
    rows.append(("engine ready", episode.get("ready_s"), "capacity is ready"))
    rows.append(("readiness observed", episode.get("observed_s"), "the lifecycle saw it"))
    ready, overshoot = episode.get("ready_s"), episode.get("overshoot_s")
    success_s = ready + overshoot if ready is not None and overshoot is not None else None
    # the first attempt at or after t0 is the one answered 503; retries are numbered from it
    from_t0 = attempts.filter(pl.col("start") >= episode["t0"]).sort("attempt_index") if attempts.height else attempts
    trigger_index = from_t0["attempt_index"][0] if from_t0.height else 0
    for attempt in from_t0.slice(1).iter_rows(named=True):
        offset = (epoch_ns(attempt["start"]) - t0_ns) / 1e9  # type: ignore[operator]
        status = attempt.get("status_code")
        ok = status is not None and 200 <= status < 300
        retry = attempt["attempt_index"] - trigger_index
        label = f"success {status}" if ok else f"retry {retry} → {status or 'error'}"
        rows.append((label, offset, f"attempt {attempt['attempt_index']}, retry {retry}"))
        if ok:
            success_s = offset
            break
    if success_s is not None and not any(label.startswith("success") for label, _, _ in rows):
        rows.append(("success", success_s, "the successful attempt starts"))
    rows.append(("first token", episode.get("total_s"), "the request's first token"))
    return _events(rows)


@dataclass(frozen=True)
class WakeDetail:
    episode: dict[str, Any]
    events: pl.DataFrame
    overshoot: tuple[float, float] | None


def wake_detail(episode: dict[str, Any], wake: dict[str, Any] | None, attempts: pl.DataFrame) -> WakeDetail:
    ready, overshoot = episode.get("ready_s"), episode.get("overshoot_s")
    band = (float(ready), float(ready + overshoot)) if ready is not None and overshoot is not None else None
    return WakeDetail(episode=episode, events=wake_events(episode, wake, attempts), overshoot=band)


def episode_window(events: pl.DataFrame, margin_s: float = 5.0) -> tuple[float, float]:
    """Seconds from t0 an episode's charts span: ``margin_s`` before t0 to ``margin_s`` after its
    last event (the occupancy chart's range, so the pressure chart lines up with it)."""
    last_s = float(events["offset_s"].max() or 0.0) if events.height else 0.0  # type: ignore[arg-type]
    return -margin_s, max(last_s, 0.0) + margin_s
