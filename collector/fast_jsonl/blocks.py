"""What both fast readers share: the blocks of whole lines they read, and the exceptions by which
they decline a file (the caller then reads it another way)."""

from __future__ import annotations

__all__ = ["BLOCK_BYTES", "LONG_LINE_BLOCK_BYTES", "LineTooLong", "NativeDeclined", "Unsupported"]

#: Both readers read in blocks that must hold whole lines. The peak memory of a load grows with the
#: block (1M spans with 16 MiB blocks: about 620 MiB, most of it DuckDB's key index and the
#: process's imports; much smaller blocks cost CPU).
BLOCK_BYTES = 16 * 1024 * 1024
#: The block a file is read again with when a line is longer than BLOCK_BYTES; a line longer still
#: sends the file to the lenient decoder.
LONG_LINE_BLOCK_BYTES = 64 * 1024 * 1024


class Unsupported(Exception):
    """This input is not in the Collector's exact shape; use the lenient decoder."""


class LineTooLong(Unsupported):
    """A line is longer than the block it was read in; a larger block may read it."""


class NativeDeclined(Unsupported):
    """The compiled decoder does not take this file; Arrow's reader may."""
