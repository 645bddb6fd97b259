"""Blocks whose span attributes reach DuckDB as Parquet rather than as an Arrow MAP column.

DuckDB checks every Arrow MAP it imports for null and repeated keys, building a value per key and
a hash set per row: importing ``SpanAttributes`` was a third of the loader's insert. It reads the
same maps from a Parquet file without that check, several times faster (benchmarks/RESULTS.md).
So the loader's read-ahead thread, beside the inserts, writes each block's ``SpanAttributes`` column to an uncompressed Parquet file, and
the insert reads the other columns from Arrow and that one from the file, joined row by row
(DuckDB's ``positional join``).

Only for tables whose maps are known to be valid: the compiled JSON decoder's (it declines a
repeated attribute key, and a key is never null). Where the file cannot be written, the block
goes in as a plain table.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from restorelens.collector.phases import ARROW_BUILD, Phases

__all__ = ["STAGED_COLUMN", "StagedBlock", "staged_blocks", "staging_folder"]

log = logging.getLogger(__name__)

#: The column sent to DuckDB as Parquet.
STAGED_COLUMN = "SpanAttributes"


@dataclass(frozen=True)
class StagedBlock:
    """Rows in ``otel_traces`` layout: every column but :data:`STAGED_COLUMN` in ``table``, that
    one alone, row for row, in the Parquet file ``parquet``."""

    table: pa.Table
    parquet: Path

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def discard(self) -> None:
        self.parquet.unlink(missing_ok=True)


def _stage(table: pa.Table, folder: Path, number: int) -> StagedBlock | pa.Table:
    path = folder / f"block-{number}.parquet"
    try:
        # uncompressed and without dictionaries or statistics: read once, right away, locally
        pq.write_table(table.select([STAGED_COLUMN]), path, compression="none", use_dictionary=False,
                       write_statistics=False)
    except OSError as exc:  # a full or unwritable temporary folder costs speed, never the load
        log.debug("span attributes not staged as Parquet (%s); the block goes in as Arrow", exc)
        path.unlink(missing_ok=True)
        return table
    return StagedBlock(table.drop_columns([STAGED_COLUMN]), path)


@contextlib.contextmanager
def staging_folder() -> Iterator[Path | None]:
    """A private temporary folder (mode 0700) for the staged files, removed with everything in it
    when the block ends; None when none can be made (the blocks then go in as Arrow). It must
    outlive the consumer: the read-ahead thread may end before the last block is inserted."""
    try:
        folder = tempfile.TemporaryDirectory(prefix="restorelens-staging-")
    except OSError as exc:
        log.debug("no temporary folder for staging (%s); blocks go in as Arrow", exc)
        yield None
        return
    with folder:
        yield Path(folder.name)


def staged_blocks(
    tables: Generator[pa.Table, None, None], folder: Path | None, phases: Phases | None = None
) -> Generator[StagedBlock | pa.Table, None, None]:
    """``tables``, each staged in ``folder`` (see the module; the writing counts as ``phases``'
    Arrow build), or as they are without a folder. Closing it closes ``tables``; the consumer
    discards each block's file once it is inserted."""
    phases = phases if phases is not None else Phases()
    try:
        if folder is None:
            yield from tables
            return
        for number, table in enumerate(tables):
            with phases.timing(ARROW_BUILD):
                block = _stage(table, folder, number)
            yield block
    finally:
        tables.close()
