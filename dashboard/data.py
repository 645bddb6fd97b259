"""What each page shows, computed from ``restorelens.analysis`` frames (no Streamlit, no SQL here).

Every function takes an open ``Analysis`` (or frames it returned) and gives polars frames with
offsets in seconds from the episode's t0, so the figure builders only lay them out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from restorelens.analysis import Analysis, Limit, Slo, check, parse_limit, percentiles_of
from restorelens.analysis.report import ENGINE_METRICS, NO_GATE, with_no_gate

__all__ = [
    "DEFAULT_LIMITS",
    "ENGINE_FIGURE_METRICS",
    "ENGINE_METRICS",
    "LENDING_EVENTS",
    "LENDING_METRICS",
    "NO_CLASS",
    "NO_GATE",
    "NO_WORKLOAD",
    "REQUEST_METRICS",
    "UNNAMED_POLICY",
    "WAKE_METRICS",
    "MAX_TIME_BARS",
    "RUN_COLUMNS",
    "SEGMENTS",
    "WAKE_SEGMENTS",
    "EngineSummary",
    "EpisodePressure",
    "Selection",
    "Settings",
    "LendingDetail",
    "Overview",
    "WakeDetail",
    "default_limits",
    "distribution_curves",
    "engine_policies",
    "engine_summary",
    "engine_statistics",
    "engine_view",
    "episode_pressure",
    "episode_window",
    "lending_detail",
    "lending_events",
    "limit_breaches",
    "occupancy_steps",
    "overview",
    "parse_limits",
    "runs_of",
    "schedule_points",
    "select",
    "selected_runs",
    "time_segments",
    "wake_detail",
    "wake_events",
    "with_arm_labels",
    "with_no_gate",
    "with_unnamed_policy",
]

LENDING_METRICS = ("grant_restore_s", "drain_s", "engine_schedule_s", "ttft_s")
WAKE_METRICS = ("retry_after_s", "ready_s", "observed_s", "overshoot_s", "engine_schedule_s", "total_s")
REQUEST_METRICS = ("ttft_s", "e2e_s", "gate_wait_s", "engine_schedule_s")

#: The five instants of a lending episode, in causal order (docs/design.md, "Lending").
LENDING_EVENTS = ("demand returned", "grant restored", "borrowed drained", "engine scheduled", "first token")

#: Limits shown when none are configured: the interactive TTFT SLO (5 s) at p95, and the wake
#: overshoot a client should not wait past a ready engine (1 s) at p95.
DEFAULT_LIMITS = ("lending.ttft_s.p95=5", "wake.overshoot_s.p95=1")


def default_limits(slo: Slo) -> tuple[str, ...]:
    """``DEFAULT_LIMITS`` with ``slo``'s TTFT as the lending episodes' p95 TTFT limit."""
    return (f"lending.ttft_s.p95={slo.ttft_s:g}", *DEFAULT_LIMITS[1:])

#: The engine view's metrics whose distributions the engine page draws (the table adds the
#: schedule delay's bounds).
ENGINE_FIGURE_METRICS = ("queue_s", "schedule_delay_s", "ttft_s", "prefill_s", "decode_s")
#: How a request without a traffic class reads: a user's app whose class attribute is not mapped
#: (``restorelens dashboard --label traffic_class=ATTR``).
NO_CLASS = "no class"
#: An engine span with neither a service name of its own nor a model to name it by.
NO_ENGINE = "unnamed engine"
#: A request's null workload: it carries no workload label (a request that passed no gate usually
#: carries none either); the policy page's panels and tables name it so, never "None".
NO_WORKLOAD = "no workload"
#: A lending episode's null policy: its gate named none (it is at a gate, so never "no gate").
UNNAMED_POLICY = "policy not named"
#: Most points of one distribution curve: the figure's size stays bounded whatever the store holds.
MAX_CURVE_POINTS = 200

#: The stretches of a wake episode's bar, each named by the instant that ends it (docs/dashboard.md).
WAKE_SEGMENTS = ("engine ready", "readiness observed", "retry", "engine scheduled", "first token")
#: Each episode kind's stretches, in causal order (the legend of its "where the time went" chart).
SEGMENTS = {"lending": LENDING_EVENTS[1:], "wake": WAKE_SEGMENTS}
#: The most episodes a "where the time went" chart draws (censored first, then the longest): a bar stays readable and the
#: figure's size bounded whatever the store holds; the page says how many it left out.
MAX_TIME_BARS = 40
#: The labels a run is known by, in the order the sidebar offers them.
RUN_COLUMNS = ("run_id", "scenario", "workload", "policy", "seed")

_EVENT_COLUMNS = {"event": pl.String, "offset_s": pl.Float64, "detail": pl.String}


def _events(rows: list[tuple[str, float | None, str]]) -> pl.DataFrame:
    kept = [row for row in rows if row[1] is not None]
    return pl.DataFrame(kept, schema=_EVENT_COLUMNS, orient="row").sort("offset_s", maintain_order=True)


def _ns(value: Any) -> int | None:
    """A polars datetime (python ``datetime``) or ns integer -> epoch nanoseconds."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    return int(pl.Series([value]).cast(pl.Datetime("ns")).cast(pl.Int64)[0])


def with_arm_labels(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (the policy summary or paired differences) as the policy page shows it: a null
    policy and baseline spelt ``NO_GATE``, a null workload ``NO_WORKLOAD``."""
    shown = with_no_gate(frame)
    if "workload" in shown.columns and shown.schema["workload"] == pl.String:
        shown = shown.with_columns(pl.col("workload").fill_null(NO_WORKLOAD))
    return shown


def with_unnamed_policy(episodes: pl.DataFrame) -> pl.DataFrame:
    """Lending episodes with a null policy spelt ``UNNAMED_POLICY``: the gate that lent named none."""
    return episodes.with_columns(pl.col("policy").fill_null(UNNAMED_POLICY))


# --- the sidebar's selection ------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """The runs the pages show: each field the values chosen (empty: any). A run matches when it
    matches every field; ``policies`` spell a run without a gate ``NO_GATE``."""

    run_ids: tuple[str, ...] = ()
    scenarios: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.run_ids or self.scenarios or self.policies or self.seeds)


@dataclass(frozen=True)
class Settings:
    """What the sidebar sets for every page: the runs shown, the SLO and the percentile method."""

    selection: Selection = field(default_factory=Selection)
    slo: Slo = field(default_factory=Slo)
    method: str = "linear"


def runs_of(runs: pl.DataFrame) -> pl.DataFrame:
    """``Analysis.runs()`` as the sidebar offers it: one row per run id × its labels (``RUN_COLUMNS``)
    with its request count, a run without a gate's policy spelt ``NO_GATE``. Requests without a run
    id are no run: a deployment's own traffic is never filtered away by a run that does not exist."""
    schema = {"run_id": pl.String, "scenario": pl.String, "workload": pl.String, "policy": pl.String,
              "seed": pl.Int64}
    counts = pl.col("requests") if "requests" in runs.columns else pl.lit(1)
    return (runs.filter(pl.col("run_id").is_not_null())
            .select(*(pl.col(name).cast(dtype) for name, dtype in schema.items()), counts.cast(pl.Int64).alias("requests"))
            .with_columns(pl.col("policy").fill_null(NO_GATE))
            .group_by(list(schema)).agg(pl.col("requests").sum())
            .sort("run_id", "scenario", "workload", "policy", "seed", nulls_last=True))


def selected_runs(runs: pl.DataFrame, selection: Selection) -> frozenset[str] | None:
    """The run ids ``selection`` keeps (None: it filters nothing)."""
    if not selection.active:
        return None
    chosen = runs
    for column, values in (("run_id", selection.run_ids), ("scenario", selection.scenarios),
                           ("policy", selection.policies), ("seed", selection.seeds)):
        if values:
            chosen = chosen.filter(pl.col(column).is_in(list(values)))
    return frozenset(chosen["run_id"].to_list())


def select(frame: pl.DataFrame, runs: pl.DataFrame, selection: Selection) -> pl.DataFrame:
    """``frame``'s rows of the selected runs: by ``run_id`` when it has one, else by the arm labels
    it has (``policy``, ``workload``, ``seed``: the policy summary); a frame with neither as it is."""
    kept = selected_runs(runs, selection)
    if kept is None:
        return frame
    if "run_id" in frame.columns:
        return frame.filter(pl.col("run_id").is_in(sorted(kept)))
    keys = [c for c in ("policy", "workload", "seed") if c in frame.columns]
    if not keys:
        return frame
    arms = runs.filter(pl.col("run_id").is_in(sorted(kept))).select(keys).unique()
    shown = with_no_gate(frame) if "policy" in keys else frame
    return frame.filter(_matches(shown, arms, keys))


def _matches(frame: pl.DataFrame, arms: pl.DataFrame, keys: list[str]) -> pl.Series:
    """Per row of ``frame``: does its (keys) tuple appear in ``arms``?"""
    wanted = set(arms.select(keys).rows())
    return pl.Series([row in wanted for row in frame.select(keys).rows()], dtype=pl.Boolean)


# --- where the time went ------------------------------------------------------------------------


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


# --- overview ---------------------------------------------------------------------------------


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
    violations = check(_Frames(frames), parsed, percentile=method)  # type: ignore[arg-type]
    named = with_unnamed_policy(lending)
    return Overview(
        counts=counts,
        lending_stats=percentiles_of(named, LENDING_METRICS, ["policy"], method=method),
        wake_stats=percentiles_of(wakes, WAKE_METRICS, ["model", "wake_path"], method=method),
        request_stats=request_stats,
        violations=tuple(str(v) for v in violations),
        breaches=limit_breaches(frames, parsed),
        limits=tuple(limit.name + f"={limit.maximum:g}" for limit in parsed),
        limited_rows={limit.view: frames[limit.view].height for limit in parsed},
        lending_segments=time_segments(lending, "lending"),
        wake_segments=time_segments(wakes, "wake"),
        lending_curves=distribution_curves(named, ("policy",), LENDING_METRICS),
        wake_curves=distribution_curves(wakes, ("wake_path",), WAKE_METRICS),
    )


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
        time_column = next(name for name in ("t0", "start", "arrival") if name in frame.columns)
        # the id a page opens it by: an episode's span, a request's id, an engine request's trace
        id_column = {"requests": "request_id", "engine": "trace_id"}.get(limit.view, "span_id")
        for row in frame.filter(hit).iter_rows(named=True):
            value = float(row[limit.column]) if limit.statistic != "count" else 1.0
            rows.append((f"{limit.name}={limit.maximum:g}", limit.view, value, str(row[id_column]),
                         str(row[time_column])))
    return pl.DataFrame(rows, schema=schema, orient="row")


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
    t0_ns = _ns(episode["t0"])
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
    t0_ns = _ns(episode["t0"])
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
        offset = (_ns(attempt["start"]) - t0_ns) / 1e9  # type: ignore[operator]
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


# --- the engine ---------------------------------------------------------------------------------


def engine_view(requests: pl.DataFrame) -> pl.DataFrame:
    """``engine_requests`` with its labels as the pages show them: a null policy is ``NO_GATE``, a
    null traffic class ``NO_CLASS``, an engine without a name ``NO_ENGINE``."""
    return with_no_gate(requests).with_columns(
        pl.col("engine").fill_null(NO_ENGINE), pl.col("traffic_class").fill_null(NO_CLASS),
    )


def engine_statistics(view: pl.DataFrame, groups: Sequence[str] = ("engine", "traffic_class"),
                      method: str = "linear") -> pl.DataFrame:
    """Count, p50, p90, p95, p99 and max of every engine metric per group (the report's ``engine``
    section when ``groups`` are engine and traffic class); ``view`` from ``engine_view``."""
    return percentiles_of(view, ENGINE_METRICS, list(groups), method=method)


def schedule_points(view: pl.DataFrame) -> dict[str, int]:
    """How many requests' schedule delay is each bound (``upper``, ``lower``) of its interval."""
    counts = {"upper": 0, "lower": 0}
    for point, count in view.group_by("schedule_point").len().iter_rows():
        if point in counts:
            counts[point] = int(count)
    return counts


def distribution_curves(view: pl.DataFrame, groups: Sequence[str] = ("engine", "traffic_class"),
                         metrics: Sequence[str] = ENGINE_FIGURE_METRICS,
                         max_points: int = MAX_CURVE_POINTS) -> pl.DataFrame:
    """Each metric's empirical distribution per group, as the points of a step curve: ``seconds``
    and ``fraction`` of the group's values at or below it, every value when a group holds at most
    ``max_points``, else ``max_points`` of them evenly by rank (the first and the last included)."""
    schema = {"group": pl.String, "metric": pl.String, "seconds": pl.Float64, "fraction": pl.Float64,
              "count": pl.Int64}
    rows: list[tuple[str, str, float, float, int]] = []
    ordered = view.sort(list(groups), nulls_last=True, maintain_order=True) if groups else view
    parts = ordered.group_by(list(groups), maintain_order=True) if groups else [((), ordered)]
    for key, part in parts:
        group = " · ".join(str(value) for value in key) or "all"
        for metric in metrics:
            values = part[metric].cast(pl.Float64).drop_nulls().drop_nans().sort().to_list()
            n = len(values)
            if n == 0:
                continue
            ranks = range(n) if n <= max_points else sorted(
                {round(k * (n - 1) / (max_points - 1)) for k in range(max_points)})
            rows.extend((group, metric, values[rank], (rank + 1) / n, n) for rank in ranks)
    return pl.DataFrame(rows, schema=schema, orient="row")


@dataclass(frozen=True)
class EngineSummary:
    """The engine page: its counts, statistics and distribution curves over the chosen policies."""

    requests: int
    via_gate: int
    clock_skew: int
    unclassified: int
    points: dict[str, int]
    groups: tuple[str, ...]
    statistics: pl.DataFrame
    curves: pl.DataFrame
    slowest: pl.DataFrame


#: The slowest-scheduled requests' columns the engine page lists.
_SLOWEST_COLUMNS = ("engine", "traffic_class", "policy", "model", "attempt_source", "arrival", "queue_s",
                    "schedule_delay_s", "schedule_delay_lower_s", "schedule_delay_upper_s", "schedule_point",
                    "ttft_s", "prefill_s", "decode_s", "trace_id")


def engine_policies(requests: pl.DataFrame) -> tuple[str, ...]:
    """The policies ``engine_requests`` holds, as shown (``NO_GATE`` for none)."""
    return tuple(sorted(set(with_no_gate(requests.select("policy"))["policy"].to_list())))


def engine_summary(requests: pl.DataFrame, policies: Sequence[str] | None = None, *, by_policy: bool = False,
                   slowest: int = 20, method: str = "linear") -> EngineSummary:
    """``engine_requests`` under ``policies`` (as shown; None: all), per engine × traffic class (×
    policy with ``by_policy``), and the ``slowest`` requests by schedule delay."""
    view = engine_view(requests)
    if policies is not None:
        view = view.filter(pl.col("policy").is_in(list(policies)))
    groups = ("engine", "traffic_class", "policy") if by_policy else ("engine", "traffic_class")
    return EngineSummary(
        requests=view.height,
        via_gate=int(view["via_gate"].fill_null(False).sum()),
        clock_skew=int(view["clock_skew"].fill_null(False).sum()),
        unclassified=int((view["traffic_class"] == NO_CLASS).sum()),
        points=schedule_points(view),
        groups=groups,
        statistics=engine_statistics(view, groups, method),
        curves=distribution_curves(view, groups),
        slowest=view.sort("schedule_delay_s", descending=True, nulls_last=True).head(slowest)
        .select(_SLOWEST_COLUMNS),
    )


@dataclass(frozen=True)
class EpisodePressure:
    """The engines' scrapes around one episode, for its pressure chart.

    ``samples``: offset_s (from t0), engine (the scraped target, with vLLM's engine index when a
    target reports several), running, waiting, kv_cache_usage_fraction. ``scraped``: the store
    holds any scrape at all; ``models``: the models its scrapes are of (to say why none matched).
    """

    model: str | None
    start_s: float
    end_s: float
    samples: pl.DataFrame
    scraped: bool
    models: tuple[str, ...]


def episode_pressure(pressure: pl.DataFrame, model: str | None, t0: Any, start_s: float,
                     end_s: float) -> EpisodePressure:
    """The scrapes (``engine_pressure``) of the engines serving ``model`` from ``start_s`` to
    ``end_s`` seconds around ``t0`` (an episode's, datetime or ns): the engines the analysis reads
    the episode's pressure at t0 from (the same model name)."""
    t0_ns = _ns(t0)
    assert t0_ns is not None
    schema = {"offset_s": pl.Float64, "engine": pl.String, "running": pl.Float64, "waiting": pl.Float64,
              "kv_cache_usage_fraction": pl.Float64}
    models = tuple(sorted({str(name) for name in pressure["model_name"].drop_nulls().to_list()}))
    low, high = t0_ns + round(start_s * 1e9), t0_ns + round(end_s * 1e9)
    mine = pressure.filter((pl.col("model_name") == model) & pl.col("at_ns").is_between(low, high)) \
        if model is not None else pressure.clear()
    several = mine.group_by("target").agg(pl.col("engine_index").n_unique().alias("engines"))
    indexed = set(several.filter(pl.col("engines") > 1)["target"].to_list())
    samples = mine.sort("at_ns", "target", "engine_index").select(
        ((pl.col("at_ns") - t0_ns) / 1e9).alias("offset_s"),
        pl.when(pl.col("target").is_in(list(indexed)) & pl.col("engine_index").is_not_null())
        .then(pl.col("target") + " · engine " + pl.col("engine_index"))
        .otherwise(pl.col("target")).alias("engine"),
        "running", "waiting", "kv_cache_usage_fraction",
    ).cast(schema)  # type: ignore[arg-type]
    return EpisodePressure(model=model, start_s=start_s, end_s=end_s, samples=samples,
                           scraped=pressure.height > 0, models=models)


# --- policies ---------------------------------------------------------------------------------


