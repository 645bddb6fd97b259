"""Where the dashboard's spans come from: the ``--db`` store, the sample traces, or an uploaded file.

No Streamlit here. The store named by ``--db`` reaches the Streamlit process through the
environment (``environment.DB_ENV``); sample and uploaded traces (``uploads``) are loaded into a
temporary store by the collector's loader, in one folder per dashboard process (``work_folder``),
removed when the process exits.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import time
from pathlib import Path

import duckdb

from restorelens.analysis import Window
from restorelens.collector import load_paths
from restorelens.errors import InputError
from restorelens.store import TABLE, open_read_only

__all__ = [
    "LEGACY_PREFIXES",
    "READ_LOCK_TIMEOUT_S",
    "SAMPLE_DIR",
    "STALE_AGE_S",
    "WAREHOUSE_REFRESH_S",
    "WORK_PREFIX",
    "is_warehouse",
    "load_into_store",
    "remove_stale_folders",
    "sample_files",
    "store_stamp",
    "validate_store",
    "work_folder",
]

#: Recorded traces shipped with the repository (present in a source checkout).
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "sample_traces"

#: ClickHouse frames are read again after this long (a fleet's table grows all the time).
WAREHOUSE_REFRESH_S = 60
#: How long a page waits for a writer (``restorelens collect``) to release the store.
READ_LOCK_TIMEOUT_S = 5.0

#: One folder per dashboard process holds its uploaded and sample stores: ``<prefix><pid>-<random>``.
WORK_PREFIX = "restorelens-dashboard-"
#: A process folder is left over (its dashboard was killed) when its pid is gone and it is this old.
STALE_AGE_S = 24 * 3600.0
#: Folders earlier versions made per upload or sample load and never removed: stale at the same age.
LEGACY_PREFIXES = ("restorelens-upload-", "restorelens-samples-")


def sample_files(folder: Path | None = None) -> list[Path]:
    folder = SAMPLE_DIR if folder is None else folder
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".jsonl", ".json", ".jsonl.gz")))


def is_warehouse(store: str | os.PathLike[str]) -> bool:
    """Whether ``store`` names ClickHouse or chDB (``--source``) rather than a DuckDB file."""
    return str(store).startswith(("chdb:", "clickhouse://", "clickhouses://"))


def store_stamp(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """Size and modification time of the store and its write-ahead log: a cache key that changes
    whenever a writer commits, so cached frames never outlive new spans. ClickHouse has no file to
    look at: its frames are kept for the minute (``WAREHOUSE_REFRESH_S``)."""
    if is_warehouse(path):
        return (int(time.time() // WAREHOUSE_REFRESH_S),)
    stamp: list[int] = []
    for candidate in (Path(path), Path(f"{path}.wal")):
        try:
            info = candidate.stat()
        except FileNotFoundError:
            stamp += [-1, -1]
        else:
            stamp += [info.st_size, info.st_mtime_ns]
    return tuple(stamp)


def validate_store(path: str | os.PathLike[str], *, timeout_s: float = READ_LOCK_TIMEOUT_S,
                   window: Window = Window()) -> bool:
    """Whether ``path`` holds spans (in ``window``); a one-line ``InputError`` unless it is a DuckDB
    file holding ``otel_traces``, or a ClickHouse / chDB source (``--source``) whose
    ``otel_traces`` can be read (for ``window``)."""
    if is_warehouse(path):
        from restorelens.analysis import open_analysis
        from restorelens.sources import parse_source

        with open_analysis(parse_source(str(path)), window=window) as analysis:
            analysis.probe()
            return bool(analysis.holds_spans())
    from restorelens.analysis import window_filter

    con = open_read_only(path, timeout_s=timeout_s)
    try:
        tables = {row[0] for row in con.execute("select table_name from duckdb_tables()").fetchall()}
        if TABLE not in tables:
            raise InputError(str(path), f"not a restorelens span store (no {TABLE} table)")
        where, parameters = window_filter(window, dialect="duckdb", table=TABLE)
        return bool(con.execute(f"select exists (select 1 from {TABLE} where {where})", parameters).fetchall()[0][0])
    except duckdb.Error as exc:
        raise InputError(str(path), f"cannot read the store: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()


def load_into_store(files: list[Path], db_path: Path, *, shown_as: str | None = None,
                    max_decompressed_bytes: int | None = None) -> Path:
    """Load OTLP ``files`` into a new store at ``db_path``; nothing usable is an InputError.

    ``shown_as`` names the one file in messages instead of its path (an upload's temporary copy,
    which means nothing to the user who sent it). ``max_decompressed_bytes`` is the loader's bound
    (``load_paths``): past it, ``DecompressedTooLarge``.
    """

    def named(text: str) -> str:
        return text.replace(str(files[0]), shown_as) if shown_as is not None and files else text

    try:
        summary = load_paths(files, db_path, max_decompressed_bytes=max_decompressed_bytes)
    except duckdb.Error as exc:
        raise InputError(named(str(files[0])) if files else "", named(str(exc).splitlines()[0])) from None
    if summary.loaded + summary.duplicate == 0:
        reason = named(summary.errors[0]) if summary.errors else "no spans in it"
        raise InputError("", f"no OTLP spans could be read: {reason}")
    return db_path


# --- the process folder -----------------------------------------------------------------------


@functools.cache
def work_folder() -> Path:
    """This process's folder for uploaded and sample stores, made on first use and removed at exit.

    Streamlit returns normally on Ctrl-C and SIGTERM, so the exit hook runs then; a killed process
    cannot clean up, so the folders killed dashboards left are removed here first.
    """
    parent = Path(tempfile.gettempdir())
    remove_stale_folders(parent)
    folder = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-", dir=parent))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def remove_stale_folders(parent: Path, *, now_s: float | None = None) -> list[Path]:
    """Remove the folders under ``parent`` that dashboards gone for good left behind; returns them.

    A process folder goes when its pid is not running and it is older than ``STALE_AGE_S``: the age
    keeps a live dashboard another pid namespace hides; the pid keeps a long idle one. Folders of
    earlier versions go by age alone. Another user's folders stay (removing them fails quietly).
    """
    now_s = time.time() if now_s is None else now_s
    removed = []
    for prefix in (WORK_PREFIX, *LEGACY_PREFIXES):
        for folder in parent.glob(f"{prefix}*"):
            try:
                old = now_s - folder.stat().st_mtime > STALE_AGE_S
            except OSError:  # removed meanwhile by another dashboard
                continue
            if not folder.is_dir() or not old:
                continue
            if prefix == WORK_PREFIX and _running(_pid_in(folder.name[len(prefix):])):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _pid_in(rest: str) -> int | None:
    head = rest.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _running(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
