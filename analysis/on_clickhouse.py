"""The analysis read from ClickHouse or chDB: the same layers and the same ``Analysis`` methods,
each query sent as the layers it needs (``clickhouse.layer_sql``) over ``otel_traces``.

ClickHouse computes a CTE again at every reference to it, and the layers reference each other many
times over (``wake_episodes`` alone reads the typed layers dozens of times as CTEs). So the layers
in ``KEPT_LAYERS`` (the typed and trace layers, and those several others read) are computed once per
``ClickHouseAnalysis``, when a query first needs them, into session temporary tables
(``CREATE TEMPORARY TABLE``, which ``readonly=2`` allows); the rest are CTEs. A typed layer reads
only its own span name, filtered before the spans are deduplicated, so the exporter's sort key
(``ServiceName, SpanName, Timestamp``) prunes the scan.

Read only, on purpose: a fleet's ClickHouse belongs to its operators. Nothing outlives the session:
the shared macros are inlined, the label mapping and the (absent) ``engine_metrics`` table are
CTEs, and the window (``sources.Window``) is a ``where`` on the CTE that reads the table, so
ClickHouse prunes partitions and granules by time before any layer runs.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from functools import cache
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from restorelens.analysis import clickhouse
from restorelens.analysis.layers import DERIVED_LAYERS, MACROS, PARAMETERISED, SHARED_LAYERS, SPAN_LAYERS, VIEW_LAYERS
from restorelens.analysis.queries import load_query
from restorelens.analysis.sources import Window, window_filter
from restorelens.analysis.views import Analysis, Slo, checked_labels
from restorelens.errors import InputError
from restorelens.sources import Source, password

__all__ = ["KEPT_LAYERS", "ClickHouseAnalysis", "connect"]

#: Layers computed once per analysis into session temporary tables, in dependency order: the typed
#: and trace layers (a collector's store keeps the same ones) and the others several layers read.
KEPT_LAYERS = tuple(name for name in VIEW_LAYERS if name in DERIVED_LAYERS or name in SHARED_LAYERS)
#: The temporary tables' engine: columns compressed on the server's temporary disk, not in its
#: memory, so a fleet-sized window's layers fit.
KEPT_ENGINE = "MergeTree order by tuple()"

_WORD = re.compile(r"\b[a-z_][a-z0-9_]*\b")
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
#: ``engine_metrics``' columns as ``collector/engine_metrics.sql`` types them: a fleet's ClickHouse
#: has no such table (restorelens's collector writes it), so its layers read none.
_NO_ENGINE_METRICS = ("select cast(null, 'Nullable(DateTime64(9))') as Timestamp, '' as Target, '' as MetricName, "
                      "cast(map(), 'Map(String, String)') as Labels, cast(null, 'Nullable(Float64)') as Value "
                      "where 0")


def _param_type(value: Any) -> str:
    if isinstance(value, bool):
        return "Bool"
    if isinstance(value, int):
        return "Int64"
    if isinstance(value, float):
        return "Float64"
    if isinstance(value, (list, tuple)):
        return "Array(String)"
    return "String"


_SETTINGS = ", ".join(f"{name} = {value}" for name, value in clickhouse.SETTINGS.items())


class _Chdb:
    """The embedded engine on a data folder."""

    def __init__(self, path: str) -> None:
        from chdb import session

        self.name = f"chdb:{path}"
        self._session = session.Session(path)

    def frame(self, sql: str, parameters: Mapping[str, Any]) -> pl.DataFrame:
        import pyarrow as pa

        answer = self._session.query(f"{sql}\nsettings {_SETTINGS}", "ArrowStream",
                                     params=clickhouse.chdb_parameters(parameters) or None)
        return pl.from_arrow(pa.ipc.open_stream(io.BytesIO(answer.bytes())).read_all())  # type: ignore[return-value]

    def execute(self, sql: str, parameters: Mapping[str, Any]) -> None:
        self._session.query(f"{sql}\nsettings {_SETTINGS}", params=clickhouse.chdb_parameters(parameters) or None)

    def close(self) -> None:
        self._session.close()


class _Server:
    """A ClickHouse server's HTTP interface (clickhouse-connect), read only."""

    def __init__(self, source: Source) -> None:
        import clickhouse_connect

        self.name = source.describe()
        self._client = clickhouse_connect.get_client(
            host=source.host, port=source.port, username=source.user, password=password(),
            database=source.database, secure=source.secure, settings={**clickhouse.SETTINGS, "readonly": 2},
        )

    def frame(self, sql: str, parameters: Mapping[str, Any]) -> pl.DataFrame:
        return pl.from_arrow(self._client.query_arrow(sql, parameters=dict(parameters)))  # type: ignore[return-value]

    def execute(self, sql: str, parameters: Mapping[str, Any]) -> None:
        self._client.command(sql, parameters=dict(parameters))

    def close(self) -> None:
        self._client.close()


def connect(source: Source) -> Any:
    """The client for a chdb or clickhouse ``source``; an unreachable one is a one-line ``InputError``."""
    if source.kind == "chdb" and not Path(source.path).is_dir():
        # chDB would make the folder: reading must not create anything
        raise InputError(source.describe(), "no such chDB data folder")
    try:
        return _Chdb(source.path) if source.kind == "chdb" else _Server(source)
    except ImportError as exc:
        raise InputError(source.describe(), f"needs the clickhouse extra (pip install 'restorelens[clickhouse]'): "
                                            f"{exc.name} is missing") from None
    except Exception as exc:  # the drivers raise their own types; the message names what failed
        raise InputError(source.describe(), f"cannot connect: {str(exc).splitlines()[0]}") from None


class ClickHouseAnalysis(Analysis):
    """``Analysis`` over a ClickHouse client: every method of the DuckDB one, same frames."""

    def __init__(self, client: Any, *, database: str = "default", window: Window = Window(),
                 slo: Slo | None = None, labels: Mapping[str, str] | None = None) -> None:
        # no DuckDB connection: the layers are composed per query instead of registered
        self.con = None  # type: ignore[assignment]
        self.client = client
        self.database = database
        self.window = window
        self.slo = slo or Slo()
        # always: a layer kept in a temporary table costs less than the same layer as a CTE, which
        # ClickHouse computes at every reference
        self.materialize = True
        self.labels = checked_labels("labels", labels or {})
        self.stored_layers = frozenset()
        self._summary_materialized_for = None
        self._macros = _macro_bodies()
        #: The layers computed so far into this session's temporary tables (``KEPT_LAYERS``).
        self.kept: list[str] = []

    # --- how a query reaches ClickHouse ---------------------------------------------------------

    def _frame(self, sql: str, parameters: dict[str, Any] | None = None) -> pl.DataFrame:
        return _as_duckdb_gives(self._run(*self._compose(sql, parameters or {})), sql, parameters or {})

    def _run(self, text: str, values: dict[str, Any]) -> pl.DataFrame:
        try:
            return self.client.frame(text, values)
        except Exception as exc:  # the drivers raise their own types; the line names what failed
            raise InputError(self.client.name, f"cannot decompose its spans: {str(exc).strip().splitlines()[0]}") \
                from None

    def _compose(self, sql: str, parameters: Mapping[str, Any], extra: Sequence[tuple[str, str]] = ()) -> tuple[str, dict[str, Any]]:
        """``sql`` (DuckDB dialect, naming layers) as one ClickHouse query over the table and the
        kept layers, computing those it needs first."""
        values = dict(parameters)
        types = {name: _param_type(value) for name, value in values.items()}
        body = self._inline(_to_clickhouse(sql, types))
        needed = _layers_needed(sql + " " + " ".join(text for _, text in extra))
        self._keep(needed)
        return self._with(body, values, needed, extra)

    def _with(self, body: str, parameters: Mapping[str, Any], needed: set[str],
              extra: Sequence[tuple[str, str]] = (), span_name: str | None = None) -> tuple[str, dict[str, Any]]:
        """``body`` (ClickHouse) under the CTEs it reads: the window's spans (only ``span_name``'s,
        when given), the label mapping and every needed layer not kept in a table."""
        table = f"{self.database}.otel_traces"
        where, values = window_filter(self.window, dialect="clickhouse", table=table)
        if span_name is not None:
            # before the dedupe: a span's repeats share its name, and the sort key prunes by it
            where += " and SpanName = {rl_span_name:String}"
            values["rl_span_name"] = span_name
        values.update(parameters)
        # one row per span: the Collector delivers at least once, and its MergeTree keeps repeats
        ctes = [("otel_traces", f"select * from {table} where {where} limit 1 by TraceId, SpanId"),
                ("rl_label_map", self._label_map(values)),
                ("engine_metrics", _NO_ENGINE_METRICS)]
        ctes += [(name, _layer_text(name)) for name in VIEW_LAYERS if name in needed and name not in self.kept]
        ctes += list(extra)
        composed = "with " + ",\n".join(f"{name} as ({text})" for name, text in ctes) + f"\nselect * from ({body})"
        return composed, values

    def _keep(self, needed: set[str]) -> None:
        """Compute each kept layer in ``needed`` not yet computed into a temporary table, in
        dependency order (each reads the ones kept before it)."""
        for name in KEPT_LAYERS:
            if name not in needed or name in self.kept:
                continue
            reads = _layers_needed(load_query(name).sql) - {name}
            text, values = self._with(_layer_text(name), {}, reads, span_name=SPAN_LAYERS.get(name))
            try:
                self.client.execute(f"create temporary table {name} engine = {KEPT_ENGINE} as {text}", values)
            except Exception as exc:  # the drivers raise their own types; the line names what failed
                raise InputError(self.client.name, f"cannot decompose its spans ({name}): "
                                                   f"{str(exc).strip().splitlines()[0]}") from None
            self.kept.append(name)

    def _label_map(self, values: dict[str, Any]) -> str:
        if not self.labels:
            return "select '' as label, '' as attribute where 0"
        values["rl_label_names"] = list(self.labels)
        values["rl_label_attributes"] = list(self.labels.values())
        return ("select pair.1 as label, pair.2 as attribute from (select arrayJoin(arrayZip("
                "{rl_label_names:Array(String)}, {rl_label_attributes:Array(String)})) as pair)")

    def _inline(self, sql: str) -> str:
        """Every ``rl_*`` macro call replaced by its ClickHouse body (nothing is created on the server)."""
        return _inline_macros(sql, self._macros) if any(m in sql for m in MACROS) else sql

    def _has_spans(self, span_name: str) -> bool:
        text, values = self._with("select count() > 0 as present from (select 1 from otel_traces limit 1)", {}, set(),
                                  span_name=span_name)
        return bool(self._run(text, values)["present"][0])

    def close(self) -> None:
        self.client.close()

    # --- the methods whose DuckDB form keeps state on the connection ------------------------------

    def paired_differences(self) -> pl.DataFrame:
        summary = load_query("policy_summary")
        types = {name: _param_type(value) for name, value in self.slo.parameters().items()}
        extra = [("policy_summary", self._inline(_to_clickhouse(summary.sql, types)))]
        frame = self._run(*self._compose(load_query("paired_differences").sql, self.slo.parameters(), extra))
        return frame.sort("workload", "policy", "baseline", "seed", nulls_last=True)

    def traces_for_request(self, request_id: str) -> list[str]:
        frame = self._frame(load_query("traces_for_request").sql, {"request_id": request_id})
        return frame[frame.columns[0]].to_list()


_EMPTY_STORE: list[Any] = []


def _duckdb_schema(sql: str, parameters: Mapping[str, Any]) -> pl.Schema:
    """The columns and types DuckDB gives ``sql``: run on an empty in-memory store (cached per query
    text), so both engines hand back the same frame types (ClickHouse's flags are UInt8, its
    instants carry UTC, its counts are unsigned)."""
    return _schema_of(sql, tuple(sorted((name, repr(value)) for name, value in parameters.items())))


@cache
def _schema_of(sql: str, parameters: tuple[tuple[str, str], ...]) -> pl.Schema:
    import ast

    import duckdb

    from restorelens.collector.schema import create_schema

    if not _EMPTY_STORE:
        con = duckdb.connect()
        create_schema(con)
        _EMPTY_STORE.append(Analysis(con))
    values = {name: ast.literal_eval(text) for name, text in parameters}
    return _EMPTY_STORE[0]._frame(f"select * from ({sql}) limit 0", values or None).schema


def _as_duckdb_gives(frame: pl.DataFrame, sql: str, parameters: Mapping[str, Any]) -> pl.DataFrame:
    schema = _duckdb_schema(sql, parameters)
    if list(schema) != frame.columns:
        return frame
    columns = []
    for name, dtype in schema.items():
        column = frame[name]
        if isinstance(dtype, pl.Datetime) and isinstance(column.dtype, pl.Datetime) and column.dtype.time_zone:
            column = column.dt.replace_time_zone(None)
        if column.dtype != dtype:
            try:
                column = column.cast(dtype, strict=False)
            except pl.exceptions.InvalidOperationError:
                pass  # an internal integer key (UInt128 arrives as bytes): no page reads it as a number
        columns.append(column)
    return pl.DataFrame(columns)


def _layers_needed(sql: str) -> set[str]:
    """The layers ``sql`` names, with every layer they read, transitively."""
    return set(_reads(_COMMENT.sub(" ", sql)))


@cache
def _reads(sql: str) -> frozenset[str]:
    known = set(VIEW_LAYERS) | set(PARAMETERISED)
    needed: set[str] = set()
    pending = [word for word in _WORD.findall(sql) if word in known]
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        if name in VIEW_LAYERS:
            pending += [word for word in _WORD.findall(_COMMENT.sub(" ", load_query(name).sql)) if word in known]
    return frozenset(needed)


_MACRO = re.compile(r"create function if not exists (\w+) as \(([^)]*)\) ->(.*)", re.DOTALL)


def _to_clickhouse(sql: str, types: Mapping[str, str]) -> str:
    """``clickhouse.to_clickhouse`` with each ``$name`` a typed query parameter ``{name:Type}``."""
    try:
        return clickhouse.to_clickhouse(sql, types)
    except KeyError as exc:
        raise InputError("query", f"parameter ${exc.args[0]} has no value") from None


@cache
def _layer_text(name: str) -> str:
    """A layer's ClickHouse text with its macros inlined, made once per process: transpiling and
    inlining cost more than a small query itself."""
    text = clickhouse.layer_sql(name)
    return _inline_macros(text, _macro_bodies()) if any(m in text for m in MACROS) else text


@cache
def _macro_bodies() -> dict[str, tuple[tuple[str, ...], str]]:
    """Each macro's parameters and ClickHouse body, from ``sql/clickhouse/<macro>.sql``."""
    bodies = {}
    for definition in clickhouse.macro_definitions():
        code = "\n".join(line for line in definition.splitlines() if not line.lstrip().startswith("--"))
        match = _MACRO.search(code)
        if match is None:
            raise InputError("analysis/sql/clickhouse", f"not a `create function NAME as (args) -> body`: {code[:60]}")
        name, parameters, body = match.groups()
        bodies[name] = (tuple(p.strip() for p in parameters.split(",")), body.strip())
    return bodies


def _inline_macros(sql: str, bodies: Mapping[str, tuple[tuple[str, ...], str]]) -> str:
    """Every call of a macro in ``sql`` replaced by its body with the arguments put in."""
    import sqlglot
    from sqlglot import exp

    parsed = {name: (parameters, sqlglot.parse_one(body, read="clickhouse")) for name, (parameters, body) in bodies.items()}
    tree = sqlglot.parse_one(sql, read="clickhouse")
    for node in reversed(list(tree.walk())):
        if isinstance(node, exp.Anonymous) and str(node.this) in parsed:
            parameters, body = parsed[str(node.this)]
            arguments = dict(zip(parameters, node.expressions, strict=True))
            expanded = body.copy()
            for column in list(expanded.find_all(exp.Column)):
                if not column.table and column.name in arguments:
                    column.replace(exp.Paren(this=arguments[column.name].copy()))
            node.replace(exp.Paren(this=expanded))
    return tree.sql(dialect="clickhouse")
