"""Span rows in ``otel_traces`` column order, the conversions they share, and their Arrow form.

Decoders append to a :class:`SpanRows`: ``decode_json`` and ``decode_proto`` one tuple per span,
``proto_columns`` a whole Arrow table; the store inserts the Arrow table it builds. Values follow
the newest ClickHouse exporter: SpanKind ``Server``/``Client``/..., StatusCode
``Unset``/``Ok``/``Error``, lower-case hex IDs ('' when absent) and every attribute value as a string.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

__all__ = [
    "ARROW_SCHEMA",
    "DICT_SCHEMA",
    "KIND_NAMES",
    "MAX_ERRORS",
    "MAX_TIMESTAMP_NS",
    "STATUS_NAMES",
    "PayloadError",
    "SpanRejected",
    "SpanRows",
    "compact_json",
    "concat_spans",
    "double_to_str",
    "plain_resources",
]

#: OTLP SpanKind number -> pdata ``Kind().String()``.
KIND_NAMES = ("Unspecified", "Internal", "Server", "Client", "Producer", "Consumer")
#: OTLP StatusCode number -> pdata ``Code().String()``.
STATUS_NAMES = ("Unset", "Ok", "Error")
#: Error messages kept per batch or load (counts stay exact beyond it).
MAX_ERRORS = 1000
#: TIMESTAMP_NS is a signed 64-bit count; OTLP's fixed64 can exceed it.
MAX_TIMESTAMP_NS = 2**63 - 1

_MAP = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema(
    [
        ("Timestamp", pa.timestamp("ns")),
        ("TraceId", pa.string()),
        ("SpanId", pa.string()),
        ("ParentSpanId", pa.string()),
        ("TraceState", pa.string()),
        ("SpanName", pa.string()),
        ("SpanKind", pa.string()),
        ("ServiceName", pa.string()),
        ("ResourceAttributes", _MAP),
        ("ScopeName", pa.string()),
        ("ScopeVersion", pa.string()),
        ("SpanAttributes", _MAP),
        ("Duration", pa.uint64()),
        ("StatusCode", pa.string()),
        ("StatusMessage", pa.string()),
        ("Events.Timestamp", pa.list_(pa.timestamp("ns"))),
        ("Events.Name", pa.list_(pa.string())),
        ("Events.Attributes", pa.list_(_MAP)),
        ("Links.TraceId", pa.list_(pa.string())),
        ("Links.SpanId", pa.list_(pa.string())),
        ("Links.TraceState", pa.list_(pa.string())),
        ("Links.Attributes", pa.list_(_MAP)),
    ]
)


_RESOURCES = ARROW_SCHEMA.get_field_index("ResourceAttributes")
#: ``ARROW_SCHEMA`` with ``ResourceAttributes`` a dictionary of the resources' maps, as the columnar
#: decoders build it: DuckDB converts and checks each distinct map once, not once per span (a MAP
#: value costs it about half a microsecond per entry; a third of a small insert's CPU).
DICT_SCHEMA = ARROW_SCHEMA.set(_RESOURCES, pa.field("ResourceAttributes", pa.dictionary(pa.int32(), _MAP)))


def plain_resources(table: pa.Table) -> pa.Table:
    """``table`` in ``ARROW_SCHEMA``: a dictionary of resource maps spelled out per span."""
    if table.schema.field(_RESOURCES).type == _MAP:
        return table
    plain = pa.chunked_array([chunk.dictionary.take(chunk.indices) for chunk in table.column(_RESOURCES).chunks], _MAP)
    return table.set_column(_RESOURCES, ARROW_SCHEMA.field(_RESOURCES), plain)


def _dict_resources(table: pa.Table) -> pa.Table:
    """``table`` in ``DICT_SCHEMA``; a plain map column becomes a dictionary of itself (no copy)."""
    if table.schema.field(_RESOURCES).type != _MAP:
        return table
    chunks = [pa.DictionaryArray.from_arrays(pa.array(range(len(chunk)), pa.int32()), chunk)
              for chunk in table.column(_RESOURCES).chunks]
    column = pa.chunked_array(chunks, DICT_SCHEMA.field(_RESOURCES).type)
    return table.set_column(_RESOURCES, DICT_SCHEMA.field(_RESOURCES), column)


def concat_spans(tables: list[pa.Table]) -> pa.Table:
    """One table of span tables in either schema, in order (``DICT_SCHEMA`` if any is)."""
    if len(tables) == 1:
        return tables[0]
    if len({table.schema.field(_RESOURCES).type for table in tables}) > 1:
        tables = [_dict_resources(table) for table in tables]
    return pa.concat_tables(tables)


class PayloadError(ValueError):
    """The whole payload (request body, file line) is not OTLP traces; the message says why."""


class SpanRejected(ValueError):
    """One span cannot be stored; the message says why. The rest of its payload still loads."""


def double_to_str(value: float) -> str:
    """Shortest round-tripping decimal; non-finite values as OTLP/JSON spells them."""
    if math.isfinite(value):
        return repr(value)
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


@dataclass
class SpanRows:
    """Spans accumulated as row tuples or ready Arrow tables (in arrival order), plus rejections."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    rejected: int = 0
    errors: list[str] = field(default_factory=list)
    tables: list[pa.Table] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows) + sum(t.num_rows for t in self.tables)

    def reject(self, where: str, reason: str) -> None:
        self.rejected += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(f"{where}: {reason}" if where else reason)

    def add_table(self, table: pa.Table) -> None:
        """Append spans already in ``ARROW_SCHEMA`` or ``DICT_SCHEMA`` form, after the rows so far
        (order decides duplicates)."""
        if self.rows:
            self.tables.append(self._rows_to_arrow())
            self.rows = []
        self.tables.append(table)

    def _rows_to_arrow(self) -> pa.Table:
        columns = list(zip(*self.rows, strict=True))
        arrays = [pa.array(col, type=f.type) for col, f in zip(columns, ARROW_SCHEMA, strict=True)]
        return pa.Table.from_arrays(arrays, schema=ARROW_SCHEMA)

    def to_arrow(self) -> pa.Table:
        pieces = [t for t in self.tables if t.num_rows]
        if self.rows:
            pieces.append(self._rows_to_arrow())
        if not pieces:
            return ARROW_SCHEMA.empty_table()
        return concat_spans(pieces)
