"""Opening a span store file that one writer and any number of readers share.

DuckDB lets one process write a file, and while it has the file open no other process may open it,
not even read-only. So readers use :func:`open_read_only`, which retries while the file is locked,
asks the writer to let go by touching ``<db>.read-request``, and should be closed promptly; the
writer (``writer.StoreWriter``) closes its connection (``SpanStore.release``) when asked, when
idle, and periodically.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import duckdb

from restorelens.errors import InputError, RestorelensError

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_S",
    "StoreBusy",
    "connect",
    "open_read_only",
    "read_request_path",
    "read_requested",
]

DEFAULT_LOCK_TIMEOUT_S = 10.0
#: A read request older than this is ignored (its reader got in, gave up or crashed).
READ_REQUEST_FRESH_S = 1.0
_POLL_S = 0.01


class StoreBusy(RestorelensError):
    """Another process (or connection of another mode) holds the DuckDB file."""


def _is_lock_conflict(exc: duckdb.Error) -> bool:
    text = str(exc)
    return "Could not set lock" in text or "different configuration" in text


def read_request_path(path: str | os.PathLike[str]) -> Path:
    """The file a waiting reader touches to ask the writer to let go of ``path``."""
    return Path(f"{path}.read-request")


def read_requested(path: str | os.PathLike[str], *, within_s: float = READ_REQUEST_FRESH_S) -> bool:
    """Whether a reader has asked for ``path`` in the last ``within_s`` (a crashed reader's request expires)."""
    try:
        touched = read_request_path(path).stat().st_mtime
    except OSError:
        return False
    return time.time() - touched < within_s


def _ask_for_release(path: str | os.PathLike[str]) -> bool:
    try:
        read_request_path(path).touch()
    except OSError:  # a read-only directory: the writer's periodic release still lets us in
        return False
    return True


def connect(path: str | os.PathLike[str], *, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    """Open ``path``, retrying while another process holds it; StoreBusy after ``timeout_s``.

    A reader kept out asks the writer to let go (see :func:`read_requested`) on every retry.
    """
    deadline = time.monotonic() + timeout_s
    asked = False
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
        except (duckdb.IOException, duckdb.ConnectionException) as exc:
            if not _is_lock_conflict(exc):
                raise InputError(str(path), f"cannot open the DuckDB file: {exc}") from None
            if time.monotonic() >= deadline:
                raise StoreBusy(f"{path}: in use by another process for over {timeout_s:g} s ({exc})") from None
            if read_only:
                asked = _ask_for_release(path) or asked
        else:
            if asked:
                with contextlib.suppress(OSError):
                    read_request_path(path).unlink(missing_ok=True)
            # DuckDB draws its own progress bar on stdout for queries over 2 s (a derived-table
            # rebuild, a 10M-span report): it would garble our CLI's output and progress bar
            con.execute("set enable_progress_bar = false")
            return con
        time.sleep(_POLL_S)


def open_read_only(
    path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a span store that a receiver may be writing; close it soon.

    Use as ``with open_read_only(db) as con: ...``. While the writer holds the file this asks it to
    let go (it does so before its next commit, or within ~50 ms when idle) and waits up to
    ``timeout_s``.
    """
    if not Path(path).is_file():
        raise InputError(str(path), "no such span store (run `restorelens collect` or `restorelens load` first)")
    return connect(path, read_only=True, timeout_s=timeout_s)
