"""Arrow's multithreaded JSON reader with the Collector's explicit schema, for a file the compiled
decoder declines: its batches flattened column-wise, its reads paced so that it stays a few blocks
ahead of the batches taken."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Generator, Iterator
from typing import IO

import pyarrow as pa
import pyarrow.json as pj

from restorelens.collector.fast_jsonl.blocks import BLOCK_BYTES, LineTooLong, Unsupported
from restorelens.collector.fast_jsonl.columns import FILE_SCHEMA, flatten
from restorelens.collector.phases import ARROW_BUILD, DECODE, Phases

__all__ = ["READ_AHEAD_BLOCKS", "read_collector_jsonl"]

#: Blocks Arrow may read beyond the batches taken from it. Left alone, its streaming reader reads
#: up to 32 blocks ahead in the background (a 593 MiB file was all in memory after the first
#: batch) while the store is still inserting the first ones.
READ_AHEAD_BLOCKS = 3
#: While the caller waits for a batch and Arrow's read waits for the window, one more block is
#: allowed this often (Arrow may need more than the window: the caller must never wait for good).
_GRANT_S = 0.05


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
                parse_options=pj.ParseOptions(explicit_schema=FILE_SCHEMA, unexpected_field_behavior="error"),
            )
        while True:
            with phases.timing(DECODE), paced.waiting():
                batch = next(reader, None)
            paced.took_batch()
            if batch is None:
                return
            with phases.timing(ARROW_BUILD):
                table = flatten(batch.column(0))
            yield table
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, pa.ArrowIndexError) as exc:
        reason = str(exc).splitlines()[0]
        if "straddl" in reason:  # Arrow: "straddling object straddles two block boundaries"
            raise LineTooLong(reason) from None
        raise Unsupported(reason) from None
    finally:
        paced.finish()  # a read Arrow still has queued must not wait for batches nobody takes
