"""Load trace files (many files, globs, folders) into a span store, telling each file's format by its content.

Read: OTLP JSON (lines or one document) and length-prefixed OTLP protobuf, as the Collector's file
exporter writes them; Jaeger JSON (the query API's answer, the UI's download); Grafana Tempo's
trace-by-ID JSON (``batches`` and the v2 ``trace``); Parquet written by ``restorelens export``.
Any of the stream formats may be gzip- or zstd-compressed.

A malformed line (or message) is reported as ``file:line: reason`` and skipped; a malformed span is
reported with its position and skipped; a file that cannot be read at all as ``file: reason``;
everything else loads. Loading the same files twice stores nothing new (the spans count as
duplicates).
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import queue
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from restorelens.collector.jaeger import decode_jaeger_json, is_jaeger_json
from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.decode_tempo import decode_tempo_json, is_tempo_json
from restorelens.collector import fast_jsonl
from restorelens.collector.fast_jsonl import (
    LineTooLong,
    NativeDeclined,
    read_collector_jsonl,
    read_collector_jsonl_native,
)
from restorelens.collector.files import (
    DecompressedTooLarge,
    Payload,
    compression,
    is_parquet,
    open_stream,
    read_payloads,
)
from restorelens.collector.parquet import load_parquet
from restorelens.collector.phases import DECODE, Phases
from restorelens.collector.proto_columns import decode_traces_proto_columns
from restorelens.collector.rows import PayloadError, SpanRows
from restorelens.collector.staging import StagedBlock, staged_blocks, staging_folder
from restorelens.collector.store import SpanStore
from restorelens.collector.summary import FileRead, LoadSummary
from restorelens.errors import InputError
from restorelens.store import DEFAULT_LOCK_TIMEOUT_S

__all__ = ["FORMATS", "expand_paths", "load_paths"]

log = logging.getLogger(__name__)

#: Spans stored before their derived tables are written (docs/collector.md: cheaper in bulk).
DERIVE_EVERY_SPANS = 200_000
#: DuckDB threads while the fast path inserts a file's blocks: an insert into the keyed table runs
#: on one thread anyway, the decoder thread has the other core, and a second DuckDB thread only
#: cost CPU (benchmarks/RESULTS.md). The derived tables after the commit use every thread again.
INSERT_THREADS = 1
#: Spans per insert transaction: large enough to amortise DuckDB's per-statement cost.
DEFAULT_BATCH_SPANS = 50_000

OTLP_JSON = "OTLP JSON"
OTLP_PROTOBUF = "OTLP protobuf"
JAEGER_JSON = "Jaeger JSON"
TEMPO_JSON = "Tempo JSON"
PARQUET = "Parquet (otel_traces)"
#: Every format a file may be read as, as the loader names them.
FORMATS = (OTLP_JSON, OTLP_PROTOBUF, JAEGER_JSON, TEMPO_JSON, PARQUET)


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
    store: SpanStore,
    path: Path,
    on_bytes: Callable[[int], None],
    summary: LoadSummary,
    *,
    skip_existing: bool,
    block_bytes: int,
    native: bool = False,
    max_decompressed_bytes: int | None = None,
) -> int | bool | None:
    """Load a Collector-shaped JSON-lines file column-wise, in one transaction.

    The span count when loaded, False when the file needs the lenient decoder, None when
    ``skip_existing`` is off and some span was already stored (nothing was written: redo it with
    ``skip_existing``). Raises LineTooLong (nothing written) for a line longer than ``block_bytes``,
    and NativeDeclined (nothing written) when ``native`` and the compiled decoder does not take the file.
    """
    try:
        with (
            open_stream(path, on_bytes, max_decompressed_bytes) as (stream, is_json),
            staging_folder() as folder,
            store.transaction(threads=INSERT_THREADS) as con,
        ):
            if not is_json:
                return False
            loaded = total = 0
            if native:  # its maps have no repeated or null key: the attributes may go as Parquet
                blocks = staged_blocks(read_collector_jsonl_native(stream, store.phases, block_bytes), folder,
                                       store.phases)
            else:
                blocks = read_collector_jsonl(stream, store.phases, block_bytes)
            with _read_ahead(blocks) as tables:
                for table in tables:
                    try:
                        loaded += store.insert_table(con, table, skip_existing=skip_existing)
                    finally:
                        if isinstance(table, StagedBlock):
                            table.discard()
                    total += table.num_rows
    except duckdb.ConstraintException:
        return None
    except (LineTooLong, NativeDeclined, DecompressedTooLarge):
        raise
    except Exception as exc:  # Unsupported, or anything else: the lenient decoder redoes it and says why
        log.debug("%s: lenient decoder (%s)", path, exc)
        return False
    summary.loaded += loaded
    summary.duplicate += total - loaded
    return total


@contextlib.contextmanager
def _read_ahead(
    tables: Generator[pa.Table | StagedBlock, None, None],
) -> Iterator[Iterator[pa.Table | StagedBlock]]:
    """``tables``, each read and built in a thread while the caller inserts the one before.

    Arrow's reader and compute kernels and DuckDB's insert all release the GIL, so on two cores
    the next block's decoding runs beside this block's insert. One block waits at most (bounded
    memory). Leaving the block early (an insert failed) stops the thread after its current block.
    """
    ready: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1)
    stop = threading.Event()

    def produce() -> None:
        try:
            for table in tables:
                if stop.is_set():
                    return
                ready.put(("table", table))
            ready.put(("end", None))
        except BaseException as exc:  # handed to the caller, raised there
            ready.put(("error", exc))
        finally:
            tables.close()  # the reader lets go of its stream now, before the caller closes it

    def consume() -> Iterator[pa.Table | StagedBlock]:
        while True:
            kind, value = ready.get()
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value

    thread = threading.Thread(target=produce, name="jsonl-read-ahead", daemon=True)
    thread.start()
    try:
        yield consume()
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting to put its block
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.05)
        thread.join()


def _claims(obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, format) for each key of ``obj`` that marks it as one of the JSON formats."""
    found = [(key, OTLP_JSON) for key in ("resourceSpans", "resource_spans") if key in obj]
    if "data" in obj:
        found.append(("data", JAEGER_JSON))
    if "batches" in obj:
        found.append(("batches", TEMPO_JSON))
    if isinstance(obj.get("trace"), dict):
        found.append(("trace", TEMPO_JSON))
    return found


def _decode_json(obj: Any, rows: SpanRows, where: str, check_unicode: bool) -> tuple[str, str]:
    """Decode one parsed JSON document by its shape; its format and a note for the user ('' if none)."""
    if isinstance(obj, dict):
        claims = _claims(obj)
        if len({name for _, name in claims}) > 1:
            # read as either, the other's spans would be dropped without a word
            keys = " and ".join(f'"{key}" ({name})' for key, name in claims)
            raise PayloadError(f"ambiguous document: it has {keys}; a document holds one format")
    if is_jaeger_json(obj):
        return JAEGER_JSON, decode_jaeger_json(obj, rows, where, check_unicode=check_unicode)
    if is_tempo_json(obj):
        return TEMPO_JSON, decode_tempo_json(obj, rows, where, check_unicode=check_unicode)
    if not isinstance(obj, dict):
        raise PayloadError(
            f'expected a JSON object (OTLP "resourceSpans", Jaeger "data", Tempo "batches" or "trace"), '
            f"found a JSON {type(obj).__name__}"
        )
    decode_traces_json(obj, rows, where, check_unicode=check_unicode)
    return OTLP_JSON, ""


def _timed(payloads: Iterator[Payload], phases: Phases) -> Iterator[Payload]:
    """``payloads``, the time spent reading and parsing each counted as decoding."""
    while True:
        with phases.timing(DECODE):
            payload = next(payloads, None)
        if payload is None:
            return
        yield payload


def _labelled(name: str, packing: str) -> str:
    return f"{name} ({packing})" if packing else name


def load_paths(
    paths_or_globs: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    db_path: str | os.PathLike[str],
    *,
    progress: Callable[[int, int], None] | None = None,
    batch_spans: int = DEFAULT_BATCH_SPANS,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    fast: bool = True,
    max_decompressed_bytes: int | None = None,
) -> LoadSummary:
    """Load every span of the given files into ``db_path``.

    ``progress(done_bytes, total_bytes)`` is called as the files (compressed sizes) are read.
    ``fast=False`` skips the Arrow fast path (every file goes through the lenient decoder).
    ``max_decompressed_bytes`` bounds what each JSON or length-prefixed file holds once
    decompressed, its zstd messages included: past it the load stops with ``DecompressedTooLarge``
    (an ``InputError``) before more is inflated. Parquet is bounded by its own batches.
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
    with SpanStore(
        db_path, lock_timeout_s=lock_timeout_s, max_underived_spans=DERIVE_EVERY_SPANS, phases=summary.phases
    ) as store:
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
            if is_parquet(path):
                malformed = summary.malformed
                count = load_parquet(store, path, on_bytes, summary, skip_existing=False)
                if count is None:  # spans already stored: again, with the key checked row by row
                    done_bytes = file_start
                    count = load_parquet(store, path, on_bytes, summary, skip_existing=True)
                read_as = (PARQUET,) if summary.malformed == malformed else ()
                summary.inputs.append(FileRead(path, read_as, count or 0))
                continue
            packing = compression(path)
            if fast:
                # New spans go in by plain insert (half the CPU of a per-row key check); a file
                # holding spans already stored is read again with the check.
                # The compiled decoder first; a file it declines goes to Arrow's reader, in small
                # blocks (less memory) and, for a longer line, in large ones; a file none of them
                # takes, to the lenient decoder.
                outcome: int | bool | None = False
                readers = ((True, fast_jsonl.BLOCK_BYTES), (False, fast_jsonl.BLOCK_BYTES),
                           (False, fast_jsonl.LONG_LINE_BLOCK_BYTES))
                for native, block_bytes in readers:
                    try:
                        for skip_existing in (False, True):
                            outcome = _load_fast(store, path, on_bytes, summary, skip_existing=skip_existing,
                                                 block_bytes=block_bytes, native=native,
                                                 max_decompressed_bytes=max_decompressed_bytes)
                            if outcome is not None:
                                break
                            done_bytes = file_start  # spans already stored: again, the key checked row by row
                        break
                    except (LineTooLong, NativeDeclined) as exc:
                        if native:
                            again = f"{exc}, read again by Arrow's reader"
                        elif block_bytes < fast_jsonl.LONG_LINE_BLOCK_BYTES:
                            again = f"{exc}, read again in larger blocks"
                        else:
                            again = f"lenient decoder ({exc})"
                        log.debug("%s: %s", path, again)
                        done_bytes = file_start
                if outcome is not False and outcome is not None:
                    summary.inputs.append(FileRead(path, (_labelled(OTLP_JSON, packing),), outcome))
                    continue
            done_bytes = file_start  # the slow path reads the file again
            formats: dict[str, None] = {}
            notes: dict[str, None] = {}
            file_spans = 0
            for payload in _timed(read_payloads(path, on_bytes, max_decompressed_bytes), summary.phases):
                where = f"{path}:{payload.number}"
                if payload.error:
                    summary.malformed += 1
                    summary.add_error(f"{where}: {payload.error}")
                    continue
                mark = len(rows.rows)
                before = len(rows)
                try:
                    with summary.phases.timing(DECODE):
                        if payload.data is not None:
                            decode_traces_proto_columns(payload.data, rows, f"{where}: ")
                            name, note = OTLP_PROTOBUF, ""
                        else:
                            name, note = _decode_json(payload.parsed, rows, f"{where}: ", payload.may_hold_surrogates)
                except PayloadError as exc:
                    del rows.rows[mark:]
                    summary.malformed += 1
                    summary.add_error(f"{where}: {exc}")
                    continue
                formats[_labelled(name, packing)] = None
                if note:
                    notes[f"line {payload.number}: {note}"] = None
                file_spans += len(rows) - before
                if len(rows) >= batch_spans:
                    flush()
            summary.inputs.append(FileRead(path, tuple(formats), file_spans, tuple(notes)))
        flush()
    return summary
