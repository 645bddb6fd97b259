"""Where the dashboard's spans come from: the ``--db`` store, the sample traces, or an uploaded file.

No Streamlit here. The store named by ``--db`` reaches the Streamlit process through
``DB_ENV``; sample and uploaded traces are loaded into a temporary store by the collector's loader.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from restorelens.collector import load_paths, open_read_only
from restorelens.collector.schema import TABLE
from restorelens.errors import InputError

__all__ = [
    "DB_ENV",
    "LIMITS_ENV",
    "SAMPLE_DIR",
    "configured_limits",
    "load_into_store",
    "sample_files",
    "store_stamp",
    "validate_store",
]

#: The span store the CLI's ``--db`` names (an absolute path).
DB_ENV = "RESTORELENS_DASHBOARD_DB"
#: Limits (``view.metric.stat=N``, separated by ``;``) the CLI's ``--max`` options name.
LIMITS_ENV = "RESTORELENS_DASHBOARD_LIMITS"
#: Recorded traces shipped with the repository (present in a source checkout).
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "sample_traces"

#: How long a page waits for a writer (``restorelens collect``) to release the store.
READ_LOCK_TIMEOUT_S = 5.0


def configured_limits() -> tuple[str, ...] | None:
    text = os.environ.get(LIMITS_ENV)
    if text is None:
        return None
    return tuple(part.strip() for part in text.split(";") if part.strip())


def sample_files(folder: Path | None = None) -> list[Path]:
    folder = SAMPLE_DIR if folder is None else folder
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".jsonl", ".json", ".jsonl.gz")))


def store_stamp(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """Size and modification time of the store and its write-ahead log: a cache key that changes
    whenever a writer commits, so cached frames never outlive new spans."""
    stamp: list[int] = []
    for candidate in (Path(path), Path(f"{path}.wal")):
        try:
            info = candidate.stat()
        except FileNotFoundError:
            stamp += [-1, -1]
        else:
            stamp += [info.st_size, info.st_mtime_ns]
    return tuple(stamp)


def validate_store(path: str | os.PathLike[str], *, timeout_s: float = READ_LOCK_TIMEOUT_S) -> None:
    """A one-line ``InputError`` unless ``path`` is a DuckDB file holding ``otel_traces``."""
    con = open_read_only(path, timeout_s=timeout_s)
    try:
        tables = {row[0] for row in con.execute("select table_name from duckdb_tables()").fetchall()}
    except duckdb.Error as exc:
        raise InputError(str(path), f"cannot read the store: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    if TABLE not in tables:
        raise InputError(str(path), f"not a restorelens span store (no {TABLE} table)")


def load_into_store(files: list[Path], db_path: Path) -> Path:
    """Load OTLP JSON(L) ``files`` into a new store at ``db_path``; nothing usable is an InputError."""
    try:
        summary = load_paths(files, db_path)
    except duckdb.Error as exc:
        raise InputError(str(files[0]) if files else "", str(exc).splitlines()[0]) from None
    if summary.loaded + summary.duplicate == 0:
        reason = summary.errors[0] if summary.errors else "no spans in it"
        raise InputError("", f"no OTLP spans could be read: {reason}")
    return db_path
