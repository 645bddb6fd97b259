"""Opening a span store file that one writer and any number of readers share.

DuckDB lets one process write a file, and while it has the file open no other process may open it,
not even read-only. So readers use :func:`open_read_only`, which retries while the file is locked,
asks the writer to let go by touching ``<db>.read-request``, and should be closed promptly; the
collector's writer (``collector/writer.py``) closes its connection (``SpanStore.release``) when
asked, when idle, and periodically.

Every store is opened by :func:`connect`, which is also where a file that is no span store is
turned away with a one-line error: one that is not DuckDB's (before DuckDB sees it), or whose
``otel_traces`` is some other table.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from pathlib import Path

import duckdb

from restorelens.store.schema import TABLE, create_schema
from restorelens.errors import InputError, MissingInput, RestorelensError, first_line

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
# A DuckDB file starts with a checksum (8 bytes) and then these (DuckDB's MAGIC_BYTES); SQLite's
# header is its own 16 bytes. Both are written at once when the file is created.
_DUCKDB_MAGIC_AT = 8
_DUCKDB_MAGIC = b"DUCK"
_SQLITE_HEADER = b"SQLite format 3\x00"
_NOT_DUCKDB = "not a valid DuckDB database"
_SHOWN_COLUMNS = 5


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


def _check_format(path: str | os.PathLike[str]) -> None:
    """An InputError unless ``path`` is absent, empty or begins as a DuckDB file does.

    Read before DuckDB opens the file: DuckDB hands a file it does not recognise to the extension
    that reads that format, a SQLite one to sqlite_scanner, which it first downloads. A report would
    then depend on the network, and fail with a page of DuckDB's advice.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return  # a writer creates it
    except OSError as exc:
        raise InputError(str(path), f"cannot read the file: {exc.strerror or exc}") from None
    # An empty file may be one a writer has just created and not written yet: DuckDB decides (a
    # lock conflict while the writer has it, else "not a valid DuckDB database file")
    if head and head[_DUCKDB_MAGIC_AT:_DUCKDB_MAGIC_AT + len(_DUCKDB_MAGIC)] != _DUCKDB_MAGIC:
        kind = " (it is a SQLite database)" if head == _SQLITE_HEADER else ""
        raise InputError(str(path), f"{_NOT_DUCKDB}{kind}")


def _table_columns(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(name, type) of each column of the store's ``otel_traces`` (table or view), in order."""
    return [(name, kind) for name, kind in con.execute(
        "select column_name, data_type from duckdb_columns() where database_name = current_database() "
        "and schema_name = 'main' and table_name = $table order by column_index", {"table": TABLE}
    ).fetchall()]


def _primary_key(con: duckdb.DuckDBPyConnection) -> list[str]:
    rows = con.execute(
        "select constraint_column_names from duckdb_constraints() where database_name = current_database() "
        "and schema_name = 'main' and table_name = $table and constraint_type = 'PRIMARY KEY'", {"table": TABLE}
    ).fetchall()
    return list(rows[0][0]) if rows else []


@functools.cache
def _schema_columns() -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """The columns and primary key ``schema.sql`` gives ``otel_traces``, as DuckDB reports them."""
    with duckdb.connect(":memory:") as con:
        create_schema(con)
        return tuple(_table_columns(con)), tuple(_primary_key(con))


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN_COLUMNS])
    return f"{shown} and {len(names) - _SHOWN_COLUMNS} more" if len(names) > _SHOWN_COLUMNS else shown


def _schema_problem(con: duckdb.DuckDBPyConnection, found: list[tuple[str, str]]) -> str | None:
    """What keeps the ``otel_traces`` whose columns are ``found`` from being the span store's table,
    if anything (a table of that name made by something else, or by hand)."""
    expected, expected_key = _schema_columns()
    names, expected_names = [name for name, _ in found], [name for name, _ in expected]
    problem = None
    if set(names) != set(expected_names):
        missing = [name for name in expected_names if name not in names]
        unknown = [name for name in names if name not in expected_names]
        details = [f"missing {_listed(missing)}"] if missing else []
        details += [f"unexpected {_listed(unknown)}"] if unknown and len(unknown) < len(names) else []
        problem = f"its columns are {_listed(names)} ({'; '.join(details)})"
    elif names != expected_names:
        problem = "its columns are in another order"  # rows go in by position (insert ... select *)
    else:
        for (name, kind), (_, expected_kind) in zip(found, expected, strict=True):
            if kind != expected_kind:
                problem = f'column "{name}" is {kind}, not {expected_kind}'
                break
        else:
            if tuple(_primary_key(con)) != expected_key:  # what makes loads idempotent (insert or ignore)
                problem = f"no primary key ({', '.join(expected_key)})"
    return None if problem is None else f"table {TABLE} is not the restorelens schema: {problem}"


def _check_store(con: duckdb.DuckDBPyConnection, path: str | os.PathLike[str], *, read_only: bool) -> None:
    """An InputError unless the file holds the span store's ``otel_traces``; a writer may find
    none (it creates the table), a reader may not."""
    found = _table_columns(con)
    if found:
        problem = _schema_problem(con, found)
    elif read_only:
        problem = f"not a restorelens span store (no {TABLE} table)"
    else:
        return
    if problem is not None:
        raise InputError(str(path), problem)


def connect(path: str | os.PathLike[str], *, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    """Open the span store ``path``, retrying while another process holds it; StoreBusy after ``timeout_s``.

    A reader kept out asks the writer to let go (see :func:`read_requested`) on every retry. A file
    that is not DuckDB's, or whose ``otel_traces`` is not the span store's table (or, for a reader,
    absent), is an InputError naming it and what is wrong.
    """
    if str(path) != ":memory:":
        _check_format(path)
    deadline = time.monotonic() + timeout_s
    asked = False
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
        except (duckdb.IOException, duckdb.ConnectionException) as exc:
            if not _is_lock_conflict(exc):
                if "not a valid DuckDB database file" in str(exc):
                    raise InputError(str(path), _NOT_DUCKDB) from None
                raise InputError(str(path), f"cannot open the DuckDB file: {first_line(exc)}") from None
            if time.monotonic() >= deadline:
                raise StoreBusy(f"{path}: in use by another process for over {timeout_s:g} s ({exc})") from None
            if read_only:
                asked = _ask_for_release(path) or asked
        else:
            if asked:
                with contextlib.suppress(OSError):
                    read_request_path(path).unlink(missing_ok=True)
            try:
                # DuckDB draws its own progress bar on stdout for queries over 2 s (a derived-table
                # rebuild, a 10M-span report): it would garble our CLI's output and progress bar
                con.execute("set enable_progress_bar = false")
                # Nothing the store's SQL uses lives outside the extensions DuckDB ships loaded; a
                # store (or a hand-made view in it) that calls for another must not make a report
                # download one. Set here, not as connect's config: DuckDB refuses a connection to a
                # file already open in this process under another config, so a plain
                # duckdb.connect of the store (a test, a notebook) would stop working.
                con.execute("set autoinstall_known_extensions = false")
                con.execute("set autoload_known_extensions = false")
                _check_store(con, path, read_only=read_only)
            except BaseException:
                con.close()
                raise
            return con
        time.sleep(_POLL_S)


def open_read_only(
    path: str | os.PathLike[str], *, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S
) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a span store that a receiver may be writing; close it soon.

    Use as ``with open_read_only(db) as con: ...``. While the writer holds the file this asks it to
    let go (it does so before its next commit, or within ~50 ms when idle) and waits up to
    ``timeout_s``. A missing file, one that is not DuckDB's, or one without the span store's
    ``otel_traces`` is an InputError naming it.
    """
    if not Path(path).is_file():
        raise MissingInput(str(path), "no such span store (run `restorelens collect` or `restorelens load` first)")
    return connect(path, read_only=True, timeout_s=timeout_s)
