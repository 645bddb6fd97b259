"""Parquet files in the ``otel_traces`` layout (``restorelens export --format parquet``): read as
Arrow tables in the store's schema, rows the store would refuse left out with their reasons, and
loaded into a store in one transaction each."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb

from restorelens.collector.parquet_sizes import (
    DecodedSizes,
    byte_slices,
    decoded_sizes,
    dictionary_leaves,
    plain_type,
)
from restorelens.collector.rows import MAX_ERRORS
from restorelens.collector.store import SpanStore
from restorelens.collector.summary import LoadSummary
from restorelens.errors import first_line

__all__ = [
    "PARQUET_BATCH_BYTES",
    "PARQUET_BATCH_ROWS",
    "PARQUET_EXPANSION",
    "PARQUET_MAX_GROUP_ROWS",
    "PARQUET_MAX_VALUE_BYTES",
    "PARQUET_MIN_DECODED_BYTES",
    "ParquetProblem",
    "load_parquet",
    "read_parquet_tables",
]


class ParquetProblem(ValueError):
    """A Parquet file that is unreadable or not in the ``otel_traces`` layout; the message says which column."""


#: Rows per Arrow batch read from Parquet (strings still dictionary-encoded: a few bytes a row).
PARQUET_BATCH_ROWS = 65_536
#: Rows a row group may hold: the loader reads a group at a time, its strings dictionary-encoded
#: (pyarrow's own writer puts at most this many in a group by default, DuckDB 122,880).
PARQUET_MAX_GROUP_ROWS = 1 << 20
#: A batch's strings are decoded at most this many bytes at a time (fewer rows when they are long):
#: a dictionary-encoded file stores a long value once, however many rows repeat it.
PARQUET_BATCH_BYTES = 64 * 1024 * 1024
#: The longest string value (a column, a list item, a map key or value) a Parquet file may hold.
PARQUET_MAX_VALUE_BYTES = 16 * 1024 * 1024
#: A file's strings may decode to at most this many times its size on disk ...
PARQUET_EXPANSION = 1024
#: ... or this many bytes, whichever is more.
PARQUET_MIN_DECODED_BYTES = 1024 * 1024 * 1024
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
    allowed_bytes = max(PARQUET_EXPANSION * size, PARQUET_MIN_DECODED_BYTES)
    try:
        parquet = pq.ParquetFile(path)
        _check_schema(parquet.schema_arrow)
        # every string stays dictionary-encoded as read: its decoded size is known before decoding
        encoded = pq.ParquetFile(path, metadata=parquet.metadata, read_dictionary=dictionary_leaves(parquet.schema))
        total = parquet.metadata.num_rows
        done = reported = decoded = 0
        for batch in _encoded_batches(encoded, ARROW_SCHEMA.names):
            sizes = decoded_sizes(batch)
            _check_sizes(sizes, done, decoded, allowed_bytes)
            decoded += int(sizes.per_row.sum())
            plain = pa.schema([field.with_type(plain_type(field.type)) for field in batch.schema])
            for start, rows in byte_slices(sizes.per_row, PARQUET_BATCH_BYTES):
                table = pa.Table.from_batches([batch.slice(start, rows)]).cast(plain)
                bad, reasons = _rejected_rows(table, done)
                if reasons:
                    table = table.filter(pc.invert(bad))
                done += rows
                if on_bytes is not None and total:
                    now = size * done // total
                    on_bytes(now - reported)
                    reported = now
                yield table.cast(ARROW_SCHEMA), reasons
    except (pa.ArrowException, OSError) as exc:
        raise ParquetProblem(f"cannot read it as Parquet: {exc}") from None


def _encoded_batches(encoded: Any, columns: list[str]) -> Iterator[Any]:
    """The file's rows as record batches of at most ``PARQUET_BATCH_ROWS``, strings dictionary-encoded.

    Read a row group at a time: pyarrow's batch reader cannot hand out a nested column (a map's keys,
    an event's names) dictionary-encoded in a batch that crosses row groups ("Nested data conversions
    not implemented for chunked array outputs", on the files ``restorelens export`` writes past one
    122,880-row group); its row-group reader can. A group's rows cost a few bytes each so read.
    """
    for group in range(encoded.num_row_groups):
        rows = encoded.metadata.row_group(group).num_rows
        if rows > PARQUET_MAX_GROUP_ROWS:
            raise ParquetProblem(f"row group {group} holds {rows} rows, more than the {PARQUET_MAX_GROUP_ROWS} "
                                 "a group may hold here (write it with smaller row groups)")
        yield from encoded.read_row_group(group, columns=columns).to_batches(max_chunksize=PARQUET_BATCH_ROWS)


def _check_sizes(sizes: DecodedSizes, done: int, decoded: int, allowed_bytes: int) -> None:
    """A value longer than ``PARQUET_MAX_VALUE_BYTES``, or strings decoding to more than
    ``allowed_bytes`` in all, refuse the file (a ParquetProblem naming the column) before decoding."""
    column, longest, row = sizes.longest
    if longest > PARQUET_MAX_VALUE_BYTES:
        raise ParquetProblem(f"row {done + row + 1}: column {column!r} holds a value of {longest} bytes, more than "
                             f"the {PARQUET_MAX_VALUE_BYTES} a value may be (a file holding one is refused)")
    if decoded + int(sizes.per_row.sum()) > allowed_bytes:
        most = max(sizes.per_column, key=sizes.per_column.__getitem__)
        raise ParquetProblem(f"its strings decode to more than {allowed_bytes} bytes ({PARQUET_EXPANSION} times "
                             f"its size, or {PARQUET_MIN_DECODED_BYTES} bytes), most of them in column {most!r}: "
                             "a dictionary-encoded value repeated beyond any trace's use")


def load_parquet(
    store: SpanStore, path: Path, on_bytes: Callable[[int], None], summary: LoadSummary, *, skip_existing: bool
) -> int | None:
    """Load an ``otel_traces`` Parquet file in one transaction: all of it or, when it turns out
    unreadable or foreign, none of it (reported as ``file: reason``). The span count, or None as
    for the loader's fast path: spans already stored, redo it with ``skip_existing``."""
    loaded = total = rejected = 0
    reasons: list[str] = []
    try:
        with store.transaction() as con:
            for table, left_out in read_parquet_tables(path, on_bytes):
                loaded += store.insert_table(con, table, skip_existing=skip_existing)
                total += table.num_rows
                rejected += len(left_out)
                kept = left_out[: max(0, MAX_ERRORS - len(reasons))]
                reasons.extend(f"{path}: row {row}: {reason}" for row, reason in kept)
    except duckdb.ConstraintException:
        return None
    except ParquetProblem as exc:
        summary.malformed += 1
        summary.add_error(f"{path}: {exc}")
        return 0
    except (duckdb.InvalidInputException, duckdb.ConversionException) as exc:
        # a value read_parquet_tables let through and the store refuses: the transaction is rolled
        # back, so the file is refused whole, and the other files still load
        summary.malformed += 1
        summary.add_error(f"{path}: the store refused a value of it: {first_line(exc)}")
        return 0
    summary.loaded += loaded
    summary.duplicate += total - loaded
    summary.rejected += rejected
    for message in reasons:
        summary.add_error(message)
    return total
