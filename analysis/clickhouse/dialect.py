"""The analysis's layers on ClickHouse: each ``analysis/sql`` file, written once for DuckDB,
transpiled by sqlglot with the few rewrites where the two engines mean different things.

One source of truth per layer: the DuckDB text is the layer, and this module is the whole of what
differs on ClickHouse (docs/design.md, "One analysis, two engines"). The rules:

- every star is spelled out and every column named with its table (sqlglot's ``qualify_columns``,
  from ``BASE_COLUMNS`` and the earlier layers' columns): ClickHouse names a ``t.*`` column
  ``t.c`` when another table of the join has a ``c``, and may bind a bare ``c`` to a select alias;
  a selected ``t.c`` is then named ``c`` outright;
- a missing ``Map`` key is NULL in DuckDB and ``''`` in ClickHouse: ``m['k']`` becomes
  ``if(mapContains(m, 'k'), m['k'], NULL)``;
- a list index past the end (or NULL) is NULL in DuckDB and the type's default in ClickHouse:
  ``a[i]`` (and a map looked up by a column) becomes ``arrayElementOrNull(a, i)``;
- ``try_cast`` of text becomes ``accurateCastOrNull`` of the trimmed text, and to an integer reads
  a decimal or exponent form rounded half away from zero, as DuckDB does (``'3.5'`` is 4);
- ``try(e)`` (sqlglot drops it): each cast inside becomes ``accurateCastOrNull`` (NaN, infinity,
  out of range: NULL), and a ``bigint`` sum or difference is made in 128 bits, NULL if it overflows;
- ``round(x)`` is half away from zero in DuckDB, half to even for a ClickHouse float: spelt out;
- ``lead``/``lag`` past the partition's edge are NULL in DuckDB, the type's default in
  ClickHouse: their argument is made ``Nullable``;
- ``printf('%0Nx', k)`` (ClickHouse's printf takes no 128-bit integer) becomes
  ``leftPad(lower(hex(k)), N, '0')``;
- DuckDB's own functions get their ClickHouse forms: ``epoch_ns`` -> ``toUnixTimestamp64Nano``,
  ``make_timestamp_ns`` -> ``fromUnixTimestamp64Nano(ns, 'UTC')``, ``map_contains`` ->
  ``mapContains``, ``list_position`` -> ``indexOf`` with 0 as NULL, ``arg_min_null`` -> ``argMin``
  of a tuple (a NULL is a value), ``bool_or`` -> ``toBool(max)``, ``list_append`` ->
  ``arrayPushBack``, ``struct_pack`` -> ``tuple``;
- a CTE's ``materialized`` hint is dropped (ClickHouse has no syntax for it);
- a ``$name`` parameter becomes the query parameter ``{name:Type}`` (the caller's types, or
  ``PARAMETER_TYPES`` for the parameterised queries);
- the shared macros (``rl_*``) have a ClickHouse definition each, in ``sql/clickhouse/``;
- ``SETTINGS``, with every query (``analysis.py`` appends them), or on the session before any
  view is created when layers are views (a view's column types are fixed then): unmatched join
  columns are NULL, an aggregate of no rows is NULL, a cast keeps
  ``Nullable``, a name inside an expression is the column before any alias.

What sqlglot's own transpilation already gets right, and the tests hold it to: ``filter (where)``,
``group by all``, lambdas (``list_filter``, ``list_transform``), ``with recursive``, named windows,
``asof left join`` (each has an equality condition), ``greatest`` (ignores NULLs in both).
Not carried over: ``round(x, n)`` (no layer uses it) stays ClickHouse's; ``try_cast`` of hex (``'0x1F'``) or ``_``-grouped digits to an integer (NULL on
ClickHouse; the ids' hex goes through the ``rl_*_key`` macros), an HTTP date outside ClickHouse's
``DateTime`` range (1970 to 2106) in ``rl_retry_after_s``.

Nothing here runs a query: ``layer_sql`` and ``query_sql`` give text, ``SETTINGS`` the session
settings and ``macro_definitions`` the functions to create first (the exporter's table is
``restorelens.store``'s ``EXPORTER_DDL``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.optimizer.qualify_columns import qualify_columns
from sqlglot.schema import MappingSchema

from restorelens.analysis.layers import MACROS, VIEW_LAYERS, macros_of, sql_text
from restorelens.store import COLUMNS, ENGINE_METRICS_COLUMNS, ENGINE_METRICS_TABLE, TABLE

__all__ = ["BASE_COLUMNS", "PARAMETER_TYPES", "SETTINGS", "chdb_parameters", "layer_sql",
           "macro_definitions", "query_sql", "to_clickhouse"]

#: Session settings every layer assumes on ClickHouse: set them on the session (``SET``) before
#: creating the layers' views, whose column types are fixed when they are created.
SETTINGS = {
    # an outer join's unmatched side is NULL, as in SQL and DuckDB (ClickHouse fills defaults)
    "join_use_nulls": 1,
    # an aggregate over no rows is NULL (sum, max), as in SQL
    "aggregate_functions_null_for_empty": 1,
    # casts of a Nullable keep it Nullable
    "cast_keep_nullable": 1,
    # ``max(x) as x``: the x inside is the column, as in SQL, not the alias being defined
    "prefer_column_name_to_alias": 1,
}

#: ClickHouse type of each ``$parameter`` the parameterised queries take (``query_sql``).
PARAMETER_TYPES = {
    "trace_id": "String",
    "request_id": "String",
    "slo_ttft_s": "Float64",
    "slo_e2e_s": "Float64",
    "borrow_phase": "String",
    "contention_phase": "String",
    "excluded_phases": "Array(String)",
}

#: DuckDB type names in ``try_cast`` -> ClickHouse's.
_TYPES = {
    exp.DataType.Type.BIGINT: "Int64",
    exp.DataType.Type.INT: "Int32",
    exp.DataType.Type.DOUBLE: "Float64",
    exp.DataType.Type.UBIGINT: "UInt64",
    exp.DataType.Type.UINT128: "UInt128",
    exp.DataType.Type.BOOLEAN: "Bool",
    exp.DataType.Type.VARCHAR: "String",
}


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


#: DuckDB functions sqlglot passes through by name -> (ClickHouse name), same arguments.
_RENAMED = {"epoch_ns": "toUnixTimestamp64Nano", "map_contains": "mapContains"}


def _round_half_away(value: exp.Expression) -> exp.Expression:
    """DuckDB's ``round(x)`` (half away from zero) in ClickHouse, whose ``round`` of a float rounds
    half to even: the whole part plus the sign when the fraction is at least a half (exact: a
    float minus its truncation loses nothing)."""
    whole = _call("trunc", value.copy())
    half = exp.GTE(this=_call("abs", exp.Sub(this=value.copy(), expression=whole.copy())),
                   expression=exp.Literal.number("0.5"))
    return exp.Add(this=whole, expression=exp.Mul(this=_call("sign", value.copy()), expression=exp.paren(half)))


#: ClickHouse's integer types among ``_TYPES``' targets.
_INTEGERS = ("Int32", "Int64", "UInt64", "UInt128")


def _try_cast(value: exp.Expression, target: str) -> exp.Expression:
    """DuckDB's ``try_cast`` of text: NULL for what does not parse, as ``accurateCastOrNull``
    gives, but DuckDB reads more than ClickHouse: surrounding spaces, and for an integer a decimal
    or exponent form, rounded half away from zero (``'3.5'`` is 4). The text is trimmed, and an
    integer that does not parse as one is read as a float and rounded."""
    if target not in (*_INTEGERS, "Float64"):
        return _call("accurateCastOrNull", value.copy(), exp.Literal.string(target))
    text = _call("trimBoth", _call("toString", value.copy()))
    direct = _call("accurateCastOrNull", text, exp.Literal.string(target))
    if target == "Float64":
        return direct
    as_float = _call("accurateCastOrNull", text.copy(), exp.Literal.string("Float64"))
    return exp.Coalesce(this=direct, expressions=[
        _call("accurateCastOrNull", _round_half_away(as_float), exp.Literal.string(target))])


def _is_bigint_cast(node: exp.Expression) -> bool:
    """A cast to ``bigint``, as written or as ``_try`` has just made it."""
    if isinstance(node, exp.Cast):
        return node.to.this == exp.DataType.Type.BIGINT
    return isinstance(node, exp.Anonymous) and node.name == "accurateCastOrNull" and node.expressions[1].name == "Int64"


def _try(node: exp.Try) -> exp.Expression:
    """DuckDB's ``try(e)``: NULL where ``e`` would fail. ClickHouse fails on a cast of NaN or
    infinity to an integer and wraps an integer sum that overflows: each cast inside becomes
    ``accurateCastOrNull`` (out of range, NaN, infinity: NULL) and a ``bigint`` sum or difference
    is computed in 128 bits and kept only when it fits 64."""
    body = node.this.copy()
    for cast in list(body.find_all(exp.Cast)):
        target = _TYPES.get(cast.to.this)
        if target is not None:
            cast.replace(_call("accurateCastOrNull", cast.this.copy(), exp.Literal.string(target)))
    if isinstance(body, (exp.Add, exp.Sub)) and any(_is_bigint_cast(side) for side in (body.this, body.expression)):
        body.set("this", _call("toInt128", body.this.copy()))
        return _call("accurateCastOrNull", body, exp.Literal.string("Int64"))
    return body


def _functions(node: exp.Expression) -> exp.Expression:
    """First pass: functions and casts (their arguments are rewritten before any index is)."""
    if isinstance(node, exp.TryCast):
        target = _TYPES.get(node.to.this)
        if target is not None:
            return _try_cast(node.this, target)
    if isinstance(node, exp.Try):
        return _try(node)
    if isinstance(node, exp.Round) and node.args.get("decimals") is None:
        return _round_half_away(node.this)
    if isinstance(node, (exp.Lead, exp.Lag)) and node.args.get("default") is None:
        # past the partition's edge: NULL in DuckDB, the type's default in ClickHouse unless the
        # argument is Nullable
        node.set("this", _call("toNullable", node.this.copy()))
        return node
    if isinstance(node, exp.Anonymous):
        name = str(node.this).lower()
        args = [arg.copy() for arg in node.expressions]
        if name in _RENAMED:
            return _call(_RENAMED[name], *args)
        if name == "make_timestamp_ns":  # DuckDB's timestamps are UTC
            return _call("fromUnixTimestamp64Nano", *args, exp.Literal.string("UTC"))
        if name == "list_position":  # 1-based in both; absent is NULL in DuckDB, 0 in ClickHouse
            return _call("nullIf", _call("indexOf", *args), exp.Literal.number(0))
        if name == "arg_min_null":  # a NULL argument is a value to return, not a row to skip: wrap it
            wrapped = _call("argMin", _call("tuple", args[0]), args[1])
            return _call("tupleElement", wrapped, exp.Literal.number(1))
        if name == "printf" and len(args) == 2 and isinstance(args[0], exp.Literal):
            hex_width = re.fullmatch(r"%0(\d+)x", args[0].this)
            if hex_width:  # ClickHouse's printf takes no 128-bit integer: its hex, padded
                return _call("leftPad", _call("lower", _call("hex", args[1])), exp.Literal.number(hex_width[1]),
                             exp.Literal.string("0"))
    if isinstance(node, exp.LogicalOr):
        return _call("toBool", _call("max", node.this.copy()))
    if isinstance(node, exp.ArrayAppend):
        return _call("arrayPushBack", node.this.copy(), node.expression.copy())
    if isinstance(node, exp.Struct):
        return _call("tuple", *(getattr(e, "expression", e).copy() for e in node.expressions))
    if isinstance(node, exp.Select):
        # a selected ``t.c`` is named ``c`` in SQL; ClickHouse may name it ``t.c``, and a later
        # ``c`` then finds no column: name each one outright
        for item in node.expressions:
            if isinstance(item, exp.Column) and item.table and not isinstance(item.this, exp.Star):
                item.replace(exp.alias_(item.copy(), item.name, quoted=False))
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)  # a DuckDB planning hint ClickHouse has no syntax for
    return node


def _indexes(node: exp.Expression) -> exp.Expression:
    """Second pass: a map key or list index past what is there is NULL, as in DuckDB."""
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1:
        container, key = node.this, node.expressions[0]
        bare = exp.Bracket(this=container.copy(), expressions=[key.copy()])
        if isinstance(key, exp.Literal) and key.is_string:  # a map lookup
            return exp.If(this=_call("mapContains", container.copy(), key.copy()), true=bare, false=exp.Null())
        # sqlglot keeps a literal index 0-based (it adds the dialect's offset back on output); any
        # other index is the 1-based position DuckDB and ClickHouse both count in
        position = exp.Literal.number(int(key.this) + 1) if isinstance(key, exp.Literal) else key.copy()
        return _call("arrayElementOrNull", container.copy(), position)
    return node


#: Columns of the tables the layers read besides each other: the exporter's ``otel_traces``, the
#: run-label map and the scraped engine metrics (only names matter: a star is expanded to them).
BASE_COLUMNS = {
    TABLE: COLUMNS,
    "rl_label_map": ("label", "attribute"),
    ENGINE_METRICS_TABLE: ENGINE_METRICS_COLUMNS,
}


def _qualified(tree: exp.Expression) -> exp.Expression:
    """Every star expanded to the columns it stands for and every column named with its table.

    ClickHouse names a ``t.*`` column ``t.c`` when another table of the join has a ``c`` too, and
    a later ``c`` then finds nothing; an unqualified ``c`` may also resolve to a select alias of
    that name. Spelled out and qualified, each reference means what it means in DuckDB."""
    ctes = {cte.alias for cte in tree.find_all(exp.CTE)}
    sources = {table.name for table in tree.find_all(exp.Table)} - ctes
    columns = _table_columns(tuple(sorted(sources)))
    schema = {name: dict.fromkeys(names, "text") for name, names in columns.items()}
    return qualify_columns(tree, MappingSchema(schema, dialect="duckdb", normalize=False), expand_stars=True)


@cache
def _table_columns(names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    known = {}
    for name in names:
        if name in BASE_COLUMNS:
            known[name] = BASE_COLUMNS[name]
        elif name in VIEW_LAYERS:
            known[name] = tuple(_qualified(sqlglot.parse_one(sql_text(name), read="duckdb")).named_selects)
    return known


def to_clickhouse(sql: str, types: Mapping[str, str] | None = None) -> str:
    """DuckDB text -> ClickHouse text (one statement). Each ``$name`` parameter becomes the
    ClickHouse query parameter ``{name:Type}`` of ``types[name]`` (a ``KeyError`` if missing), so
    values travel beside the text, never inside it."""
    tree = _qualified(sqlglot.parse_one(sql, read="duckdb"))
    for placeholder in list(tree.find_all(exp.Placeholder)):
        if placeholder.name:
            kind = exp.DataType.build((types or {})[placeholder.name], dialect="clickhouse")
            placeholder.set("kind", kind)
    for rewrite in (_functions, _indexes):
        tree = _bottom_up(tree, rewrite)
    return tree.sql(dialect="clickhouse")


def _bottom_up(tree: exp.Expression, rewrite: Any) -> exp.Expression:
    """``rewrite`` applied to every node, children before their parent (a rewrite copies its
    arguments, so they must be in their final form by then)."""
    for node in reversed(list(tree.walk())):
        new = rewrite(node)
        if new is not node:
            if node is tree:
                tree = new
            else:
                node.replace(new)
    return tree


@cache
def layer_sql(name: str) -> str:
    """The ClickHouse text of ``analysis/sql/<name>.sql``."""
    return to_clickhouse(sql_text(name))


def query_sql(name: str, types: Mapping[str, str] | None = None) -> str:
    """The ClickHouse text of the parameterised query ``analysis/sql/<name>.sql``, its ``$name``
    parameters typed by ``types`` (name -> ClickHouse type; ``PARAMETER_TYPES`` when not given).
    Run it with the values as query parameters (``chdb_parameters`` formats them for chDB)."""
    return _query_sql(name, tuple(sorted((PARAMETER_TYPES if types is None else types).items())))


@cache
def _query_sql(name: str, types: tuple[tuple[str, str], ...]) -> str:
    return to_clickhouse(sql_text(name), dict(types))


def chdb_parameters(values: Mapping[str, Any]) -> dict[str, str]:
    """Parameter values as chDB takes them: ClickHouse's escaped text of each (a list as an
    ``Array`` literal). clickhouse-connect takes the Python values themselves."""
    return {name: _parameter_text(value) for name, value in values.items()}


def _parameter_text(value: Any, *, nested: bool = False) -> str:
    if value is None:
        return "NULL" if nested else "\\N"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_parameter_text(item, nested=True) for item in value) + "]"
    escaped = str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
    return "'" + escaped.replace("'", "\\'") + "'" if nested else escaped


@cache
def _macro_text(name: str) -> str:
    return resources.files("restorelens.analysis").joinpath("sql", "clickhouse", f"{name}.sql").read_text(encoding="utf-8")


def macro_definitions(names: tuple[str, ...] = MACROS) -> list[str]:
    """``create function`` statements for ``names`` and the macros they call, callees first."""
    wanted = list(dict.fromkeys(m for name in names for m in (*macros_of(name), name) if m in MACROS))
    return [_macro_text(name) for name in MACROS if name in wanted]
