"""An experiment's output folder: its own, or the one of an experiment it resumes; every file whole.

``restorelens experiment --out DIR`` writes ``DIR/runs/*.jsonl`` (one per run), ``DIR/spans.duckdb``,
``DIR/summary.json``, ``DIR/summary.md`` and ``DIR/experiment.json``, the settings its runs were
played with. A folder holding any of them is an earlier experiment's: refused, so two experiments'
runs never mix, unless ``--resume`` is given and the settings are the same (then the runs whose
files exist are kept, the others played, the store and the summaries built anew). Every file is
written under a hidden partial name next to it and renamed when complete, so an interrupted
experiment leaves whole runs and no half-built store or summary. While an experiment writes the
folder it holds a lock there (``flock`` on ``DIR/.experiment.lock``): a second experiment given
the same folder, resuming or not, is refused at once rather than playing the same runs into it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from restorelens.errors import InputError, RestorelensError, SettingError

__all__ = ["LOCK", "MANIFEST", "STORE", "SUMMARY_JSON", "SUMMARY_MD", "build_store", "earlier_files",
           "partial_file", "prepare", "write_whole"]

#: The settings the folder's runs were played with (``prepare``).
MANIFEST = "experiment.json"
STORE = "spans.duckdb"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
RUNS = "runs"
#: Held (``flock``) by the experiment writing the folder; kept afterwards: removing it could let a
#: second experiment lock a new file while the first still holds the old one.
LOCK = ".experiment.lock"


def partial_file(path: Path) -> Path:
    """Where ``path`` is written until it is complete: hidden, next to it, so a rename publishes it
    at once and no reader (nor a resumed experiment) takes it for a whole file."""
    return path.with_name(f".{path.name}.partial")


def earlier_files(out: Path) -> list[str]:
    """What of an earlier experiment ``out`` holds: its runs, store, summaries, settings, or a
    partial file a killed one left."""
    found = [name for name in (MANIFEST, STORE, SUMMARY_JSON, SUMMARY_MD) if (out / name).exists()]
    found += sorted(path.name for path in out.glob(".*.partial"))
    runs = out / RUNS
    if runs.is_dir() and any(runs.iterdir()):
        found.insert(0, f"{RUNS}/")
    return found


@contextlib.contextmanager
def prepare(out: Path, settings: dict[str, Any], *, resume: bool) -> Iterator[None]:
    """Hold ``out`` for this experiment while the block runs, having checked that it may take it
    and recorded its ``settings`` there: a ``SettingError`` naming --out when another experiment
    is writing it, or it holds an earlier experiment's files and ``resume`` is off; naming
    --resume when that experiment was played with other settings."""
    settings = json.loads(json.dumps(settings))  # as they read back from the file
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = open(out / LOCK, "a+", encoding="utf-8")  # noqa: SIM115 -- held until the block ends
    except OSError as exc:
        raise InputError(str(out), f"cannot make the output folder: {exc.strerror or exc}") from None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "unknown"
            raise SettingError("--out", f"{out} is being written by another experiment (pid {holder}): wait for it "
                                        "to end, or give a new folder") from None
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        # checked under the lock: two experiments starting on one new folder both saw it empty
        found = earlier_files(out)
        if found and not resume:
            raise SettingError("--out", f"{out} holds an earlier experiment's files ({', '.join(found)}): give a "
                                        "new folder, or --resume to finish that experiment")
        if found:
            _check_same(out, settings)
        write_whole(out / MANIFEST, json.dumps({"settings": settings}, indent=2) + "\n")
        yield


def _check_same(out: Path, settings: dict[str, Any]) -> None:
    manifest = out / MANIFEST
    try:
        saved = json.loads(manifest.read_text(encoding="utf-8"))["settings"]
        keys = sorted(set(saved) | set(settings))
    except FileNotFoundError:
        raise SettingError("--resume", f"{out} has no {MANIFEST}, so what its runs were played with is unknown: "
                                       "give a new folder") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SettingError("--resume", f"{manifest} is not an experiment's settings ({exc}): give a new folder") from None
    for key in keys:
        if saved.get(key) != settings.get(key):
            raise SettingError("--resume", f"{out}'s runs were played with {key} {json.dumps(saved.get(key))}, this "
                                           f"experiment's with {json.dumps(settings.get(key))}: give the same "
                                           "settings, or a new folder")


def write_whole(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole: to its partial file, renamed over it when written."""
    partial = partial_file(path)
    try:
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        raise InputError(str(path), f"cannot write: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def build_store(files: Sequence[Path], out: Path) -> tuple[Path, int]:
    """Load the runs' ``files`` into a new ``out/spans.duckdb``, replacing any there: into a partial
    store first, renamed over it once loaded. Returns the store and the spans loaded."""
    from restorelens.collector import load_paths

    db = out / STORE
    partial = partial_file(db)
    _remove_store(partial)  # a killed experiment's
    try:
        loaded = load_paths(files, partial)
        if loaded.errors:
            raise RestorelensError(f"{db}: spans of the runs could not be loaded: {loaded.errors[0]}")
        # the store is closed and checkpointed: a write-ahead log left next to the old one is not its
        Path(f"{db}.wal").unlink(missing_ok=True)
        os.replace(partial, db)
    finally:
        _remove_store(partial)
    return db, loaded.loaded


def _remove_store(db: Path) -> None:
    for path in (db, Path(f"{db}.wal")):
        path.unlink(missing_ok=True)
