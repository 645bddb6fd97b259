"""The compiled decoder's reader (``_otlp_native.decode_json``): a block of whole lines at a time
into ``otel_traces`` columns, for a third of the CPU of Arrow's reader."""

from __future__ import annotations

from collections.abc import Generator
from typing import IO, Any

import pyarrow as pa

from restorelens.collector import _otlp_native
from restorelens.collector.fast_jsonl.blocks import BLOCK_BYTES, NativeDeclined
from restorelens.collector.fast_jsonl.columns import double_strings
from restorelens.collector.phases import ARROW_BUILD, DECODE, Phases
from restorelens.collector.proto_columns import columns_table

__all__ = ["native_table", "read_collector_jsonl_native"]


def native_table(lines: bytes | memoryview, max_line_bytes: int = BLOCK_BYTES) -> pa.Table | None:
    """The compiled decoder's table for whole lines, or None when they are not exactly in the
    Collector's shape or one is longer than ``max_line_bytes`` (then Arrow's reader, and past it
    the lenient decoder, take the file)."""
    found = _otlp_native.decode_json(lines, max_line_bytes)
    return None if found is None else _native_columns_table(found)


def _native_columns_table(found: tuple[Any, Any]) -> pa.Table:
    """``decode_json``'s answer as a table, its doubles written as the Arrow path writes them."""
    columns, doubles = found
    return columns_table(columns, doubles, double_strings)


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
