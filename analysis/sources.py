"""The window and the ``Analysis`` of a source (``restorelens.sources``): ``open_analysis`` opens
one, read only, with a time window and a run filter pushed down to the spans every layer reads.

On ClickHouse nothing is created: each query is the layers it needs as CTEs over a filtered
``otel_traces`` (``on_clickhouse.ClickHouseAnalysis``), so the filters reach the table scan and the
user's database is only read. On DuckDB the window is a temporary ``otel_traces`` of its spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from restorelens.errors import InputError
from restorelens.sources import Source
from restorelens.spans import ATTR_RUN_ID

__all__ = ["Window", "open_analysis", "window_filter"]


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


def open_analysis(source: Source, *, window: Window = Window(), slo: Any = None, materialize: bool = False,
                  labels: Mapping[str, str] | None = None) -> Any:
    """An ``Analysis`` of ``source`` over ``window``, read only."""
    from restorelens.analysis.views import Analysis

    if source.kind == "duckdb":
        if window.everything:
            return Analysis.open(source.path, slo=slo, materialize=materialize, labels=labels)
        return _windowed_duckdb(source, window, slo, materialize, labels)
    from restorelens.analysis.on_clickhouse import ClickHouseAnalysis, connect

    return ClickHouseAnalysis(connect(source), database=source.database, window=window, slo=slo, labels=labels)


def _windowed_duckdb(source: Source, window: Window, slo: Any, materialize: bool,
                     labels: Mapping[str, str] | None) -> Any:
    """A DuckDB store read through a temporary ``otel_traces`` holding the window's spans: DuckDB
    finds temporary objects first, so every layer reads the window; the store's derived tables
    hold every span, so they are not used."""
    import duckdb

    from restorelens.analysis.views import Analysis
    from restorelens.collector.store import open_read_only
    from restorelens.errors import first_line

    path = Path(source.path)
    try:
        con = open_read_only(path, timeout_s=10.0)
    except duckdb.Error as exc:
        raise InputError(str(path), first_line(exc)) from None
    try:
        clause, parameters = window_filter(window, dialect="duckdb", table="main.otel_traces")
        # a table, not a view: a view cannot hold parameters, and the values are never SQL text
        con.execute(f"create or replace temp table otel_traces as select * from main.otel_traces where {clause}",
                    parameters)
        return Analysis(con, slo=slo, materialize=materialize, use_derived=False, labels=labels)
    except BaseException:
        con.close()
        raise


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
