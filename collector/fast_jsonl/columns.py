"""The Collector's JSON lines as ``otel_traces`` columns: the exact Arrow schema of a file in the
Collector's shape, and its batches flattened column-wise, each value checked and spelt as the
lenient decoder spells it (an input outside the shape raises ``Unsupported``)."""

from __future__ import annotations

import threading
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from duckdb import ColumnExpression
from duckdb.sqltypes import VARCHAR
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.fast_jsonl.blocks import Unsupported
from restorelens.collector.rows import DICT_SCHEMA, KIND_NAMES, STATUS_NAMES

__all__ = ["FILE_SCHEMA", "double_strings", "flatten"]

_VALUE = pa.struct(
    [("stringValue", pa.string()), ("intValue", pa.string()), ("doubleValue", pa.float64()), ("boolValue", pa.bool_())]
)
_KVS = pa.list_(pa.struct([("key", pa.string()), ("value", _VALUE)]))
_COUNT = pa.int64()  # flags and dropped*Count: read so that they are expected fields, then unused
_EVENT = pa.struct(
    [("timeUnixNano", pa.string()), ("name", pa.string()), ("attributes", _KVS), ("droppedAttributesCount", _COUNT)]
)
_LINK = pa.struct(
    [
        ("traceId", pa.string()),
        ("spanId", pa.string()),
        ("traceState", pa.string()),
        ("attributes", _KVS),
        ("droppedAttributesCount", _COUNT),
        ("flags", _COUNT),
    ]
)
_SPAN = pa.struct(
    [
        ("traceId", pa.string()),
        ("spanId", pa.string()),
        ("parentSpanId", pa.string()),
        ("traceState", pa.string()),
        ("flags", _COUNT),
        ("name", pa.string()),
        ("kind", pa.int32()),
        ("startTimeUnixNano", pa.string()),
        ("endTimeUnixNano", pa.string()),
        ("attributes", _KVS),
        ("droppedAttributesCount", _COUNT),
        ("events", pa.list_(_EVENT)),
        ("droppedEventsCount", _COUNT),
        ("links", pa.list_(_LINK)),
        ("droppedLinksCount", _COUNT),
        ("status", pa.struct([("code", pa.int32()), ("message", pa.string())])),
    ]
)
_SCOPE = pa.struct(
    [("name", pa.string()), ("version", pa.string()), ("attributes", _KVS), ("droppedAttributesCount", _COUNT)]
)
_SCOPE_SPANS = pa.struct([("scope", _SCOPE), ("spans", pa.list_(_SPAN)), ("schemaUrl", pa.string())])
_RESOURCE_SPANS = pa.struct(
    [
        ("resource", pa.struct([("attributes", _KVS), ("droppedAttributesCount", _COUNT)])),
        ("scopeSpans", pa.list_(_SCOPE_SPANS)),
        ("schemaUrl", pa.string()),
    ]
)
#: Every field the Collector writes for traces. Any other key (arrayValue, kvlistValue, bytesValue,
#: snake_case names, legacy instrumentationLibrarySpans, fields of a newer OTLP) makes Arrow's reader
#: fail, and the file goes to the lenient decoder, which ignores unknown fields as the spec says.
#: (This replaced a byte scan of the file for such keys, which cost 0.6 s CPU per 62 MB.)
FILE_SCHEMA = pa.schema([("resourceSpans", pa.list_(_RESOURCE_SPANS))])


_KIND = pa.array(KIND_NAMES)
_STATUS = pa.array(STATUS_NAMES)
_INT_TEXT = r"^(0|-?[1-9][0-9]*)$"
_NANOS_TEXT = r"^(0|[1-9][0-9]{0,18})$"


def _field(array: Any, name: str) -> Any:
    return pc.struct_field(array, name)


def _require(condition: Any, what: str) -> None:
    if condition.as_py() is False:  # None: nothing to check (empty input)
        raise Unsupported(what)


def _hex_ids(values: Any, n_digits: int, what: str, *, optional: bool) -> Any:
    if optional:
        values = values.fill_null("")
    elif values.null_count:
        raise Unsupported(f"{what} missing")
    lowered = pc.utf8_lower(values)
    pattern = f"^([0-9a-f]{{{n_digits}}})?$" if optional else f"^[0-9a-f]{{{n_digits}}}$"
    _require(pc.all(pc.match_substring_regex(lowered, pattern)), f"{what} not hex")
    if not optional:
        _require(pc.invert(pc.any(pc.equal(lowered, "0" * n_digits))), f"{what} all zeros")
    return lowered


def _nanos(values: Any, what: str) -> Any:
    text = values.fill_null("0")
    _require(pc.all(pc.match_substring_regex(text, _NANOS_TEXT)), f"{what} not a timestamp")
    return pc.cast(text, pa.int64())


def _value_strings(values: Any) -> Any:
    ints = _field(values, "intValue")
    if ints.null_count < len(ints):
        present = ints.drop_null()
        _require(pc.all(pc.match_substring_regex(present, _INT_TEXT)), "non-canonical intValue")
        # past int64 the cast raises (ArrowInvalid: the lenient decoder rejects that span, as the
        # protobuf path does)
        pc.cast(present, pa.int64())
    doubles = _field(values, "doubleValue")
    if doubles.null_count < len(doubles):
        doubles = double_strings(doubles)
    else:
        doubles = pa.nulls(len(values), pa.string())
    bools = pc.if_else(_field(values, "boolValue"), "true", "false")
    strings = pc.coalesce(_field(values, "stringValue"), ints, doubles, bools)
    if strings.null_count:
        raise Unsupported("empty or complex attribute value")
    return strings


_THREAD = threading.local()


def _cast_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection for this thread (a connection must not be shared by threads),
    kept: opening one costs about 15 ms, as much as casting a million doubles."""
    con = getattr(_THREAD, "con", None)
    if con is None:
        con = _THREAD.con = duckdb.connect(":memory:")
        con.execute("set threads = 1")  # a block's values: parallelism would only cost
    return con


def double_strings(doubles: Any) -> Any:
    """Each double as ``rows.double_to_str`` writes it (Python's repr: shortest round-trip digits,
    ``3.0``, ``1e-05``, ``1e+16``; ``NaN``, ``Infinity``), without a Python call per value.

    Arrow's cast has the same digits in JavaScript's notation (``3``, ``0.00001``); DuckDB's cast
    has Python's notation for every finite double (``tests/collector/fast_jsonl/test_columns.py``
    compares them on random bit patterns), at a tenth of the CPU of the loop over values.
    """
    con = _cast_connection()
    text = con.from_arrow(pa.table({"d": doubles})).select(ColumnExpression("d").cast(VARCHAR)).to_arrow_table()
    strings = text.column(0).combine_chunks()
    finite = pc.is_finite(doubles)
    if pc.all(finite.fill_null(True)).as_py():
        return strings
    spelled = pc.if_else(pc.is_nan(doubles), "NaN", pc.if_else(pc.greater(doubles, 0), "Infinity", "-Infinity"))
    return pc.if_else(finite, strings, spelled)


def _offsets(lists: Any) -> Any:
    lengths = pc.list_value_length(lists).fill_null(0)
    return pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths).cast(pa.int32())])


def _maps(kv_lists: Any) -> Any:
    """list<struct<key, value>> -> map<string, string> (null lists become empty maps)."""
    pairs = pc.list_flatten(kv_lists)
    keys = _field(pairs, "key")
    if keys.null_count:
        raise Unsupported("attribute without key")
    return pa.MapArray.from_arrays(_offsets(kv_lists), keys, _value_strings(_field(pairs, "value")))


def _lists(lists: Any, values: Any) -> Any:
    return pa.ListArray.from_arrays(_offsets(lists), values)


def _service_names(resource_maps: Any) -> Any:
    return pa.array([dict(m).get(SERVICE_NAME, "") for m in resource_maps.to_pylist()], pa.string())


def flatten(resource_spans_lists: Any) -> pa.Table:
    rs = pc.list_flatten(resource_spans_lists)
    resource_maps = _maps(_field(_field(rs, "resource"), "attributes"))
    ss_lists = _field(rs, "scopeSpans")
    ss = pc.list_flatten(ss_lists)
    ss_rs = pc.list_parent_indices(ss_lists)
    spans_lists = _field(ss, "spans")
    spans = pc.list_flatten(spans_lists)
    span_ss = pc.list_parent_indices(spans_lists)
    span_rs = pc.take(ss_rs, span_ss)
    scope = _field(ss, "scope")

    start = _nanos(_field(spans, "startTimeUnixNano"), "startTimeUnixNano")
    end = _nanos(_field(spans, "endTimeUnixNano"), "endTimeUnixNano")
    kind = _field(spans, "kind").fill_null(0)
    status = _field(spans, "status")
    code = _field(status, "code").fill_null(0)
    _require(pc.all(pc.and_(pc.greater_equal(kind, 0), pc.less(kind, len(KIND_NAMES)))), "unknown kind")
    _require(pc.all(pc.and_(pc.greater_equal(code, 0), pc.less(code, len(STATUS_NAMES)))), "unknown status")
    events = _field(spans, "events")
    event = pc.list_flatten(events)
    links = _field(spans, "links")
    link = pc.list_flatten(links)
    columns = [
        pc.cast(start, pa.timestamp("ns")),
        _hex_ids(_field(spans, "traceId"), 32, "traceId", optional=False),
        _hex_ids(_field(spans, "spanId"), 16, "spanId", optional=False),
        _hex_ids(_field(spans, "parentSpanId"), 16, "parentSpanId", optional=True),
        _field(spans, "traceState").fill_null(""),
        _field(spans, "name").fill_null(""),
        pc.take(_KIND, kind),
        pc.take(_service_names(resource_maps), span_rs),
        # each resource's map once, not once per span: DuckDB converts and checks a dictionary's
        # values once, and a MAP value costs it about half a microsecond per entry
        pa.DictionaryArray.from_arrays(span_rs.cast(pa.int32()), resource_maps),
        pc.take(_field(scope, "name").fill_null(""), span_ss),
        pc.take(_field(scope, "version").fill_null(""), span_ss),
        _maps(_field(spans, "attributes")),
        pc.cast(pc.max_element_wise(pc.subtract(end, start), 0), pa.uint64()),
        pc.take(_STATUS, code),
        _field(status, "message").fill_null(""),
        _lists(events, pc.cast(_nanos(_field(event, "timeUnixNano"), "event timeUnixNano"), pa.timestamp("ns"))),
        _lists(events, _field(event, "name").fill_null("")),
        _lists(events, _maps(_field(event, "attributes"))),
        _lists(links, _hex_ids(_field(link, "traceId"), 32, "link traceId", optional=False)),
        _lists(links, _hex_ids(_field(link, "spanId"), 16, "link spanId", optional=False)),
        _lists(links, _field(link, "traceState").fill_null("")),
        _lists(links, _maps(_field(link, "attributes"))),
    ]
    return pa.Table.from_arrays(columns, schema=DICT_SCHEMA)
