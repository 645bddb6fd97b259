"""One writer thread per span store: group commit, bounded backlog, and a file other processes can open.

Receiver requests submit decoded rows and wait for the commit; the thread inserts everything waiting
in one transaction (so 100 small requests cost one commit, not 100). Opening and closing the DuckDB
file costs about as much CPU as inserting a 512-span batch, so the thread keeps it open while it
has work and lets go only when a reader asks (``open_read_only`` touches ``<db>.read-request``;
checked before each group and every ``poll_s`` while idle), after ``idle_release_s`` without work,
and for ``reader_window_s`` after holding it ``max_hold_s`` under steady load (for readers that
cannot ask). While a reader holds the file, inserts wait up to ``lock_timeout_s`` and then fail
with StoreBusy (the receiver answers 503 + Retry-After); submissions beyond ``max_pending_spans``
are refused at once (429 + Retry-After), which bounds memory.

Engine metrics scraped by the same process (``collector/scrape/``) come through this thread too,
as Arrow tables for ``engine_metrics``: a second connection could not write the file (DuckDB
takes one writer) and would fight this one for it. They go in after the group's spans, in their
own transaction, so a failure of either never costs the other; a scrape that would take the
samples waiting beyond ``max_pending_samples`` is refused (Overloaded), even with none waiting,
which the scraper counts as samples dropped. (A span request with nothing waiting is always taken,
however large: its client has no other way to deliver it, and ``max_body_bytes`` bounds it.)
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from concurrent.futures import Future

import pyarrow as pa

from restorelens.collector.phases import Phases
from restorelens.collector.rows import SpanRows
from restorelens.collector.store import SpanStore
from restorelens.store import read_requested

__all__ = ["CHECKPOINT_THRESHOLD_BYTES", "DEFAULT_MAX_PENDING_SAMPLES", "Overloaded", "StoreWriter"]

log = logging.getLogger(__name__)

_STOP = object()

#: The write-ahead log the writer lets grow before a commit checkpoints it. DuckDB's default
#: (16 MiB) checkpointed about every 17k spans of 512-span requests, more often than the checkpoints
#: were worth, and stalled the request whose commit ran one (docs/collector.md, "Durability").
CHECKPOINT_THRESHOLD_BYTES = 128 * 1024 * 1024

#: Engine metric samples that may wait for the writer: a bound on memory, and the most rows one
#: scrape may hand it (``--max-series-per-scrape`` is checked against it).
DEFAULT_MAX_PENDING_SAMPLES = 100_000


class Overloaded(Exception):
    """Too many spans are waiting to be written; try again later."""


class StoreWriter:
    def __init__(
        self,
        db_path: str | os.PathLike[str],
        *,
        max_pending_spans: int = 200_000,
        max_pending_samples: int = DEFAULT_MAX_PENDING_SAMPLES,
        lock_timeout_s: float = 5.0,
        idle_release_s: float = 1.0,
        max_hold_s: float = 5.0,
        reader_window_s: float = 0.05,
        max_group_spans: int = 50_000,
        poll_s: float = 0.05,
        checkpoint_threshold_bytes: int = CHECKPOINT_THRESHOLD_BYTES,
        phases: Phases | None = None,
    ) -> None:
        self.max_pending_spans = max_pending_spans
        self.max_pending_samples = max_pending_samples
        self.idle_release_s = idle_release_s
        self.poll_s = poll_s
        self.max_hold_s = max_hold_s
        self.reader_window_s = reader_window_s
        self.max_group_spans = max_group_spans
        # Fails fast if the file is locked. One DuckDB thread: a few thousand rows per insert gain
        # nothing from parallelism, and coordinating threads cost the receiver a quarter of its CPU.
        # Derived tables for up to 100k spans at once (and whenever the file is let go)
        # (the writer thread's own CPU: with one DuckDB thread, the store's work runs on it)
        self._store = SpanStore(
            db_path, lock_timeout_s=lock_timeout_s, threads=1, max_underived_spans=100_000,
            checkpoint_threshold_bytes=checkpoint_threshold_bytes,
            phases=phases if phases is not None else Phases(time.thread_time),
        )
        self._store.release()
        self._queue: queue.Queue[object] = queue.Queue()
        self._pending = 0
        self._pending_samples = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._opened_at = 0.0

    @property
    def phases(self) -> Phases:
        """Seconds per step of the writes so far (``phases.py``)."""
        return self._store.phases

    @property
    def pending_spans(self) -> int:
        return self._pending

    def start(self) -> StoreWriter:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="span-store-writer", daemon=True)
            self._thread.start()
        return self

    def submit(self, rows: SpanRows) -> Future[tuple[int, int]]:
        """Queue rows for the next commit; the future gives (loaded, duplicate) once durable."""
        with self._lock:
            if self._pending and self._pending + len(rows) > self.max_pending_spans:
                raise Overloaded(f"{self._pending} spans waiting to be stored")
            self._pending += len(rows)
        future: Future[tuple[int, int]] = Future()
        self._queue.put((rows, future))
        return future

    def submit_engine_metrics(self, table: pa.Table) -> Future[int]:
        """Queue ``engine_metrics`` rows for the next commit; the future gives how many were stored.

        Raises Overloaded when they would take the samples waiting beyond ``max_pending_samples``,
        whatever is waiting: a scrape comes again, and one far larger than a real engine's must not
        pass because it arrived while the writer had caught up."""
        with self._lock:
            if self._pending_samples + table.num_rows > self.max_pending_samples:
                raise Overloaded(
                    f"{self._pending_samples} engine metric samples waiting to be stored; {table.num_rows} more "
                    f"exceed max_pending_samples {self.max_pending_samples}"
                )
            self._pending_samples += table.num_rows
        future: Future[int] = Future()
        self._queue.put((table, future))
        return future

    def stop(self, timeout_s: float = 30.0) -> None:
        """Write everything submitted so far, then close the store."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout_s)
            self._thread = None
        self._store.close()

    def _reader_waiting(self) -> bool:
        return self._store.path != ":memory:" and read_requested(self._store.path)

    def _next_group(self) -> tuple[list[tuple[SpanRows, Future[tuple[int, int]]]], bool]:
        idle_since = time.monotonic()
        while True:
            try:
                first = self._queue.get(timeout=self.poll_s if self._store.is_open else None)
                break
            except queue.Empty:
                if self._reader_waiting() or time.monotonic() - idle_since >= self.idle_release_s:
                    self._store.release()
        if first is _STOP:
            return [], True
        group = [first]
        spans = len(first[0])  # type: ignore[index]
        stop = False
        while spans < self.max_group_spans:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                stop = True
                break
            group.append(item)
            spans += len(item[0])  # type: ignore[index]
        return group, stop  # type: ignore[return-value]

    def _run(self) -> None:
        stop = False
        while not stop:
            group, stop = self._next_group()
            if not group:
                continue
            if self._store.is_open and (
                time.monotonic() - self._opened_at > self.max_hold_s or self._reader_waiting()
            ):
                self._store.release()
                time.sleep(self.reader_window_s)
            was_open = self._store.is_open
            spans = [(rows, future) for rows, future in group if isinstance(rows, SpanRows)]
            metrics = [(table, future) for table, future in group if not isinstance(table, SpanRows)]
            try:
                if spans:
                    self._insert_spans(spans)
                if metrics:
                    self._insert_metrics(metrics)
            finally:
                if not was_open and self._store.is_open:
                    self._opened_at = time.monotonic()
                with self._lock:
                    self._pending -= sum(len(rows) for rows, _ in spans)
                    self._pending_samples -= sum(table.num_rows for table, _ in metrics)
        self._store.release()

    def _insert_spans(self, group: list[tuple[SpanRows, Future[tuple[int, int]]]]) -> None:
        try:
            counts = self._store.insert_batches([rows for rows, _ in group])
        except Exception as exc:  # every waiter learns why; the receiver maps it to 503
            log.warning("span store insert failed: %s", exc)
            for _, future in group:
                future.set_exception(exc)
        else:
            for (_, future), count in zip(group, counts, strict=True):
                future.set_result(count)

    def _insert_metrics(self, group: list[tuple[pa.Table, Future[int]]]) -> None:
        try:
            self._store.insert_engine_metrics([table for table, _ in group])
        except Exception as exc:  # the scraper counts them as dropped; logged there per target, not here per batch
            for _, future in group:
                future.set_exception(exc)
        else:
            for table, future in group:
                future.set_result(table.num_rows)
