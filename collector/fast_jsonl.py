"""The fast path for Collector JSON-lines files: a compiled decoder, then Arrow's JSON reader.

Parsing with ``json.loads`` and converting span by span in Python is the loader's bottleneck. Files
written by the Collector have one exact shape (lower-case hex, int64 as strings, integer enums), so
they are read here straight into ``otel_traces`` columns: first by the compiled decoder
(:func:`read_collector_jsonl_native`, ``_otlp_native.decode_json``, a third of the CPU), and a
file it declines by Arrow's multithreaded reader with an explicit schema, flattened column-wise
(:func:`read_collector_jsonl`). Both take the same shape; anything outside it (enum names, numbers
for strings, array/kvlist/bytes values, bad IDs, a pretty-printed document) raises
:class:`Unsupported` from Arrow's reader, and the caller loads that file with the lenient
span-by-span decoder instead, which also reports file:line reasons.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Generator, Iterator
from typing import IO, Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from duckdb import ColumnExpression
from duckdb.sqltypes import VARCHAR
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector import _otlp_native
from restorelens.collector.phases import ARROW_BUILD, DECODE, Phases
from restorelens.collector.proto_columns import columns_table
from restorelens.collector.rows import DICT_SCHEMA, KIND_NAMES, STATUS_NAMES

__all__ = [
    "BLOCK_BYTES", "LONG_LINE_BLOCK_BYTES", "LineTooLong", "NativeDeclined", "READ_AHEAD_BLOCKS", "Unsupported",
    "native_table", "read_collector_jsonl", "read_collector_jsonl_native",
]

#: Both readers read in blocks that must hold whole lines. The peak memory of a load grows with the
#: block (1M spans with 16 MiB blocks: about 620 MiB, most of it DuckDB's key index and the
#: process's imports; much smaller blocks cost CPU).
BLOCK_BYTES = 16 * 1024 * 1024
#: The block a file is read again with when a line is longer than BLOCK_BYTES; a line longer still
#: sends the file to the lenient decoder.
LONG_LINE_BLOCK_BYTES = 64 * 1024 * 1024
#: Blocks Arrow may read beyond the batches taken from it. Left alone, its streaming reader reads
#: up to 32 blocks ahead in the background (a 593 MiB file was all in memory after the first
#: batch) while the store is still inserting the first ones.
READ_AHEAD_BLOCKS = 3
#: While the caller waits for a batch and Arrow's read waits for the window, one more block is
#: allowed this often (Arrow may need more than the window: the caller must never wait for good).
_GRANT_S = 0.05


class Unsupported(Exception):
    """This input is not in the Collector's exact shape; use the lenient decoder."""


class LineTooLong(Unsupported):
    """A line is longer than the block it was read in; a larger block may read it."""


class NativeDeclined(Unsupported):
    """The compiled decoder does not take this file; Arrow's reader may."""


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
_FILE_SCHEMA = pa.schema([("resourceSpans", pa.list_(_RESOURCE_SPANS))])


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
        doubles = _double_strings(doubles)
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


def _double_strings(doubles: Any) -> Any:
    """Each double as ``rows.double_to_str`` writes it (Python's repr: shortest round-trip digits,
    ``3.0``, ``1e-05``, ``1e+16``; ``NaN``, ``Infinity``), without a Python call per value.

    Arrow's cast has the same digits in JavaScript's notation (``3``, ``0.00001``); DuckDB's cast
    has Python's notation for every finite double (``test_fast_jsonl`` compares them on random bit
    patterns), at a tenth of the CPU of the loop over values it replaced.
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


def _flatten(resource_spans_lists: Any) -> pa.Table:
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


def native_table(lines: bytes | memoryview, max_line_bytes: int = BLOCK_BYTES) -> pa.Table | None:
    """The compiled decoder's table for whole lines, or None when they are not exactly in the
    Collector's shape or one is longer than ``max_line_bytes`` (then Arrow's reader, and past it
    the lenient decoder, take the file)."""
    found = _otlp_native.decode_json(lines, max_line_bytes)
    return None if found is None else _native_columns_table(found)


def _native_columns_table(found: tuple[Any, Any]) -> pa.Table:
    """``decode_json``'s answer as a table, its doubles written as the Arrow path writes them."""
    columns, doubles = found
    return columns_table(columns, doubles, _double_strings)


def read_collector_jsonl_native(
    stream: IO[bytes], phases: Phases | None = None, block_bytes: int | None = None
) -> Generator[pa.Table, None, None]:
    """Tables of ``otel_traces`` rows from a decompressed JSON-lines stream by the compiled decoder
    (``_otlp_native.decode_json``), a block of whole lines at a time. Raises NativeDeclined at the
    first block it declines, or at a line longer than a block: the caller reads the file again
    with :func:`read_collector_jsonl`, which reads every line of a block's length or less (a line
    it cannot read must not be read here either, since the lenient decoder then takes the file
    and may spell a value differently)."""
    phases = phases if phases is not None else Phases()
    block_bytes = block_bytes or BLOCK_BYTES
    carry = b""
    while True:
        with phases.timing(DECODE):
            chunk = stream.read(block_bytes)
            data = carry + chunk if carry else chunk
            if not data:
                return
            cut = data.rfind(b"\n") + 1 if chunk else len(data)
            while not cut:  # no line ends in this block yet
                if len(data) > block_bytes:
                    raise NativeDeclined(f"a line longer than {block_bytes} bytes")
                more = stream.read(block_bytes)
                data += more
                cut = data.rfind(b"\n") + 1 if more else len(data)
            carry = data[cut:]
            found = _otlp_native.decode_json(memoryview(data)[:cut], block_bytes)
        if found is None:
            raise NativeDeclined(f"not exactly in the Collector's shape, or a line longer than {block_bytes} bytes")
        with phases.timing(ARROW_BUILD):
            table = _native_columns_table(found)
        if table.num_rows:
            yield table


class _PacedStream:
    """The caller's stream as Arrow reads it: Arrow closing its file must not close the caller's
    stream, and Arrow's background reads stay within ``ahead_blocks`` blocks of the batches taken
    (a batch needs its own block and the next, for the line that straddles them). Should Arrow
    need more than that for the batch the caller is waiting for, the window grows by a block
    every ``_GRANT_S`` while both wait, so neither waits for good; a caller that is merely slow
    grows nothing.

    Each read returns the whole size asked (or the rest of the stream), so a block is a block
    however the stream splits its reads. Once the caller stops (:meth:`finish`), reads get end
    of file, and ``finish`` returns only when a read already under way has ended: the caller
    closes the underlying stream next."""

    def __init__(self, stream: IO[bytes], block_bytes: int, ahead_blocks: int) -> None:
        self._stream = stream
        self._window_bytes = block_bytes * ahead_blocks
        self._block_bytes = block_bytes
        self._read_bytes = 0
        self._taken = 0
        self._extra_blocks = 0  # granted while the caller waits for this batch (see read)
        self._waiting = False  # the caller is waiting for Arrow's next batch
        self._reading = False
        self._done = False
        self._turn = threading.Condition()
        self.closed = False

    def _may_read(self) -> bool:
        allowed = (self._taken + self._extra_blocks) * self._block_bytes + self._window_bytes
        return self._done or self._read_bytes < allowed

    def read(self, size: int = -1) -> bytes:
        with self._turn:
            while not self._may_read():
                self._turn.wait(timeout=_GRANT_S)
                if self._waiting and not self._may_read():
                    self._extra_blocks += 1  # Arrow needs more than the window for this batch
            if self._done:
                return b""  # the caller stopped: nothing more is needed
            self._reading = True
        try:
            if size is None or size < 0:
                data = self._stream.read()
            else:
                parts, left = [], size
                while left > 0:
                    part = self._stream.read(left)
                    if not part:
                        break
                    parts.append(part)
                    left -= len(part)
                data = b"".join(parts) if len(parts) != 1 else parts[0]
        finally:
            with self._turn:
                self._reading = False
                self._turn.notify_all()
        with self._turn:
            self._read_bytes += len(data)
        return data

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """The block in which the caller waits for Arrow's next batch."""
        with self._turn:
            self._waiting = True
            self._turn.notify_all()
        try:
            yield
        finally:
            with self._turn:
                self._waiting = False

    def took_batch(self) -> None:
        with self._turn:
            self._taken += 1
            self._extra_blocks = 0  # a grant serves the batch waited for, not the ones after it
            self._turn.notify_all()

    def finish(self) -> None:
        with self._turn:
            self._done = True
            self._turn.notify_all()
            self._turn.wait_for(lambda: not self._reading)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True


def read_collector_jsonl(
    stream: IO[bytes], phases: Phases | None = None, block_bytes: int | None = None
) -> Generator[pa.Table, None, None]:
    """Tables of ``otel_traces`` rows from a decompressed JSON-lines stream, read in blocks of
    ``block_bytes`` (default BLOCK_BYTES); may raise Unsupported (LineTooLong for a line longer than a
    block). ``phases`` gets the seconds spent reading JSON (decode) and flattening it (Arrow build)."""
    phases = phases if phases is not None else Phases()
    block_bytes = block_bytes or BLOCK_BYTES
    paced = _PacedStream(stream, block_bytes, READ_AHEAD_BLOCKS)
    try:
        with phases.timing(DECODE), paced.waiting():  # opening reads the first batch
            reader = pj.open_json(
                pa.PythonFile(paced, mode="r"),  # type: ignore[arg-type]
                read_options=pj.ReadOptions(block_size=block_bytes),
                parse_options=pj.ParseOptions(explicit_schema=_FILE_SCHEMA, unexpected_field_behavior="error"),
            )
        while True:
            with phases.timing(DECODE), paced.waiting():
                batch = next(reader, None)
            paced.took_batch()
            if batch is None:
                return
            with phases.timing(ARROW_BUILD):
                table = _flatten(batch.column(0))
            yield table
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, pa.ArrowIndexError) as exc:
        reason = str(exc).splitlines()[0]
        if "straddl" in reason:  # Arrow: "straddling object straddles two block boundaries"
            raise LineTooLong(reason) from None
        raise Unsupported(reason) from None
    finally:
        paced.finish()  # a read Arrow still has queued must not wait for batches nobody takes
