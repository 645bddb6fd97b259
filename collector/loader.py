"""Load Collector file-exporter output (many files, globs) into a span store.

A malformed line (or message) is reported as ``file:line: reason`` and skipped; a malformed span is
reported with its position and skipped; everything else loads. Loading the same files twice stores
nothing new (the spans count as duplicates).
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.fast_jsonl import read_collector_jsonl
from restorelens.collector.files import open_stream, read_payloads
from restorelens.collector.proto_columns import decode_traces_proto_columns
from restorelens.collector.rows import MAX_ERRORS, PayloadError, SpanRows
from restorelens.collector.store import DEFAULT_LOCK_TIMEOUT_S, SpanStore
from restorelens.errors import InputError

__all__ = ["LoadSummary", "expand_paths", "load_paths"]

log = logging.getLogger(__name__)

#: Spans stored before their derived tables are written (docs/collector.md: cheaper in bulk).
DERIVE_EVERY_SPANS = 200_000
#: Spans per insert transaction: large enough to amortise DuckDB's per-statement cost.
DEFAULT_BATCH_SPANS = 50_000


@dataclass
class LoadSummary:
    files: int = 0
    loaded: int = 0
    duplicate: int = 0
    rejected: int = 0
    malformed: int = 0  # lines or messages that were not OTLP traces at all
    errors: list[str] = field(default_factory=list)

    def add_error(self, message: str) -> None:
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(message)

    def describe(self) -> str:
        return (
            f"{self.files} file(s): {self.loaded} spans loaded, {self.duplicate} duplicate, "
            f"{self.rejected} rejected, {self.malformed} malformed line(s)"
        )


def expand_paths(paths_or_globs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files named, matched by globs (``**`` recurses), or inside named directories; in order, once each.

    A glob or directory that yields no file is an InputError, like a missing file: loading nothing from
    it is almost always a wrong path, and a silent "0 file(s)" would let a pipeline carry on.
    """
    found: list[Path] = []
    for item in paths_or_globs:
        text = str(item)
        if glob.has_magic(text):
            files = sorted(p for p in map(Path, glob.glob(text, recursive=True)) if p.is_file())
            if not files:
                raise InputError(text, "no files match")
        elif Path(text).is_dir():
            files = sorted(p for p in Path(text).rglob("*") if p.is_file())
            if not files:
                raise InputError(text, "no files in this folder")
        elif Path(text).is_file():
            files = [Path(text)]
        else:
            raise InputError(text, "no such file")
        found.extend(files)
    unique = list(dict.fromkeys(found))
    return unique


def _load_fast(
    store: SpanStore, path: Path, on_bytes: Callable[[int], None], summary: LoadSummary, *, skip_existing: bool
) -> bool | None:
    """Load a Collector-shaped JSON-lines file column-wise, in one transaction.

    True when loaded, False when the file needs the lenient decoder, None when ``skip_existing`` is
    off and some span was already stored (nothing was written: redo it with ``skip_existing``).
    """
    try:
        with open_stream(path, on_bytes) as (stream, is_json), store.transaction() as con:
            if not is_json:
                return False
            loaded = total = 0
            for table in read_collector_jsonl(stream):
                loaded += store.insert_table(con, table, skip_existing=skip_existing)
                total += table.num_rows
    except duckdb.ConstraintException:
        return None
    except Exception as exc:  # Unsupported, or anything else: the lenient decoder redoes it and says why
        log.debug("%s: lenient decoder (%s)", path, exc)
        return False
    summary.loaded += loaded
    summary.duplicate += total - loaded
    return True


def load_paths(
    paths_or_globs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    db_path: str | os.PathLike[str],
    *,
    progress: Callable[[int, int], None] | None = None,
    batch_spans: int = DEFAULT_BATCH_SPANS,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    fast: bool = True,
) -> LoadSummary:
    """Load every span of the given files into ``db_path``.

    ``progress(done_bytes, total_bytes)`` is called as the files (compressed sizes) are read.
    ``fast=False`` skips the Arrow fast path (every file goes through the lenient decoder).
    """
    if isinstance(paths_or_globs, (str, os.PathLike)):
        paths_or_globs = [paths_or_globs]
    files = expand_paths(paths_or_globs)
    total_bytes = sum(p.stat().st_size for p in files)
    done_bytes = 0

    def on_bytes(n: int) -> None:
        nonlocal done_bytes
        done_bytes += n
        if progress is not None:
            progress(done_bytes, total_bytes)

    summary = LoadSummary(files=len(files))
    # derived tables for 200k spans at a time (or a whole file, once committed), not per block
    with SpanStore(db_path, lock_timeout_s=lock_timeout_s, max_underived_spans=DERIVE_EVERY_SPANS) as store:
        rows = SpanRows()

        def flush() -> None:
            nonlocal rows
            result = store.insert_rows(rows)
            summary.loaded += result.loaded
            summary.duplicate += result.duplicate
            summary.rejected += result.rejected
            for message in result.errors:
                summary.add_error(message)
            rows = SpanRows()

        for path in files:
            file_start = done_bytes
            if fast:
                # New spans go in by plain insert (half the CPU of a per-row key check); a file
                # holding spans already stored is read again with the check.
                outcome = _load_fast(store, path, on_bytes, summary, skip_existing=False)
                if outcome is None:
                    done_bytes = file_start
                    outcome = _load_fast(store, path, on_bytes, summary, skip_existing=True)
                if outcome:
                    continue
            done_bytes = file_start  # the slow path reads the file again
            for payload in read_payloads(path, on_bytes):
                where = f"{path}:{payload.number}"
                if payload.error:
                    summary.malformed += 1
                    summary.add_error(f"{where}: {payload.error}")
                    continue
                mark = len(rows.rows)
                try:
                    if payload.data is not None:
                        decode_traces_proto_columns(payload.data, rows, f"{where}: ")
                    else:
                        decode_traces_json(payload.parsed, rows, f"{where}: ",
                                           check_unicode=payload.may_hold_surrogates)
                except PayloadError as exc:
                    del rows.rows[mark:]
                    summary.malformed += 1
                    summary.add_error(f"{where}: {exc}")
                if len(rows) >= batch_spans:
                    flush()
        flush()
    return summary
