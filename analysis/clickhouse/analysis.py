"""The analysis read from ClickHouse or chDB: the same layers and the same ``Analysis`` methods,
each query sent as the layers it needs (``dialect.layer_sql``) over ``otel_traces``, through a
client (``clients.py``: chDB or a server).

ClickHouse computes a CTE again at every reference to it, and the layers reference each other many
times over (``wake_episodes`` alone reads the typed layers dozens of times as CTEs). So the layers
in ``KEPT_LAYERS`` (the typed and trace layers, and those several others read) are computed once per
``ClickHouseAnalysis``, when a query first needs them, into session temporary tables named
``rl_kept_<layer>`` (``CREATE TEMPORARY TABLE``), which later queries read through a CTE of the
layer's name; the rest are CTEs. A typed layer reads only its own span name, filtered before the
spans are deduplicated (the exporter's sort key, ``ServiceName, SpanName, Timestamp``, prunes by it
within each service). A user who may not create MergeTree temporary tables (no ``CREATE
ARBITRARY TEMPORARY TABLE`` grant, or a server before 23.3) keeps them in Memory; one who may
create none gets every layer as CTEs: the same answers, slower.

Read only, on purpose: a fleet's ClickHouse belongs to its operators. Nothing outlives the
analysis: ``close()`` drops the temporary tables (and the session's end would); the shared macros
are inlined, the label mapping and the (absent) ``engine_metrics`` table are CTEs, and the window
(``window.Window``) is a ``where`` on the CTE that reads the table, so ClickHouse prunes
partitions and granules by time before any layer runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import polars as pl

from restorelens.analysis.clickhouse import dialect
from restorelens.analysis.clickhouse.clients import error_code, param_type
from restorelens.analysis.clickhouse.frames import as_duckdb_gives, duckdb_schema
from restorelens.analysis.clickhouse.macros import inline_macros, layer_text, macro_bodies
from restorelens.analysis.layers import DERIVED_LAYERS, MACROS, PARAMETERISED, SHARED_LAYERS, SPAN_LAYERS, VIEW_LAYERS
from restorelens.analysis.queries import load_query
from restorelens.analysis.views import Analysis, Slo, checked_labels
from restorelens.analysis.window import Window, window_filter
from restorelens.errors import InputError, first_line
from restorelens.spans import SPAN_CLIENT_REQUEST

__all__ = ["KEPT_ENGINES", "KEPT_LAYERS", "KEPT_PREFIX", "ClickHouseAnalysis"]

#: Layers computed once per analysis into session temporary tables, in dependency order: the typed
#: and trace layers (a collector's store keeps the same ones) and the others several layers read.
KEPT_LAYERS = tuple(name for name in VIEW_LAYERS if name in DERIVED_LAYERS or name in SHARED_LAYERS)
#: The temporary tables' engines, the first the user may create: MergeTree keeps the columns
#: compressed on disk (chDB's folder, the server's default disk) rather than in memory, so a
#: fleet-sized window's layers fit; it needs ``CREATE ARBITRARY TEMPORARY TABLE`` (ClickHouse 23.3
#: on), Memory only ``CREATE TEMPORARY TABLE``.
KEPT_ENGINES = ("MergeTree order by tuple()", "Memory")
#: A kept layer's temporary table: a name no user table is likely to have, so a layer never reads
#: one of the user's tables in its place (e.g. after the server ended the session).
KEPT_PREFIX = "rl_kept_"
#: ClickHouse error codes meaning "this user or server may not create that temporary table":
#: BAD_ARGUMENTS, UNKNOWN_STORAGE, INCORRECT_QUERY, READONLY, ACCESS_DENIED.
_REFUSED_CODES = frozenset({36, 56, 80, 164, 497})
_UNKNOWN_TABLE = 60

_WORD = re.compile(r"\b[a-z_][a-z0-9_]*\b")
#: Comments and string literals: a layer's name inside either is not a read of that layer.
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'", re.DOTALL)
#: ``engine_metrics``' columns as ``store/engine_metrics.sql`` types them: a fleet's ClickHouse
#: has no such table (restorelens's collector writes it), so its layers read none.
_NO_ENGINE_METRICS = ("select cast(null, 'Nullable(DateTime64(9))') as Timestamp, '' as Target, '' as MetricName, "
                      "cast(map(), 'Map(String, String)') as Labels, cast(null, 'Nullable(Float64)') as Value "
                      "where 0")


class _SessionLost(Exception):
    """A kept layer's temporary table is gone (the server ended the session) while another was made."""


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
        self._macros = macro_bodies()
        #: The layers computed so far into this session's temporary tables (``KEPT_LAYERS``).
        self.kept: list[str] = []
        #: The engines temporary tables may still be made with; none: every layer is a CTE.
        self._engines = list(KEPT_ENGINES)

    # --- how a query reaches ClickHouse ---------------------------------------------------------

    def _frame(self, sql: str, parameters: dict[str, Any] | None = None) -> pl.DataFrame:
        return as_duckdb_gives(self._answer(sql, parameters or {}), sql, parameters or {})

    def _answer(self, sql: str, parameters: Mapping[str, Any], extra: Sequence[tuple[str, str]] = ()) -> pl.DataFrame:
        """``sql`` composed and run; once again from the spans if the server ended the session
        (and its temporary tables with it) since the kept layers were made."""
        for again in (False, True):
            try:
                text, values = self._compose(sql, parameters, extra)
            except _SessionLost:
                if again:
                    raise InputError(self.client.name, "cannot decompose its spans: the session's "
                                                       "temporary tables vanished twice") from None
                self.kept.clear()
                continue
            try:
                return self.client.frame(text, values)
            except Exception as exc:  # the drivers raise their own types; the line names what failed
                if not again and self.kept and error_code(exc) == _UNKNOWN_TABLE and KEPT_PREFIX in str(exc):
                    self.kept.clear()
                    continue
                raise InputError(self.client.name,
                                 f"cannot decompose its spans: {first_line(exc)}") from None
        raise AssertionError("unreachable")

    def _compose(self, sql: str, parameters: Mapping[str, Any], extra: Sequence[tuple[str, str]] = ()) -> tuple[str, dict[str, Any]]:
        """``sql`` (DuckDB dialect, naming layers) as one ClickHouse query over the table and the
        kept layers, computing those it needs first."""
        values = dict(parameters)
        types = {name: param_type(value) for name, value in values.items()}
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
            # before the dedupe: a span's repeats share its name, and within each service the
            # exporter's sort key (ServiceName, SpanName, Timestamp) prunes by it
            where += " and SpanName = {rl_span_name:String}"
            values["rl_span_name"] = span_name
        values.update(parameters)
        # one row per span: the Collector delivers at least once, and its MergeTree keeps repeats
        ctes = [("otel_traces", f"select * from {table} where {where} limit 1 by TraceId, SpanId"),
                ("rl_label_map", self._label_map(values)),
                ("engine_metrics", _NO_ENGINE_METRICS)]
        ctes += [(name, f"select * from {KEPT_PREFIX}{name}" if name in self.kept else layer_text(name))
                 for name in VIEW_LAYERS if name in needed]
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
            text, values = self._with(layer_text(name), {}, reads, span_name=SPAN_LAYERS.get(name))
            while self._engines:
                try:
                    # a table left by a create the driver gave up on would refuse the name
                    self.client.execute(f"drop temporary table if exists {KEPT_PREFIX}{name}", {})
                    self.client.execute(f"create temporary table {KEPT_PREFIX}{name} engine = {self._engines[0]} "
                                        f"as {text}", values)
                    break
                except Exception as exc:  # the drivers raise their own types; the line names what failed
                    if error_code(exc) == _UNKNOWN_TABLE and KEPT_PREFIX in str(exc):
                        raise _SessionLost from None  # a kept layer it reads is gone: make them again
                    if error_code(exc) not in _REFUSED_CODES:
                        raise InputError(self.client.name, f"cannot decompose its spans ({name}): "
                                                           f"{first_line(exc)}") from None
                    self._engines.pop(0)  # not this engine for this user: the next, else CTEs
            if not self._engines:
                return
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
        return inline_macros(sql, self._macros) if any(m in sql for m in MACROS) else sql

    def holds_spans(self) -> bool:
        """Whether the window holds any span at all."""
        return self._has_spans(None)

    def _has_spans(self, span_name: str | None) -> bool:
        text, values = self._with("select count() > 0 as present from (select 1 from otel_traces limit 1)", {}, set(),
                                  span_name=span_name)
        try:
            return bool(self.client.frame(text, values)["present"][0])
        except Exception as exc:  # the drivers raise their own types; the line names what failed
            raise InputError(self.client.name, f"cannot read its spans: {first_line(exc)}") from None

    def probe(self) -> None:
        """Read ``otel_traces`` once, cheaply: a missing table or server is a one-line error here."""
        self._has_spans(SPAN_CLIENT_REQUEST)

    def _empty_frame(self, name: str) -> pl.DataFrame:
        # DuckDB's columns and types (the frames are cast to them), from an empty store: asking
        # ClickHouse would compute the kept layers under the view just to learn its columns
        return pl.DataFrame(schema=duckdb_schema(f"select * from {name}", {}))

    def close(self) -> None:
        try:
            for name in reversed(self.kept):
                self.client.execute(f"drop temporary table if exists {KEPT_PREFIX}{name}", {})
        except Exception:  # noqa: S110 - the session's end drops them too; closing must not fail on it
            pass
        finally:
            self.kept.clear()
            self.client.close()

    # --- the methods whose DuckDB form keeps state on the connection ------------------------------

    def paired_differences(self) -> pl.DataFrame:
        summary = load_query("policy_summary")
        types = {name: param_type(value) for name, value in self.slo.parameters().items()}
        extra = [("policy_summary", self._inline(_to_clickhouse(summary.sql, types)))]
        frame = self._answer(load_query("paired_differences").sql, self.slo.parameters(), extra)
        return frame.sort("workload", "policy", "baseline", "seed", nulls_last=True)

    def traces_for_request(self, request_id: str) -> list[str]:
        frame = self._frame(load_query("traces_for_request").sql, {"request_id": request_id})
        return frame[frame.columns[0]].to_list()


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


def _to_clickhouse(sql: str, types: Mapping[str, str]) -> str:
    """``dialect.to_clickhouse`` with each ``$name`` a typed query parameter ``{name:Type}``."""
    try:
        return dialect.to_clickhouse(sql, types)
    except KeyError as exc:
        raise InputError("query", f"parameter ${exc.args[0]} has no value") from None


