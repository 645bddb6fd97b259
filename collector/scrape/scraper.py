"""The scraping loop: each target scraped every ``interval_s`` on a thread of its own, its rows
handed to the receiver's :class:`~restorelens.collector.writer.StoreWriter`.

Each thread runs its own asyncio loop, so that a deadline can cancel the whole exchange. A scrape
that fails (unreachable, timeout, not 200, over ``max_scrape_bytes``, unparsable) is counted and
skipped; it never reaches span ingest. Its target logs one line when it starts failing and one when
it recovers, not one per attempt. An answer holding more than ``max_series_per_scrape`` series of
the kept metrics is read and stored up to that many (the rest not read), counted, and logged once
per target: what one scrape costs the collector and the store is bounded whatever a target sends.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

import httpx
import pyarrow as pa

from restorelens.collector.scrape.engine_metrics import metrics_table
from restorelens.collector.scrape.fetch import ScrapeFailed, scrape_once, target_problem

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_MAX_SCRAPE_BYTES",
    "DEFAULT_MAX_SERIES_PER_SCRAPE",
    "DEFAULT_SCRAPE_TIMEOUT_S",
    "MetricsSink",
    "ScrapeCounts",
    "Scraper",
]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.25
DEFAULT_SCRAPE_TIMEOUT_S = 1.0
DEFAULT_MAX_SCRAPE_BYTES = 8 * 1024 * 1024
#: Series of the kept metrics read from one answer. Real vLLM 0.32 has 6 (4 kept, and the 2 of
#: vllm:num_requests_waiting_by_reason, whose name begins with a kept one) per engine and model:
#: this is 166 engines' worth, and 1,000 rows a scrape at most (4,000 a second at 0.25 s), which
#: costs the collector a few percent of a core instead of the cores 141,593 series took.
DEFAULT_MAX_SERIES_PER_SCRAPE = 1_000


class MetricsSink(Protocol):
    """Where a scrape's rows go: the receiver's StoreWriter."""

    def submit_engine_metrics(self, table: pa.Table) -> Future[int]: ...


@dataclass
class ScrapeCounts:
    """One target's counts, read by the receiver's /metrics (only this target's thread adds)."""

    ok: int = 0
    failed: int = 0
    samples_stored: int = 0
    samples_dropped: int = 0  # scraped but not stored: the store was busy, overloaded or failing
    capped: int = 0  # scrapes whose answer held more than max_series_per_scrape series to read
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:  # the writer thread's callbacks add too
            setattr(self, name, getattr(self, name) + n)


class _Target:
    def __init__(self, url: str, counts: ScrapeCounts) -> None:
        self.url = url
        self.counts = counts
        self.failing_since: int | None = None  # failures in a row, once logged
        self.store_failing = False  # set and cleared by the writer thread's callbacks
        self.cap_logged = False
        self.thread: threading.Thread | None = None
        self.cancel: Callable[[], object] | None = None  # ends its loop at once, from another thread


class Scraper:
    """Scrape each of ``targets`` every ``interval_s`` into ``sink``, one thread per target.

    A slow target delays only its own next scrape (a tick missed is skipped, not caught up).
    ``counts`` maps each target to its :class:`ScrapeCounts`.
    """

    def __init__(
        self,
        targets: Sequence[str],
        sink: MetricsSink,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        timeout_s: float = DEFAULT_SCRAPE_TIMEOUT_S,
        max_scrape_bytes: int = DEFAULT_MAX_SCRAPE_BYTES,
        max_series_per_scrape: int = DEFAULT_MAX_SERIES_PER_SCRAPE,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        if not interval_s > 0 or not timeout_s > 0 or max_scrape_bytes < 1 or max_series_per_scrape < 1:
            raise ValueError("interval_s and timeout_s must be > 0, max_scrape_bytes and max_series_per_scrape >= 1")
        for url in targets:
            problem = target_problem(url)
            if problem:
                raise ValueError(problem)
        self.sink = sink
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.max_scrape_bytes = max_scrape_bytes
        self.max_series_per_scrape = max_series_per_scrape
        self.clock_ns = clock_ns
        self.counts: dict[str, ScrapeCounts] = {url: ScrapeCounts() for url in targets}
        self._targets = [_Target(url, counts) for url, counts in self.counts.items()]
        self._stop = threading.Event()
        self._lock = threading.Lock()

    @property
    def targets(self) -> list[str]:
        return list(self.counts)

    def start(self) -> Scraper:
        for target in self._targets:
            if target.thread is None:
                target.thread = threading.Thread(target=self._run, args=(target,), name=f"scrape:{target.url}", daemon=True)
                target.thread.start()
        return self

    def stop(self) -> None:
        """Stop every thread, a scrape in flight cancelled, and wait for them; rows already handed
        to the sink are the sink's to write."""
        self._stop.set()
        for target in self._targets:
            with self._lock:  # held: a loop with its cancel still set has not closed
                if target.cancel is not None:
                    target.cancel()
        for target in self._targets:
            if target.thread is not None:
                target.thread.join()
                target.thread = None

    def __enter__(self) -> Scraper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, target: _Target) -> None:
        try:
            asyncio.run(self._loop(target))
        except asyncio.CancelledError:  # stop() cancelled it
            pass

    async def _loop(self, target: _Target) -> None:
        task, loop = asyncio.current_task(), asyncio.get_running_loop()
        assert task is not None
        with self._lock:
            if self._stop.is_set():
                return
            target.cancel = lambda: loop.call_soon_threadsafe(task.cancel)
        try:
            # No pooled connection is kept across failures: httpx reconnects by itself
            async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
                next_s = time.monotonic()
                while True:
                    await self._scrape(client, target)
                    next_s += self.interval_s
                    now_s = time.monotonic()
                    if next_s < now_s:
                        next_s = now_s  # behind (slow answer, busy host): skip the missed ticks
                    await asyncio.sleep(next_s - now_s)
        finally:
            with self._lock:
                target.cancel = None

    async def _scrape(self, client: httpx.AsyncClient, target: _Target) -> None:
        counts = target.counts
        try:
            scraped = await scrape_once(
                client, target.url, timeout_s=self.timeout_s, max_scrape_bytes=self.max_scrape_bytes,
                max_series=self.max_series_per_scrape, clock_ns=self.clock_ns,
            )
        except ScrapeFailed as exc:
            counts.add("failed")
            if target.failing_since is None:
                log.warning("scraping %s failed: %s (logged again when it recovers)", target.url, exc)
                target.failing_since = 0
            target.failing_since += 1
            return
        except Exception as exc:  # a bug here must not end the thread (and with it, the engine's pressure)
            counts.add("failed")
            if target.failing_since is None:
                log.warning("scraping %s failed: unexpected %s: %s", target.url, type(exc).__name__, exc)
                target.failing_since = 0
            target.failing_since += 1
            return
        counts.add("ok")
        if target.failing_since is not None:
            log.warning("scraping %s recovered after %d failed scrape(s)", target.url, target.failing_since)
            target.failing_since = None
        if scraped.capped:
            counts.add("capped")
            if not target.cap_logged:
                log.warning(
                    "scraping %s: more than %d series of the kept metrics in one answer; the rest are not read or "
                    "stored (--max-series-per-scrape; logged once)", target.url, self.max_series_per_scrape,
                )
                target.cap_logged = True
        if scraped.samples:
            self._store(target, metrics_table(target.url, scraped.answered_ns, scraped.samples))

    def _store(self, target: _Target, table: pa.Table) -> None:
        counts = target.counts
        try:
            future = self.sink.submit_engine_metrics(table)
        except Exception as exc:  # Overloaded: the store is far behind; these values are dropped, not queued
            failed: Future[int] = Future()
            failed.set_exception(exc)
            future = failed

        def done(f: Future[int]) -> None:
            error = f.exception()
            if error is None:
                counts.add("samples_stored", f.result())
                if target.store_failing:
                    log.warning("engine metrics of %s are stored again", target.url)
                    target.store_failing = False
                return
            counts.add("samples_dropped", table.num_rows)
            if not target.store_failing:
                log.warning("engine metrics of %s not stored: %s (logged again when stored)", target.url, error)
                target.store_failing = True

        future.add_done_callback(done)
