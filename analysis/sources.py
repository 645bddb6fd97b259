"""The ``Analysis`` of a source (``restorelens.sources``): ``open_analysis`` opens one, read only,
over a window (``window.Window``: a time range and a run filter pushed down to the spans every
layer reads). It picks the analysis for the source's kind, above each of them.

On ClickHouse nothing is created: each query is the layers it needs as CTEs over a filtered
``otel_traces`` (``clickhouse.ClickHouseAnalysis``), so the filters reach the table scan and the
user's database is only read. On DuckDB the window is a temporary ``otel_traces`` of its spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from restorelens.analysis.window import Window, window_filter
from restorelens.errors import InputError
from restorelens.sources import Source

__all__ = ["empty_note", "open_analysis"]


def open_analysis(source: Source, *, window: Window = Window(), slo: Any = None, materialize: bool = False,
                  labels: Mapping[str, str] | None = None) -> Any:
    """An ``Analysis`` of ``source`` over ``window``, read only."""
    from restorelens.analysis.views import Analysis

    if source.kind == "duckdb":
        if window.everything:
            return Analysis.open(source.path, slo=slo, materialize=materialize, labels=labels)
        return _windowed_duckdb(source, window, slo, materialize, labels)
    from restorelens.analysis.clickhouse.analysis import ClickHouseAnalysis
    from restorelens.analysis.clickhouse.clients import connect

    return ClickHouseAnalysis(connect(source), database=source.database, window=window, slo=slo, labels=labels)


def empty_note(where: str, window: Window) -> str:
    """The one line ``report``, ``check`` and ``dashboard`` print for a source (or a window of one)
    that holds no span: their figures are then all empty, which alone says nothing of why."""
    if window.everything:
        return (f"note: {where} holds no spans: every figure is empty (record some with `restorelens collect` "
                "or `restorelens load`)")
    return f"note: {where} holds no spans in the window ({window.describe()}): every figure is empty"


def _windowed_duckdb(source: Source, window: Window, slo: Any, materialize: bool,
                     labels: Mapping[str, str] | None) -> Any:
    """A DuckDB store read through a temporary ``otel_traces`` holding the window's spans: DuckDB
    finds temporary objects first, so every layer reads the window; the store's derived tables
    hold every span, so they are not used."""
    import duckdb

    from restorelens.analysis.views import Analysis
    from restorelens.errors import first_line
    from restorelens.store import open_read_only

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
