"""Read trace files, one payload (or Arrow table) at a time.

Recognised by content, not by name:
- JSON lines: one document per line (the Collector file exporter's ``format: json``, one
  ``TracesData`` per line); a single pretty-printed document (the OTLP repo's
  ``examples/trace.json``, a Jaeger or Tempo download) also works. Which JSON it is (OTLP, Jaeger,
  Tempo) is the loader's to tell;
- length-prefixed messages: a 4-byte big-endian length, then the message (``format: proto``, or
  ``compression: zstd``, where each message is a zstd frame holding JSON or protobuf);
- either of those inside a gzip or zstd stream (``.gz``, ``.zst`` made by rotation or by hand);
- Parquet in the ``otel_traces`` layout (``restorelens export --format parquet``), by its
  ``PAR1`` magic: :func:`read_parquet_tables`.

Each payload is numbered: the line number for JSON lines, the message number otherwise.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from restorelens.collector.decode_json import loads, may_hold_surrogates

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_MESSAGE_BYTES",
    "ParquetProblem",
    "Payload",
    "compression",
    "is_parquet",
    "open_stream",
    "read_parquet_tables",
    "read_payloads",
]

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PARQUET_MAGIC = b"PAR1"
#: A JSON document (one line, or one pretty-printed file) is parsed whole; none may be longer.
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024
#: A length prefix above this means the file is not length-prefixed OTLP at all.
MAX_MESSAGE_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class Payload:
    """One TracesData: ``parsed`` JSON object, or protobuf ``data``; or the ``error`` that stopped it."""

    number: int
    parsed: Any = None
    data: bytes | None = None
    error: str = ""
    #: The JSON text could decode to a lone surrogate (``decode_json.may_hold_surrogates``).
    may_hold_surrogates: bool = True


class _CountingReader(io.RawIOBase):
    """Counts bytes read from the file on disk, for progress over compressed input."""

    def __init__(self, raw: IO[bytes], on_bytes: Callable[[int], None] | None) -> None:
        self._raw = raw
        self._on_bytes = on_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        if n and self._on_bytes is not None:
            self._on_bytes(n)
        return n or 0


def _decompressed(stream: io.BufferedReader) -> io.BufferedReader:
    head = stream.peek(4)[:4]
    if head.startswith(_GZIP_MAGIC):
        # GzipFile buffers itself; another buffer on top would hide the lines read before a truncation.
        return gzip.GzipFile(fileobj=stream)  # type: ignore[return-value]
    if head == _ZSTD_MAGIC:
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
        return io.BufferedReader(reader)  # type: ignore[arg-type]
    return stream


def _first_byte(stream: io.BufferedReader) -> bytes:
    head = stream.peek(64)[:64]
    stripped = head.lstrip()
    return stripped[:1] if stripped else head[:1]


def _parse_json(number: int, line: bytes) -> Payload:
    try:
        return Payload(number, parsed=loads(line), may_hold_surrogates=may_hold_surrogates(line))
    except (ValueError, RecursionError) as exc:
        return Payload(number, error=f"invalid JSON: {exc}")


def _lines(stream: io.BufferedReader) -> Iterator[tuple[int, bytes | None]]:
    """Numbered lines, each at most ``MAX_DOCUMENT_BYTES`` long; a longer one is skipped as None,
    so that one line without a newline (a huge one-line document) never takes unbounded memory."""
    number = 0
    while True:
        limit = MAX_DOCUMENT_BYTES
        line = stream.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := stream.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
            yield number, None
        else:
            yield number, line


def _json_lines(stream: io.BufferedReader) -> Iterator[Payload]:
    first = True
    for number, line in _lines(stream):
        if line is None:
            too_long = f"line longer than {MAX_DOCUMENT_BYTES} bytes, the most one JSON document may be"
            yield Payload(number, error=too_long)
            first = False
            continue
        if not line.strip():
            continue
        payload = _parse_json(number, line)
        if first and payload.error and line.strip() in (b"{", b"["):
            # Not JSON lines: one pretty-printed document.
            rest = stream.read(MAX_DOCUMENT_BYTES - len(line) + 1)
            if len(line) + len(rest) > MAX_DOCUMENT_BYTES:
                yield Payload(number, error=f"multi-line JSON document longer than {MAX_DOCUMENT_BYTES} bytes, "
                                            "the most one JSON document may be (write JSON lines instead)")
                return
            whole = _parse_json(number, line + rest)
            if whole.error:
                yield Payload(number, error=f"{whole.error} (multi-line JSON document)")
                return
            yield whole
            return
        first = False
        yield payload


def _message(number: int, data: bytes) -> Payload:
    if data.startswith(_ZSTD_MAGIC):
        import zstandard

        try:
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
            data = reader.read(MAX_MESSAGE_BYTES + 1)
        except zstandard.ZstdError as exc:
            return Payload(number, error=f"invalid zstd frame: {exc}")
        if len(data) > MAX_MESSAGE_BYTES:
            return Payload(number, error="decompressed message too large")
    if data.lstrip()[:1] == b"{":
        return _parse_json(number, data)
    return Payload(number, data=data)


def _length_prefixed(stream: io.BufferedReader) -> Iterator[Payload]:
    number = 0
    while True:
        prefix = stream.read(4)
        if not prefix:
            return
        number += 1
        if len(prefix) < 4:
            yield Payload(number, error="truncated length prefix at end of file")
            return
        (size,) = struct.unpack(">I", prefix)
        if size > MAX_MESSAGE_BYTES:
            yield Payload(number, error="not a trace file restorelens reads: neither JSON (OTLP, Jaeger, Tempo), "
                                        "length-prefixed OTLP messages nor Parquet")
            return
        data = stream.read(size)
        if len(data) < size:
            yield Payload(number, error=f"truncated message: {len(data)} of {size} bytes")
            return
        yield _message(number, data)


@contextlib.contextmanager
def open_stream(
    path: str | os.PathLike[str], on_bytes: Callable[[int], None] | None = None
) -> Iterator[tuple[io.BufferedReader, bool]]:
    """The decompressed content of ``path`` and whether it is JSON (lines) rather than length-prefixed."""
    with open(path, "rb", buffering=0) as raw:
        stream = _decompressed(io.BufferedReader(_CountingReader(raw, on_bytes), buffer_size=1 << 20))
        yield stream, _first_byte(stream) in (b"{", b"[")


def read_payloads(path: str | os.PathLike[str], on_bytes: Callable[[int], None] | None = None) -> Iterator[Payload]:
    """Yield every payload of one file; a damaged stream ends with an error payload."""
    number = 0
    try:
        with open_stream(path, on_bytes) as (stream, is_json):
            for payload in _json_lines(stream) if is_json else _length_prefixed(stream):
                number = payload.number
                yield payload
    except (OSError, EOFError, ValueError) as exc:  # truncated or corrupt gzip/zstd stream
        yield Payload(number + 1, error=f"cannot read further: {exc}")
    except Exception as exc:  # zstandard.ZstdError is not an OSError
        if type(exc).__module__.startswith("zstandard"):
            yield Payload(number + 1, error=f"cannot read further: {exc}")
        else:
            raise


def _magic(path: str | os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(4)
    except OSError:
        return b""  # read_payloads, opening it again, reports why


def is_parquet(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` starts with Parquet's magic (a Parquet file cannot be read as a stream)."""
    return _magic(path) == _PARQUET_MAGIC


def compression(path: str | os.PathLike[str]) -> str:
    """``gzip``, ``zstd`` or '' (none), by the file's first bytes."""
    head = _magic(path)
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    return "zstd" if head == _ZSTD_MAGIC else ""


class ParquetProblem(ValueError):
    """A Parquet file that is unreadable or not in the ``otel_traces`` layout; the message says which column."""


#: Rows per Arrow batch read from Parquet: bounded memory whatever the file's row groups.
PARQUET_BATCH_ROWS = 65_536
_ID_DIGITS = {"TraceId": 32, "SpanId": 16, "ParentSpanId": 16}
_PARALLEL = (
    ("Events.Timestamp", "Events.Name", "Events.Attributes"),
    ("Links.TraceId", "Links.SpanId", "Links.TraceState", "Links.Attributes"),
)


def _same_type(actual: Any, expected: Any) -> bool:
    import pyarrow as pa

    # pyarrow's equality ignores the names of list items and map entries, which writers choose freely
    return actual == expected or (expected == pa.string() and actual in (pa.large_string(), pa.string_view()))


def _check_schema(schema: Any) -> None:
    from restorelens.collector.rows import ARROW_SCHEMA

    names = list(schema.names)
    for name in ARROW_SCHEMA.names:
        if name not in names:
            raise ParquetProblem(
                f"no column {name!r}: not the otel_traces layout (restorelens export --format parquet)"
            )
    for name in names:
        if name not in ARROW_SCHEMA.names:
            raise ParquetProblem(f"column {name!r} is not an otel_traces column")
        if names.count(name) > 1:
            raise ParquetProblem(f"column {name!r} appears {names.count(name)} times")
    for expected in ARROW_SCHEMA:
        actual = schema.field(expected.name).type
        if not _same_type(actual, expected.type):
            raise ParquetProblem(f"column {expected.name!r} is {actual}, not {expected.type} as in otel_traces")


#: The store's times are signed 64-bit nanoseconds; OTLP's decoders refuse a time (an end too) beyond.
_MAX_NS = 2**63 - 1
_NOT_TEXT = ("Timestamp", "Duration", "Events.Timestamp")


def _invalid_utf8(column: Any, name: str) -> Any | None:
    """A mask of the rows holding a string (at any depth: list items, map keys and values) that is
    not UTF-8, which the store refuses with an error failing the whole insert; None when there is none."""
    import numpy as np
    import pyarrow as pa

    try:
        column.validate(full=True)  # checks UTF-8 at every depth, in C++: the common case costs little
        return None
    except pa.ArrowInvalid as exc:
        problem = exc
    # Rare: find the rows, in Python, on the same values as bytes (a cast to binary checks nothing)
    as_bytes = column.cast(_binary_type(column.type))
    mask = np.fromiter((not _all_utf8(value) for value in as_bytes.to_pylist()), bool, len(column))
    if not mask.any():  # invalid for another reason than UTF-8 (corrupt offsets): nothing of it is usable
        raise ParquetProblem(f"column {name!r} is not valid: {problem}")
    return pa.array(mask)


def _binary_type(kind: Any) -> Any:
    import pyarrow as pa

    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        return pa.large_binary()
    if pa.types.is_map(kind):
        return pa.map_(_binary_type(kind.key_type), _binary_type(kind.item_type))
    if pa.types.is_list(kind):
        return pa.list_(_binary_type(kind.value_type))
    return kind


def _all_utf8(value: Any) -> bool:
    if isinstance(value, bytes):
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True
    if isinstance(value, (list, tuple)):  # lists, and a map's (key, value) pairs
        return all(_all_utf8(item) for item in value)
    return True


def _rejected_rows(table: Any, first_row: int) -> tuple[Any, list[tuple[int, str]]]:
    """The rows the store would refuse or misread (nulls, strings that are not UTF-8, malformed IDs,
    times out of range, Nested lists of unequal lengths) as a mask, with (row number from 1, reason)
    for each."""
    import pyarrow as pa
    import pyarrow.compute as pc

    checks: list[tuple[Any, Callable[[int], str]]] = []
    for name in table.column_names:
        column = table.column(name)
        if column.null_count:
            checks.append((pc.is_null(column), lambda i, name=name: f"{name} is null"))
    for name in table.column_names:
        if name not in _NOT_TEXT:
            invalid = _invalid_utf8(table.column(name), name)
            if invalid is not None:  # before the ID checks, whose messages quote the value
                checks.append((invalid, lambda i, name=name: f"{name} holds a string that is not UTF-8"))
    start = pc.cast(table.column("Timestamp"), pa.int64())
    duration = table.column("Duration")
    checks.append((pc.fill_null(pc.less(start, 0), False), lambda i, start=start: (
        f"Timestamp {start[i].as_py()} is out of range (0 .. 2^63-1 ns)")))
    # the end, Timestamp + Duration, must fit as OTLP's endTimeUnixNano must (decode_json._nanos)
    room = pc.cast(pc.subtract(_MAX_NS, pc.max_element_wise(start, 0)), pa.uint64())
    checks.append((pc.fill_null(pc.greater(duration, room), False), lambda i, start=start, duration=duration: (
        f"Timestamp + Duration ({start[i].as_py()} + {duration[i].as_py()}) is out of range (0 .. 2^63-1 ns)")))
    event_times = pc.list_flatten(table.column("Events.Timestamp"))
    if len(event_times):
        early = pc.fill_null(pc.less(pc.cast(event_times, pa.int64()), 0), False)
        if pc.any(early).as_py():
            parents = pc.list_parent_indices(table.column("Events.Timestamp")).filter(early)
            mask = pc.is_in(pa.array(range(table.num_rows)), value_set=parents)
            checks.append((mask, lambda i: "Events.Timestamp holds a time before 1970 (0 .. 2^63-1 ns)"))
    for name, digits in _ID_DIGITS.items():
        column = table.column(name)
        pattern = f"^[0-9a-f]{{{digits}}}$" if name != "ParentSpanId" else f"^([0-9a-f]{{{digits}}})?$"
        malformed = pc.fill_null(pc.invert(pc.match_substring_regex(column, pattern)), False)
        if name != "ParentSpanId":
            malformed = pc.or_(malformed, pc.fill_null(pc.equal(column, "0" * digits), False))
        checks.append((malformed, lambda i, name=name, column=column, digits=digits: (
            f"{name} {str(column[i].as_py())[:48]!r} is not {digits} lower-case hex digits (nor all zeros)")))
    for group in _PARALLEL:
        lengths = [pc.fill_null(pc.list_value_length(table.column(name)), 0) for name in group]
        unequal = _any_of([pc.not_equal(lengths[0], other) for other in lengths[1:]])
        checks.append((unequal, lambda i, group=group: f"{', '.join(group)} are lists of different lengths"))
    bad = _any_of([mask for mask, _ in checks])
    if not pc.any(bad).as_py():
        return bad, []
    reasons = []
    for i in pc.indices_nonzero(bad).to_pylist():
        reason = next(describe(i) for mask, describe in checks if mask[i].as_py())
        reasons.append((first_row + i + 1, reason))
    return bad, reasons


def _any_of(masks: list[Any]) -> Any:
    import pyarrow.compute as pc

    combined = masks[0]
    for mask in masks[1:]:
        combined = pc.or_(combined, mask)
    return combined


def read_parquet_tables(
    path: str | os.PathLike[str], on_bytes: Callable[[int], None] | None = None
) -> Iterator[tuple[Any, list[tuple[int, str]]]]:
    """Yield the rows of an ``otel_traces`` Parquet file as Arrow tables in the store's schema, each
    with the rows left out of it as (row number, reason).

    Raises :class:`ParquetProblem` for a file that is not Parquet, cannot be read, or has other
    columns or column types than ``otel_traces`` (told by its footer, before any row is read).
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from restorelens.collector.rows import ARROW_SCHEMA

    size = os.path.getsize(path)
    try:
        parquet = pq.ParquetFile(path)
        _check_schema(parquet.schema_arrow)
        total = parquet.metadata.num_rows
        done = reported = 0
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=ARROW_SCHEMA.names):
            table = pa.Table.from_batches([batch])
            bad, reasons = _rejected_rows(table, done)
            if reasons:
                table = table.filter(pc.invert(bad))
            done += batch.num_rows
            if on_bytes is not None and total:
                now = size * done // total
                on_bytes(now - reported)
                reported = now
            yield table.cast(ARROW_SCHEMA), reasons
    except (pa.ArrowException, OSError) as exc:
        raise ParquetProblem(f"cannot read it as Parquet: {exc}") from None
