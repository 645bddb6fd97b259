"""``Analysis``: open a span store and get each layer of the decomposition as a polars DataFrame.

    from restorelens.analysis import Analysis
    with Analysis.open("spans.duckdb") as analysis:
        episodes = analysis.wake_episodes()
        analysis.percentiles("wake_episodes", ["overshoot_s"], by=["wake_path"])

The SQL in ``analysis/sql/`` is the definition of every number; this module only registers the
layers as temporary views on the connection (nothing is written to the store) and runs them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
import polars as pl

from restorelens.analysis.layers import DRIVING_SPANS, PUBLIC_VIEWS, SHARED_LAYERS, VIEW_LAYERS, register_macros
from restorelens.analysis.queries import load_query
from restorelens.analysis.derived import fresh_layers
from restorelens.errors import InputError, SettingError, first_line
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN, ARRIVAL_PHASE_WAKE, SPAN_CLIENT_REQUEST
from restorelens.store import ENGINE_METRICS_TABLE, TABLE, engine_metrics_sql

__all__ = ["GROUP_ALIASES", "LABELS", "PERCENTILE_METHODS", "STATISTICS", "Analysis", "Slo", "checked_labels",
           "checked_seconds", "nearest_rank"]

#: The statistics ``percentiles`` computes for each metric.
STATISTICS = ("p50", "p90", "p95", "p99", "max")
#: How a percentile is read off the values: ``linear`` interpolates between the two ranks around
#: q·(n − 1) (the default, and polars' and numpy's); ``nearest-rank`` is the value at rank ⌈q·n⌉,
#: as studies that report "the median of 5 seeds is the 3rd" use it.
PERCENTILE_METHODS = ("linear", "nearest-rank")

#: Friendly grouping names -> column names (any column name is accepted as well).
GROUP_ALIASES = {"class": "traffic_class", "wake path": "wake_path", "path": "wake_path"}

#: The labels the analysis groups by that a user may map onto their own attribute names
#: (``[analysis.labels]``, ``--label LABEL=ATTR``); ``run`` is accepted for ``run_id``.
LABELS = ("traffic_class", "policy", "workload", "run_id", "seed", "model")
_LABEL_ALIASES = {"run": "run_id"}
#: Longest attribute name a label may be mapped to (OTel sets no limit; a name is not a document).
MAX_ATTRIBUTE_NAME_CHARS = 256

_QUANTILES = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99}

# Layer name -> its columns with no rows. Planning a large view costs a tenth of a second even
# with no rows to read; the columns depend only on the SQL files, so they are learnt once.
_EMPTY_FRAMES: dict[str, pl.DataFrame] = {}


@dataclass(frozen=True)
class Slo:
    """The interactive SLO and the arrival phases of the policy summary (MoFlux: TTFT <= 5 s, e2e <= 30 s).

    ``contention_phase``: the interactive arrivals whose on-time answers are the SLO goodput (the
    study's contention window, interactive demand back while batch holds the engine).
    ``borrow_phase``: the batch arrivals whose completions are the borrow goodput.
    ``excluded_phases``: requests left out of the summary altogether; by default the ModelClaim
    wake scenarios' requests, which pass a gate but are no MoFlux policy arm.
    """

    ttft_s: float = 5.0
    e2e_s: float = 30.0
    borrow_phase: str = ARRIVAL_PHASE_BORROW
    contention_phase: str = ARRIVAL_PHASE_RETURN
    excluded_phases: tuple[str, ...] = (ARRIVAL_PHASE_WAKE,)

    def __post_init__(self) -> None:
        # NaN compares false with everything (DuckDB orders it above all values): every request
        # would meet the SLO; a negative limit none.
        checked_seconds("Slo.ttft_s", self.ttft_s)
        checked_seconds("Slo.e2e_s", self.e2e_s)

    def parameters(self) -> dict[str, Any]:
        return {"slo_ttft_s": self.ttft_s, "slo_e2e_s": self.e2e_s, "borrow_phase": self.borrow_phase,
                "contention_phase": self.contention_phase, "excluded_phases": list(self.excluded_phases)}


def checked_labels(setting: str, labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` (label -> the user's attribute name) with ``run`` spelt ``run_id``, or a
    ``SettingError`` naming ``setting`` for an unknown label or an empty or oversized name."""
    checked: dict[str, str] = {}
    for label, attribute in labels.items():
        name = _LABEL_ALIASES.get(label, label)
        if name not in LABELS:
            raise SettingError(setting, f"unknown label {label!r}; valid: {', '.join(LABELS)}")
        if not isinstance(attribute, str) or not attribute.strip():
            raise SettingError(f"{setting}.{label}", "must name an attribute (a non-empty string)")
        if len(attribute) > MAX_ATTRIBUTE_NAME_CHARS:
            raise SettingError(f"{setting}.{label}", f"longer than {MAX_ATTRIBUTE_NAME_CHARS} characters")
        checked[name] = attribute
    return checked


def checked_seconds(setting: str, value: float) -> float:
    """``value`` if it is a finite duration >= 0, else a ``SettingError`` naming ``setting``."""
    if not math.isfinite(value) or value < 0:
        raise SettingError(setting, f"must be a finite number of seconds >= 0, got {value:g}")
    return value


class Analysis:
    """The decomposition views over one DuckDB connection holding ``otel_traces``.

    ``materialize=True`` computes the layers that several views share (``SHARED_LAYERS``) once
    into temporary tables, faster when many views are read (a report); the default registers
    plain views, computed when read (cheapest when a view is read once: a view computes only the
    columns it needs). The layers the collector keeps (``DERIVED_LAYERS``: the typed layers,
    ``gate_requests`` and ``request_attempts``) are read from the store's tables while they are
    fresh (``derived.py``), else computed from ``otel_traces`` like the rest. Either
    way, a view whose driving span (``DRIVING_SPANS``) is absent from the store is answered empty
    without computing anything under it.

    ``labels`` maps the labels the views group by (``LABELS``) onto the user's own span or
    resource attribute names, e.g. ``{"traffic_class": "app.tier"}``: a mapped attribute comes
    before restorelens's own (``restore.traffic_class``, ...).

    A connection holds one ``Analysis`` at a time: the views and the label mapping are temporary
    objects of the connection, so a new ``Analysis`` on it replaces the previous one's.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, *, slo: Slo | None = None, materialize: bool = False,
                 use_derived: bool = True, labels: Mapping[str, str] | None = None) -> None:
        self.con = con
        self.slo = slo or Slo()
        self.materialize = materialize
        self.labels = checked_labels("labels", labels or {})
        self._summary_materialized_for: Slo | None = None
        self._drop_layers()
        register_macros(con)
        # read by span_labels.sql; a table, not SQL text, so that attribute names stay parameters
        con.execute("create or replace temp table rl_label_map (label varchar not null, attribute varchar not null)")
        if self.labels:
            con.executemany("insert into rl_label_map values (?, ?)", list(self.labels.items()))
        _ensure_engine_metrics(con)
        #: Layers read from the store's derived tables (``derived.py``) instead of computed;
        #: ``use_derived=False`` computes every layer from ``otel_traces`` (same results, slower).
        self.stored_layers = fresh_layers(con) if use_derived else frozenset()
        for name in VIEW_LAYERS:
            if name in self.stored_layers:
                continue  # the store's table of that name is the layer
            kind = "table" if materialize and name in SHARED_LAYERS else "view"
            con.execute(f"create temp {kind} {name} as {load_query(name).sql}")

    def _has_spans(self, span_name: str) -> bool:
        """Whether the store holds any span named ``span_name``: a scan of one column that stops at
        the first match, asked every time (not cached) because a collector may be adding spans."""
        rows = self.con.execute(
            f'select exists (select 1 from {TABLE} where "SpanName" = $name)', {"name": span_name}
        ).fetchall()
        return bool(rows[0][0])

    def probe(self) -> None:
        """Read ``otel_traces`` once, cheaply: a missing table or server is a one-line error here."""
        self._has_spans(SPAN_CLIENT_REQUEST)

    def holds_spans(self) -> bool:
        """Whether the store (the window, when it has one) holds any span at all."""
        return bool(self.con.execute(f"select exists (select 1 from {TABLE})").fetchall()[0][0])

    def _is_empty(self, name: str) -> bool:
        """True when layer ``name`` has no rows because the store holds none of its driving spans."""
        span_name = DRIVING_SPANS.get(name)
        return span_name is not None and not self._has_spans(span_name)

    def _drop_layers(self) -> None:
        """Drop layers a previous ``Analysis`` on this connection registered (as views or tables)."""
        tables = {row[0] for row in self.con.execute("select table_name from duckdb_tables() where temporary").fetchall()}
        views = {row[0] for row in self.con.execute("select view_name from duckdb_views() where temporary").fetchall()}
        for name in reversed(VIEW_LAYERS):
            if name in tables:
                self.con.execute(f"drop table temp.{name}")
            elif name in views:
                self.con.execute(f"drop view temp.{name}")

    @classmethod
    def open(cls, db_path: str | Path, *, slo: Slo | None = None, materialize: bool = False,
             lock_timeout_s: float = 10.0, labels: Mapping[str, str] | None = None) -> Analysis:
        """Open a store read-only (waiting up to ``lock_timeout_s`` for a writer between batches).

        A missing, locked or foreign file (not DuckDB's, no ``otel_traces`` or another table of that
        name: ``open_read_only`` checks) is a one-line ``RestorelensError``.
        """
        from restorelens.store import open_read_only

        path = Path(db_path)
        try:
            con = open_read_only(path, timeout_s=lock_timeout_s)
        except duckdb.Error as exc:
            raise InputError(str(path), first_line(exc)) from None
        try:
            return cls(con, slo=slo, materialize=materialize, labels=labels)
        except BaseException:
            con.close()
            raise

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Analysis:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _frame(self, sql: str, parameters: dict[str, Any] | None = None) -> pl.DataFrame:
        return self.con.sql(sql, params=parameters or None).pl()

    # --- the views ----------------------------------------------------------------------------

    def view(self, name: str, columns: Sequence[str] | None = None) -> pl.DataFrame:
        """Any registered layer by name (``VIEW_LAYERS``), e.g. ``"gate_requests"``; ``columns``
        reads only those, in that order (a report's statistics need a few of a view's many
        columns, and an engine reads and sends only those)."""
        if name not in VIEW_LAYERS:
            raise SettingError("view", f"unknown view {name!r}; valid: {', '.join(VIEW_LAYERS)}")
        if columns is not None:
            if isinstance(columns, str) or not columns or len(set(columns)) != len(columns):
                raise SettingError("column", f"give {name}'s columns as a list of distinct names, got {columns!r}")
            known = self._empty_frame(name).columns
            unknown = [column for column in columns if column not in known]
            if unknown:
                raise SettingError("column", f"unknown column {unknown[0]!r} in {name}; valid: {', '.join(known)}")
        if self._is_empty(name):
            # the same columns and types as the computed view, without computing anything
            empty = self._empty_frame(name).clear()
            return empty if columns is None else empty.select(columns)
        # the names were checked against the view's own columns above, so quoting them is enough
        chosen = "*" if columns is None else ", ".join(f'"{column}"' for column in columns)
        return self._frame(f"select {chosen} from {name}")

    def _empty_frame(self, name: str) -> pl.DataFrame:
        """Layer ``name``'s columns and types, no rows (made once per process)."""
        if name not in _EMPTY_FRAMES:
            _EMPTY_FRAMES[name] = self._frame(f"select * from {name} limit 0")
        return _EMPTY_FRAMES[name]

    def requests(self) -> pl.DataFrame:
        """One row per logical request (client + attempts + gate + engine)."""
        return self.view("requests").sort("start", "trace_id")

    def attempts(self) -> pl.DataFrame:
        """One row per HTTP attempt, in order within its request."""
        return self.view("attempts").sort("trace_id", "attempt_index")

    def engine_requests(self) -> pl.DataFrame:
        """One row per request an engine served, with or without a gate or a restorelens client."""
        return self.view("engine_requests").sort("arrival", "span_id")

    def engine_pressure(self) -> pl.DataFrame:
        """One row per scrape of an engine's /metrics (``collect --scrape``), in time order."""
        return self.view("engine_pressure").sort("at", "target", "model_name", "engine_index")

    def lending_episodes(self) -> pl.DataFrame:
        """One row per lending episode (``gate.restore``), censored ones included."""
        return self.view("lending_episodes").sort("t0", "span_id")

    def wake_episodes(self) -> pl.DataFrame:
        """One row per wake episode (``modelclaim.wake``), censored ones included."""
        return self.view("wake_episodes").sort("t0", "span_id")

    def wake_phases(self) -> pl.DataFrame:
        """One row per engine startup span of a wake episode, in tree order per episode."""
        return self.view("wake_phases").sort("trace_id", "wake_span_id", "start_index", "start_s", "depth", "span_id")

    def runs(self) -> pl.DataFrame:
        """One row per run id × scenario, workload, policy and seed its client requests carry."""
        return self.view("runs")

    def lifecycle_intervals(self) -> pl.DataFrame:
        """One row per model state interval, in order per run, model and pod."""
        return self.view("lifecycle_intervals").sort("run_id", "model", "pod", "interval_index", nulls_last=True)

    def policy_summary(self) -> pl.DataFrame:
        """Goodputs per policy x workload x seed under ``self.slo``."""
        query = load_query("policy_summary")
        frame = self._frame(query.sql, self.slo.parameters())
        return frame.sort("policy", "workload", "seed", nulls_last=True)

    def paired_differences(self) -> pl.DataFrame:
        """Policy minus baseline goodputs for every workload x seed both ran."""
        if self._summary_materialized_for != self.slo:
            summary = load_query("policy_summary")
            self.con.execute(f"create or replace temp table policy_summary as {summary.sql}", self.slo.parameters())
            self._summary_materialized_for = self.slo
        frame = self._frame(load_query("paired_differences").sql)
        return frame.sort("workload", "policy", "baseline", "seed", nulls_last=True)

    # --- traces -------------------------------------------------------------------------------

    def trace(self, trace_id: str) -> pl.DataFrame:
        """Every span of one trace, ordered for a waterfall (offsets in seconds from its start)."""
        return self._frame(load_query("trace_spans").sql, {"trace_id": trace_id.lower()})

    def linked_from(self, trace_id: str) -> pl.DataFrame:
        """The ``gate.restore`` / ``modelclaim.wake`` spans whose links point into ``trace_id``."""
        return self._frame(load_query("linked_from").sql, {"trace_id": trace_id.lower()})

    def traces_for_request(self, request_id: str) -> list[str]:
        """Trace ids holding the logical request ``request_id`` (normally one), oldest first."""
        rows = self.con.execute(load_query("traces_for_request").sql, {"request_id": request_id}).fetchall()
        return [row[0] for row in rows]

    # --- statistics ---------------------------------------------------------------------------

    def percentiles(self, view: str, metrics: Sequence[str], by: Sequence[str] = (), *,
                    method: str = "linear") -> pl.DataFrame:
        """p50/p90/p95/p99/max of ``metrics`` in a public view, grouped by ``by``.

        One row per group and metric: the group columns, ``metric``, ``count`` (non-null values:
        censored episodes have null durations and are not counted) and one column per statistic.
        Group names may be column names or ``class`` / ``wake path``.
        """
        if view not in PUBLIC_VIEWS:
            raise SettingError("view", f"unknown view {view!r}; valid: {', '.join(PUBLIC_VIEWS)}")
        frame = getattr(self, view)()
        return percentiles_of(frame, metrics, by, method=method)


def _ensure_engine_metrics(con: duckdb.DuckDBPyConnection) -> None:
    """A store written before engines were scraped has no ``engine_metrics``: an empty temporary
    table of the store's own definition stands in, so the views read "no samples", not an error."""
    present = con.execute(
        "select count(*) from duckdb_tables() where table_name = $name and not temporary",
        {"name": ENGINE_METRICS_TABLE},
    ).fetchone()
    if present and present[0]:
        return
    con.execute(engine_metrics_sql().replace("create table", "create temp table", 1))


def nearest_rank(values: Sequence[float | None], q: float) -> float | None:
    """The value at rank ⌈q·n⌉ of the sorted non-null values (the smallest for q = 0); None if none."""
    ordered = sorted(v for v in values if v is not None and not math.isnan(v))
    if not ordered:
        return None
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def nearest_rank_expr(values: pl.Expr, q: float) -> pl.Expr:
    """``nearest_rank`` as a polars aggregation over non-null ``values`` (null when there are none)."""
    # the value at rank ceil(q·n), 1-based: index ceil(q·n) - 1 of the sorted values
    index = ((values.count() * q).ceil().cast(pl.Int64) - 1).clip(lower_bound=0)
    return values.sort().get(index, null_on_oob=True)


def percentiles_of(
    frame: pl.DataFrame, metrics: Sequence[str], by: Sequence[str] = (), *, method: str = "linear"
) -> pl.DataFrame:
    """The statistics of ``percentiles`` over any DataFrame (``method``: one of ``PERCENTILE_METHODS``)."""
    if method not in PERCENTILE_METHODS:
        raise SettingError("percentile", f"unknown method {method!r}; choose one of {', '.join(PERCENTILE_METHODS)}")
    group_columns = [GROUP_ALIASES.get(name, name) for name in by]
    for column in [*group_columns, *metrics]:
        if column not in frame.columns:
            raise SettingError("column", f"unknown column {column!r}; valid: {', '.join(frame.columns)}")
    for metric in metrics:
        if not frame.schema[metric].is_numeric():
            raise SettingError("metric", f"{metric!r} is not numeric")
    parts = []
    for metric in metrics:
        values = pl.col(metric).cast(pl.Float64).drop_nulls()
        aggregations = [values.count().alias("count")]
        if method == "linear":
            aggregations += [values.quantile(q, interpolation="linear").alias(name) for name, q in _QUANTILES.items()]
        else:
            aggregations += [nearest_rank_expr(values, q).alias(name) for name, q in _QUANTILES.items()]
        aggregations.append(values.max().alias("max"))
        if group_columns:
            part = frame.group_by(group_columns, maintain_order=True).agg(aggregations)
        else:
            part = frame.select(aggregations)
        parts.append(part.with_columns(pl.lit(metric).alias("metric")))
    if not parts:
        return pl.DataFrame()
    result = pl.concat(parts, how="vertical")
    ordered = [*group_columns, "metric", "count", *STATISTICS]
    return result.select(ordered).sort([*group_columns, "metric"], nulls_last=True, maintain_order=True)
