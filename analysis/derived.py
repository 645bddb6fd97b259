"""Analysis layers kept as tables next to ``otel_traces``, written for the spans the store takes in.

Two kinds, each a table named after its layer and filled by the analysis' own SQL (which layers,
and what each reads, is the catalog's: ``analysis/layers.py``):

* ``SPAN_LAYERS``, the typed layers (``analysis/sql/typed_*.sql``): a pure function of one span
  row (typed attributes, integer keys, event instants). New spans are run through the SQL as they
  are stored.
* ``TRACE_LAYERS`` (``gate_requests``, ``request_attempts``): request-level facts that join
  several spans, but only spans of one trace (every join is on ``trace_key``). When spans of a
  trace arrive, that trace's rows are deleted and computed again from the typed tables, so a
  late span (an engine span exported after its client's) is exact, not lost.

Deriving these on every read cost half of a decomposition (10M spans: ~11 s of ~21 s on two
cores), so the store pays for them once, after the spans commit: the collector's writer
(``SpanStore``) calls this module and decides when, at once or in bulk. The analysis reads a
table only while it is fresh (:func:`fresh_layers`):
written by the SQL it would run itself (fingerprint: the layer's file and the macros it calls, and
for a trace layer its inputs' SQL too), and complete. A typed table is complete when it holds one
row per span of its kind. A trace layer records the span count at which it was complete: set by a
rebuild, and moved on by a derivation only from the count just before its batch (so a batch whose
derivation failed, or spans stored by another writer, leave it behind for good); it is complete
while its inputs are and that count is the span count now. So a store from an older version, or one whose spans were
added or removed behind the collector's back, is still decomposed exactly (from ``otel_traces``)
until a writer opens it and rebuilds the tables (:func:`ensure`, all or nothing). An edit of
stored spans that keeps every count is not detected: the collector never updates a span, and a
hand-edited store should be rebuilt (``rebuild``).

The tables are named in the store's own catalog (``_qualified``): a reader's temporary view of the
same name (``Analysis`` registers one when a table is stale) must never receive the rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator
from functools import cache
from typing import Any

from restorelens.analysis.layers import (
    DERIVED_LAYERS,
    SPAN_LAYERS,
    TRACE_LAYERS,
    macros_of,
    register_macros,
    sql_text,
)
from restorelens.store import TABLE

__all__ = [
    "META_TABLE", "ensure", "fingerprint", "fresh_layers", "insert_stored", "next_rowid", "rebuild", "snapshot",
    "unordered",
]

log = logging.getLogger(__name__)

#: One row per derived table: the fingerprint of the SQL that filled it and, for a trace layer,
#: the span count at which it was last complete.
META_TABLE = "restorelens_derived"


@cache
def fingerprint(name: str) -> str:
    """A short hash of the SQL defining ``name`` (the layer's file and every macro it calls) and,
    for a trace layer, of its inputs' SQL: a table written by other SQL is stale."""
    text = "".join(sql_text(part) for part in (name, *macros_of(name)))
    text += "".join(fingerprint(source) for source in TRACE_LAYERS.get(name, ()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _from(relation: str, name: str) -> str:
    # The layer's SQL reads `otel_traces`; a CTE of that name in front of it makes it read
    # `relation` instead (the incoming batch), so stored rows and views come from one definition.
    return f"with {TABLE} as (select * from {relation}) select * from ({sql_text(name)})"


def _from_tables(con: Any, name: str, *, dirty_only: bool) -> str:
    """Trace layer ``name`` computed from the stored tables of its inputs (CTEs named like them
    shadow any temporary view), for every trace or only those listed in ``rl_dirty``."""
    # Null keys (ids that are no hex; the collector rejects them) join nothing: those rows depend
    # on their own span alone and are simply written again with every batch.
    where = " where trace_key in (select trace_key from rl_dirty) or trace_key is null" if dirty_only else ""
    inputs = ", ".join(
        f"{source} as not materialized (select * from {_qualified(con, source)}{where})" for source in TRACE_LAYERS[name]
    )
    return f"with {inputs} select * from ({sql_text(name)})"


def _qualified(con: Any, name: str) -> str:
    """``name`` in the store's catalog, past any temporary view of that name."""
    catalog = str(_scalar(con, "select current_database()")).replace('"', '""')
    return f'"{catalog}".main.{name}'


def _stored_meta(con: Any) -> dict[str, tuple[str, int | None]]:
    """Derived table -> (fingerprint, spans) as recorded, for the tables that exist."""
    tables = {row[0] for row in con.execute("select table_name from duckdb_tables() where not temporary").fetchall()}
    if META_TABLE not in tables:
        return {}
    columns = set(con.sql(f"select * from {META_TABLE}").columns)
    spans = "spans" if "spans" in columns else "null"  # a store written before trace layers existed
    rows = con.execute(f"select name, fingerprint, {spans} from {META_TABLE}").fetchall()
    return {name: (value, count) for name, value, count in rows if name in tables}


def _span_counts(con: Any) -> dict[str, int]:
    rows = con.execute(
        f'select "SpanName", count(*) from {TABLE} where "SpanName" in $names group by all',
        {"names": sorted(set(SPAN_LAYERS.values()))},
    ).fetchall()
    return dict(rows)


def _scalar(con: Any, sql: str) -> Any:
    # fetchall, not fetchone: a result left unfinished blocks the connection's next relation
    return con.execute(sql).fetchall()[0][0]


def _total_spans(con: Any) -> int:
    return int(_scalar(con, f"select count(*) from {TABLE}"))


def fresh_layers(con: Any) -> frozenset[str]:
    """The derived tables a reader may use instead of computing the layer: written by today's SQL
    and complete (a typed table: as many rows as ``otel_traces`` has spans of its kind; a trace
    layer: its inputs fresh, and complete at the span count there is now)."""
    stored = _stored_meta(con)
    current = [name for name in DERIVED_LAYERS if name in stored and stored[name][0] == fingerprint(name)]
    if not current:
        return frozenset()
    fresh = set()
    if any(name in SPAN_LAYERS for name in current):
        counts = _span_counts(con)
        for name in (name for name in current if name in SPAN_LAYERS):
            if _scalar(con, f"select count(*) from {_qualified(con, name)}") == counts.get(SPAN_LAYERS[name], 0):
                fresh.add(name)
    total = _total_spans(con)
    for name in (name for name in current if name in TRACE_LAYERS):  # inputs first
        if stored[name][1] == total and fresh.issuperset(TRACE_LAYERS[name]):
            fresh.add(name)
    return frozenset(fresh)


def snapshot(con: Any) -> tuple[int, tuple[tuple[str, str, int | None], ...]]:
    """The span count and the derived-table records: cheap (milliseconds at 10M spans, where
    :func:`fresh_layers` counts every span kind), so a writer taking a file back can tell whether
    anyone else wrote to it meanwhile."""
    records = tuple(sorted((name, value, spans) for name, (value, spans) in _stored_meta(con).items()))
    return _total_spans(con), records


def _record(con: Any, name: str, spans: int | None) -> None:
    con.execute(
        f"insert or replace into {META_TABLE} values ($name, $fingerprint, $spans)",
        {"name": name, "fingerprint": fingerprint(name), "spans": spans},
    )


def rebuild(con: Any, names: tuple[str, ...] | None = None) -> None:
    """(Re)create the typed tables ``names`` (default: all) from every stored span, then every
    trace layer from the typed tables, and record their fingerprints. The caller decides the
    transaction (:func:`ensure` makes it one)."""
    register_macros(con)
    con.execute(f"create table if not exists {META_TABLE} "
                "(name varchar primary key, fingerprint varchar not null, spans ubigint)")
    con.execute(f"alter table {META_TABLE} add column if not exists spans ubigint")
    for name in names or tuple(SPAN_LAYERS):
        if name in SPAN_LAYERS:
            con.execute(f"create or replace table {_qualified(con, name)} as {sql_text(name)}")
            _record(con, name, None)
    total = _total_spans(con)
    for name in TRACE_LAYERS:
        con.execute(f"create or replace table {_qualified(con, name)} as {_from_tables(con, name, dirty_only=False)}")
        _record(con, name, total)


@contextlib.contextmanager
def unordered(con: Any) -> Iterator[None]:
    """Let DuckDB append the derived rows in any order while the block runs, from every thread at
    once rather than in its scan's order (faster: benchmarks/RESULTS.md). Their order means
    nothing: every layer that reads them joins or orders, and the analysis sorts what it returns.
    Enter it around the whole transaction: the setting outlives transactions, and it is put back
    once the transaction has ended, committed or rolled back (an aborted one would refuse it)."""
    con.execute("set preserve_insertion_order = false")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # a broken connection must not hide the block's error
            con.execute("reset preserve_insertion_order")


def ensure(con: Any) -> None:
    """Bring every derived table up to date on a write connection (missing, other SQL or incomplete).

    One transaction: a rebuild that fails (or a process killed on the way) leaves every table as
    it was, so what was stale stays stale. Never fails the writer: readers compute the stale layers
    from ``otel_traces`` (a warning says so).
    """
    fresh = fresh_layers(con)
    stale = tuple(name for name in DERIVED_LAYERS if name not in fresh)
    if stale:
        log.info("deriving %s from the stored spans", ", ".join(stale))
        with unordered(con):
            con.begin()
            try:
                rebuild(con, stale)
                con.commit()
            except Exception as exc:  # duckdb.Error and anything else the SQL raises
                with contextlib.suppress(Exception):  # a failed commit has ended the transaction already
                    con.rollback()
                log.warning("derived tables not rebuilt (%s); the analysis computes those layers instead", exc)


def next_rowid(con: Any) -> int:
    """The row id the next span appended to ``otel_traces`` gets: rows are only ever appended, and
    an append takes ids past every row there is (deleted rows included), so the spans stored from
    now on are exactly those with ``rowid >=`` this (a rolled-back append gives its ids back)."""
    return int(_scalar(con, f"select coalesce(max(rowid) + 1, 0) from {_qualified(con, TABLE)}"))


def insert_stored(con: Any, first_rowid: int, spans: int) -> None:
    """Add the derived rows of the ``spans`` spans stored at ``rowid >= first_rowid`` (all appended
    since :func:`next_rowid` said ``first_rowid``), and compute the trace layers again for every
    trace those spans belong to.

    The spans are read back from the store rather than from the Arrow tables they came in: DuckDB
    skips the row groups before ``first_rowid``, reads only the columns each layer needs, and the
    batches need not be kept in memory until the derivation.
    """
    register_macros(con)
    incoming = f"(select * from {_qualified(con, TABLE)} where rowid >= $first)"
    first = {"first": first_rowid}
    for name in SPAN_LAYERS:
        con.execute(f"insert into {_qualified(con, name)} {_from(incoming, name)}", first)
    total = _total_spans(con)
    # Every stored span is new (a first load): every trace is touched, and computing the trace
    # layers whole spares listing the touched traces and semi-joining on them.
    whole = spans == total
    if not whole:
        # the typed layers' trace_key, from the same macro
        con.execute(f"create or replace temp table rl_dirty as select distinct rl_trace_key(\"TraceId\") as trace_key "
                    f"from {incoming}", first)
    for name in TRACE_LAYERS:
        stored = _qualified(con, name)
        if whole:
            con.execute(f"delete from {stored}")
        else:
            con.execute(f"delete from {stored} where trace_key in (select trace_key from rl_dirty) or trace_key is null")
        con.execute(f"insert into {stored} {_from_tables(con, name, dirty_only=not whole)}")
        # Complete now only if complete before this batch, and by today's SQL: the touched traces
        # are all that was recomputed. A layer behind (a failed derivation, spans stored by another
        # writer) or written by other SQL keeps its record, and stays stale until a rebuild.
        con.execute(
            f"update {META_TABLE} set spans = $total "
            "where name = $name and fingerprint = $fingerprint and spans = $before",
            {"total": total, "name": name, "fingerprint": fingerprint(name), "before": total - spans},
        )
    if not whole:
        con.execute("drop table rl_dirty")
