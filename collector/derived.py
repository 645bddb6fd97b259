"""Typed span tables kept next to ``otel_traces``, written for the spans the store takes in.

The analysis' first layers (``analysis/sql/typed_*.sql``) are a pure function of each span row:
typed attributes, integer keys, event instants. Deriving them on every read costs a third of a
decomposition (10M spans: ~6 s of ~20 s on two cores), so the store keeps them as tables of the
same name, filled after the spans commit (``SpanStore`` decides when: at once, or in bulk) by
running the new spans through the very same SQL. The analysis reads a table only while it is fresh (:func:`fresh_layers`): written by the
SQL it would run itself (fingerprint) and holding one row per span of its kind (counts), so a
store from an older version, or one whose spans were added or removed behind the collector's back,
is still decomposed exactly (from ``otel_traces``) until a writer opens it and rebuilds the tables
(:func:`ensure`). An edit of stored spans that keeps every count is not detected: the collector
never updates a span, and a hand-edited store should be rebuilt (``rebuild``).

The tables are named in the store's own catalog (``_qualified``): a reader's temporary view of the
same name (``Analysis`` registers one when a table is stale) must never receive the rows.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
from functools import cache
from pathlib import Path
from typing import Any

from restorelens.collector.schema import TABLE
from restorelens.spans import (
    SPAN_CLIENT_REQUEST,
    SPAN_GATE_REQUEST,
    SPAN_GATE_RESTORE,
    SPAN_HTTP_POST,
    SPAN_LLM_REQUEST,
    SPAN_MODELCLAIM_STATE,
    SPAN_MODELCLAIM_WAKE,
)

__all__ = [
    "DERIVED_LAYERS", "META_TABLE", "ensure", "fingerprint", "fresh_layers", "insert_table", "rebuild", "registered",
]

log = logging.getLogger(__name__)

#: Derived table (= analysis layer) -> the span name each of its rows comes from (one row per span).
DERIVED_LAYERS = {
    "typed_client_requests": SPAN_CLIENT_REQUEST,
    "typed_http_attempts": SPAN_HTTP_POST,
    "typed_gate_requests": SPAN_GATE_REQUEST,
    "typed_engine_requests": SPAN_LLM_REQUEST,
    "typed_gate_restores": SPAN_GATE_RESTORE,
    "typed_model_wakes": SPAN_MODELCLAIM_WAKE,
    "typed_model_states": SPAN_MODELCLAIM_STATE,
}

#: One row per derived table: the fingerprint of the SQL that filled it.
META_TABLE = "restorelens_derived"


@cache
def _definition(name: str) -> str:
    # Located without importing restorelens.analysis (its package pulls in polars): the collector
    # and receiver need only the SQL text.
    spec = importlib.util.find_spec("restorelens.analysis")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("restorelens.analysis is not installed")
    folder = Path(next(iter(spec.submodule_search_locations)))
    return (folder / "sql" / f"{name}.sql").read_text(encoding="utf-8")


def fingerprint(name: str) -> str:
    """A short hash of the SQL defining ``name``: a table written by other SQL is stale."""
    return hashlib.sha256(_definition(name).encode()).hexdigest()[:16]


def _from(relation: str, name: str) -> str:
    # The layer's SQL reads `otel_traces`; a CTE of that name in front of it makes it read
    # `relation` instead (the incoming batch), so stored rows and views come from one definition.
    return f"with {TABLE} as (select * from {relation}) select * from ({_definition(name)})"


def _qualified(con: Any, name: str) -> str:
    """``name`` in the store's catalog, past any temporary view of that name."""
    row = con.execute("select current_database()").fetchone()
    catalog = str(row[0]).replace('"', '""') if row else "main"
    return f'"{catalog}".main.{name}'


def _stored_fingerprints(con: Any) -> dict[str, str]:
    tables = {row[0] for row in con.execute("select table_name from duckdb_tables() where not temporary").fetchall()}
    if META_TABLE not in tables:
        return {}
    rows = con.execute(f"select name, fingerprint from {META_TABLE}").fetchall()
    return {name: value for name, value in rows if name in tables}


def _span_counts(con: Any) -> dict[str, int]:
    rows = con.execute(
        f'select "SpanName", count(*) from {TABLE} where "SpanName" in $names group by all',
        {"names": sorted(set(DERIVED_LAYERS.values()))},
    ).fetchall()
    return dict(rows)


def fresh_layers(con: Any) -> frozenset[str]:
    """The derived tables a reader may use instead of computing the layer: written by today's SQL
    and complete (as many rows as ``otel_traces`` has spans of their kind)."""
    stored = _stored_fingerprints(con)
    candidates = [name for name in DERIVED_LAYERS if stored.get(name) == fingerprint(name)]
    if not candidates:
        return frozenset()
    counts = _span_counts(con)
    fresh = set()
    for name in candidates:
        row = con.execute(f"select count(*) from {_qualified(con, name)}").fetchone()
        if row is not None and row[0] == counts.get(DERIVED_LAYERS[name], 0):
            fresh.add(name)
    return frozenset(fresh)


def rebuild(con: Any, names: tuple[str, ...] | None = None) -> None:
    """(Re)create derived tables from every stored span, and record their fingerprints."""
    con.execute(f"create table if not exists {META_TABLE} (name varchar primary key, fingerprint varchar not null)")
    for name in names or tuple(DERIVED_LAYERS):
        con.execute(f"create or replace table {_qualified(con, name)} as {_definition(name)}")
        con.execute(
            f"insert or replace into {META_TABLE} values ($name, $fingerprint)",
            {"name": name, "fingerprint": fingerprint(name)},
        )


def ensure(con: Any) -> None:
    """Bring every derived table up to date on a write connection (missing, other SQL or incomplete).

    Never fails the writer: a table that cannot be rebuilt stays stale and readers compute that
    layer from ``otel_traces`` (a warning says so).
    """
    stale = tuple(name for name in DERIVED_LAYERS if name not in fresh_layers(con))
    if stale:
        log.info("deriving %s from the stored spans", ", ".join(stale))
        try:
            rebuild(con, stale)
        except Exception as exc:  # duckdb.Error and anything else the SQL raises
            log.warning("derived tables not rebuilt (%s); the analysis computes those layers instead", exc)


def insert_table(con: Any, table: Any) -> None:
    """Add the derived rows of the spans in an Arrow ``table`` in ``otel_traces`` layout (stored).

    The batch is converted once into a temporary table: reading Arrow's MAP columns is the costly
    part, and the seven layers would otherwise each convert it again.
    """
    with registered(con, "rl_derive_incoming", table):
        con.execute("create or replace temp table rl_derive as select * from rl_derive_incoming")
    for name in DERIVED_LAYERS:
        con.execute(f"insert into {_qualified(con, name)} {_from('rl_derive', name)}")
    con.execute("drop table rl_derive")


@contextlib.contextmanager
def registered(con: Any, name: str, table: Any) -> Any:
    """``table`` (Arrow) visible to SQL as ``name`` for the block. When the block fails, the
    transaction may be aborted and unregistering would raise too: that error is dropped so the
    block's own propagates."""
    con.register(name, table)
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            con.unregister(name)
        raise
    con.unregister(name)
