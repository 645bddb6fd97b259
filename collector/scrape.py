"""Engine pressure beside the spans: an engine's Prometheus ``/metrics`` scraped into ``engine_metrics``.

The core is sans-I/O: :func:`parse_exposition` reads the Prometheus text exposition format 0.0.4
into :class:`Sample` values, :func:`kept_samples` keeps vLLM's pressure metrics (``KEPT_METRICS``)
and :func:`metrics_table` makes the rows of one scrape. Around it, :class:`Scraper` runs one thread
per target, each with its own asyncio loop (so that a deadline can cancel the whole exchange), that
fetches with httpx every ``interval_s`` and hands the rows to the receiver's
:class:`~restorelens.collector.writer.StoreWriter`, the one connection that writes the store
(DuckDB allows one writing process, and the receiver already is it).

A scrape that fails (unreachable, timeout, not 200, over ``max_scrape_bytes``, unparsable) is
counted and skipped; it never reaches span ingest. Its target logs one line when it starts
failing and one when it recovers, not one per attempt.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import httpx
import pyarrow as pa

from restorelens.collector.http_body import BodyTooLarge, CorruptBody, UnsupportedEncoding, body_decoder
from restorelens.store import ENGINE_METRICS_TABLE

__all__ = [
    "DEFAULT_INTERVAL_S",
    "DEFAULT_MAX_SCRAPE_BYTES",
    "DEFAULT_SCRAPE_TIMEOUT_S",
    "ENGINE_METRICS_SCHEMA",
    "ENGINE_METRICS_TABLE",
    "KEPT_METRICS",
    "MAX_LABELS",
    "ExpositionError",
    "Sample",
    "ScrapeCounts",
    "ScrapeFailed",
    "Scraper",
    "kept_samples",
    "metrics_table",
    "parse_exposition",
    "scrape_once",
    "target_problem",
]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 0.25
DEFAULT_SCRAPE_TIMEOUT_S = 1.0
DEFAULT_MAX_SCRAPE_BYTES = 8 * 1024 * 1024

#: vLLM's engine pressure, as its /metrics names it (vllm/v1/metrics/loggers.py; prometheus_client
#: exposes the counter ``vllm:num_preemptions`` as ``..._total``). ``vllm:gpu_cache_usage_perc`` is
#: the older name of ``vllm:kv_cache_usage_perc``; each is stored under the name the engine used.
KEPT_METRICS = frozenset(
    {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:num_preemptions_total",
    }
)

ENGINE_METRICS_SCHEMA = pa.schema(
    [
        pa.field("Timestamp", pa.timestamp("ns"), nullable=False),
        pa.field("Target", pa.string(), nullable=False),
        pa.field("MetricName", pa.string(), nullable=False),
        pa.field("Labels", pa.map_(pa.string(), pa.string()), nullable=False),
        pa.field("Value", pa.float64(), nullable=False),
    ]
)


# --- the exposition format (sans-I/O) -------------------------------------------------------------


class ExpositionError(ValueError):
    """The body is not the text exposition format; names the line."""

    def __init__(self, line_no: int, problem: str) -> None:
        self.line_no = line_no
        self.problem = problem
        super().__init__(f"line {line_no}: {problem}")


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: ``labels`` in the order written, ``timestamp_ms`` when the line has one."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    timestamp_ms: int | None = None


#: Labels one sample may have: far above any exporter's (vLLM's 2-6, kube-state-metrics' tens), and a
#: bound on the work one line of an answer makes.
MAX_LABELS = 256

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# A quoted string of the format: backslash escapes any character (only \\, \" and \n mean
# something; Prometheus keeps any other escape as written, and so does _unescape)
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_BLANKS = re.compile(r"[ \t]*")
# After the name and labels: the value, an optional integer timestamp (ms), and an optional
# OpenMetrics exemplar ("# {...} value [ts]"), which is ignored. Blanks must part a bare name from
# its value; after a label block they are optional, as in Prometheus' own parser
_REST = r"(\S+)(?:[ \t]+([^\s#]\S*))?[ \t]*(?:#.*)?"
_VALUE_AFTER_NAME = re.compile(r"[ \t]+" + _REST)
_VALUE_AFTER_LABELS = re.compile(r"[ \t]*" + _REST)
_TIMESTAMP = re.compile(r"-?[0-9]+")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
_ESCAPE = re.compile(r"\\(.)")


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut: a failed scrape's reason is logged."""
    quoted = repr(text)
    return quoted if len(quoted) <= 80 else quoted[:79] + "\u2026"


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), text)


def _parse_value(token: str) -> float:
    # float() also takes "1_000" and surrounding blanks, which the format (Go's ParseFloat) does not
    if "_" in token:
        raise ValueError(token)
    return float(token)  # "NaN", "+Inf", "-Inf", exponents


def _parse_labels(line: str, pos: int, line_no: int) -> tuple[str | None, list[tuple[str, str]], int]:
    """The label block opening at ``line[pos] == "{"``: (quoted metric name or None, labels, end)."""
    name: str | None = None
    labels: list[tuple[str, str]] = []
    seen: set[str] = set()  # a list scan per label made a line of 20k labels take seconds
    pos += 1
    while True:
        pos = _BLANKS.match(line, pos).end()  # type: ignore[union-attr]
        if line.startswith("}", pos):
            return name, labels, pos + 1
        bare = _LABEL_NAME.match(line, pos)
        quoted = None if bare else _QUOTED.match(line, pos)
        if bare is None and quoted is None:
            raise ExpositionError(line_no, f"expected a label name at column {pos + 1}")
        key = bare.group(0) if bare else _unescape(quoted.group(1))  # type: ignore[union-attr]
        pos = (bare or quoted).end()  # type: ignore[union-attr]
        pos = _BLANKS.match(line, pos).end()  # type: ignore[union-attr]
        if quoted is not None and name is None and not labels and not line.startswith("=", pos):
            name = key  # Prometheus 3's quoted form: {"metric.name", label="v"}
        else:
            if not line.startswith("=", pos):
                raise ExpositionError(line_no, f"expected '=' after label {key!r}")
            pos = _BLANKS.match(line, pos + 1).end()  # type: ignore[union-attr]
            value = _QUOTED.match(line, pos)
            if value is None:
                raise ExpositionError(line_no, f"label {key!r}: expected a quoted value")
            if key in seen:
                raise ExpositionError(line_no, f"label {_shown(key)} given twice")
            if len(labels) == MAX_LABELS:
                raise ExpositionError(line_no, f"more than {MAX_LABELS} labels")
            seen.add(key)
            labels.append((key, _unescape(value.group(1))))
            pos = _BLANKS.match(line, value.end()).end()  # type: ignore[union-attr]
        if line.startswith(",", pos):
            pos += 1
        elif not line.startswith("}", pos):
            raise ExpositionError(line_no, f"expected ',' or '}}' at column {pos + 1}")


def _parse_line(line: str, line_no: int) -> Sample:
    """One sample line, any form the format allows (blanks, escapes, quoted names, exemplars)."""
    start = _BLANKS.match(line).end()  # type: ignore[union-attr]
    found = _METRIC_NAME.match(line, start)
    name: str | None = found.group(0) if found else None
    pos = found.end() if found else start
    labels: list[tuple[str, str]] = []
    after_blanks = _BLANKS.match(line, pos).end()  # type: ignore[union-attr]
    labels_given = line.startswith("{", after_blanks)  # blanks may part a name from its labels, as in Go's parser
    if labels_given:
        quoted_name, labels, pos = _parse_labels(line, after_blanks, line_no)
        if quoted_name is not None:
            if name is not None:
                raise ExpositionError(line_no, "metric name given twice")
            name = quoted_name
    if not name:
        raise ExpositionError(line_no, "expected a metric name")
    rest = (_VALUE_AFTER_LABELS if labels_given else _VALUE_AFTER_NAME).fullmatch(line, pos)
    if rest is None:
        raise ExpositionError(line_no, f"{name}: expected blanks, a value and an optional timestamp")
    try:
        value = _parse_value(rest.group(1))
    except ValueError:
        raise ExpositionError(line_no, f"{name}: invalid value {rest.group(1)!r}") from None
    stamp = rest.group(2)
    if stamp is not None and not _TIMESTAMP.fullmatch(stamp):
        raise ExpositionError(line_no, f"{name}: invalid timestamp {stamp!r} (integer milliseconds)")
    return Sample(name, tuple(labels), value, int(stamp) if stamp is not None else None)


# The lines prometheus_client writes (bare names, no escapes, one blank, no exemplar) in one match;
# anything else takes _parse_line. Five times faster on vLLM's /metrics, mostly histogram buckets
_FAST_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="[^"\\]*"'
_FAST_LINE = re.compile(
    rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{{(?:{_FAST_LABEL}(?:,{_FAST_LABEL})*,?)?\}})? ([^\s_#]+)(?: (-?[0-9]+))?"
)
_FAST_LABELS = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="([^"\\]*)"')


def parse_exposition(text: str, keep: Collection[str] | None = None) -> list[Sample]:
    """The samples of a Prometheus text exposition (format 0.0.4), in order.

    Every line is checked, so a broken exposition fails whole (ExpositionError naming the line),
    as Prometheus fails such a scrape; only samples named in ``keep`` (all when None) are returned.
    Comments (``# HELP``, ``# TYPE``, any other) and blank lines are skipped; label values unescape
    ``\\\\``, ``\\"`` and ``\\n``; values may be ``NaN``, ``+Inf``, ``-Inf``; a timestamp (integer
    milliseconds) is optional; an OpenMetrics exemplar after the value is ignored. A label given
    twice is an error in the samples returned (their labels are the only ones read).
    """
    samples: list[Sample] = []
    for line_no, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        stripped = line.lstrip(" \t")
        if not stripped or stripped[0] == "#":
            continue
        fast = _FAST_LINE.fullmatch(line)
        if fast is None:
            sample = _parse_line(line, line_no)
            if keep is None or sample.name in keep:
                samples.append(sample)
            continue
        name = fast.group(1)
        try:
            value = float(fast.group(3))
        except ValueError:
            raise ExpositionError(line_no, f"{name}: invalid value {fast.group(3)!r}") from None
        if keep is not None and name not in keep:
            continue
        labels = tuple(_FAST_LABELS.findall(fast.group(2) or ""))
        if len(labels) > MAX_LABELS:
            raise ExpositionError(line_no, f"more than {MAX_LABELS} labels")
        if len(labels) > 1 and len({key for key, _ in labels}) != len(labels):
            keys: set[str] = set()
            twice = next(key for key, _ in labels if key in keys or keys.add(key))
            raise ExpositionError(line_no, f"label {_shown(twice)} given twice")
        stamp = fast.group(4)
        samples.append(Sample(name, labels, value, int(stamp) if stamp is not None else None))
    return samples


def kept_samples(samples: Iterable[Sample], keep: Collection[str] = KEPT_METRICS) -> list[Sample]:
    """The samples named in ``keep``; a series given twice in one exposition keeps its first
    sample (Prometheus refuses the second), and NaN is dropped (a value never measured)."""
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    kept: list[Sample] = []
    for sample in samples:
        if sample.name not in keep or math.isnan(sample.value):
            continue
        series = (sample.name, frozenset(sample.labels))
        if series not in seen:
            seen.add(series)
            kept.append(sample)
    return kept


def metrics_table(target: str, timestamp_ns: int, samples: Sequence[Sample]) -> pa.Table:
    """The ``engine_metrics`` rows of one scrape of ``target`` answered at ``timestamp_ns``."""
    return pa.table(
        [
            pa.array([timestamp_ns] * len(samples), pa.timestamp("ns")),
            pa.array([target] * len(samples), pa.string()),
            pa.array([s.name for s in samples], pa.string()),
            pa.array([list(s.labels) for s in samples], pa.map_(pa.string(), pa.string())),
            pa.array([s.value for s in samples], pa.float64()),
        ],
        schema=ENGINE_METRICS_SCHEMA,
    )


#: What a host name may hold (RFC 3986 reg-name without percent-encoding; letters may be non-ASCII).
_HOST_PUNCTUATION = frozenset("-._~")


def target_problem(url: str) -> str | None:
    """Why ``url`` cannot be scraped (for a one-line setting error), or None.

    The checks of ``restorelens.settings.http_url_problem`` for the gate's URLs, with a path and a
    query allowed (a /metrics URL has them). Credentials are refused: the URL is shown unauthenticated
    on the collector's GET /metrics, in its ready line and logs, and stored in ``engine_metrics``.
    """
    if url != url.strip() or any(c.isspace() or not c.isprintable() for c in url):
        return f"{url!r} holds spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is no number or out of range
    except ValueError as exc:
        return f"{url!r} is not a URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:8000/metrics)"
    if parts.username is not None or parts.password is not None:
        # not echoed: the point is that they show nowhere
        shown = parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()
        return (f"{shown!r} holds credentials, which would show on the collector's unauthenticated GET /metrics, "
                "its ready line and logs, and in engine_metrics; scrape a URL without them")
    host = parts.hostname
    if "[" not in parts.netloc and not all(c.isalnum() or c in _HOST_PUNCTUATION for c in host):
        return f"{url!r}: {host!r} is not a host name"
    if port == 0:
        return f"{url!r}: port 0 cannot be connected to (give 1-65535, or none for the scheme's default)"
    if parts.fragment or url.endswith("#"):
        return f"{url!r} has a fragment, which is never sent"
    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        return f"{url!r} is not a URL httpx can request ({exc})"
    return None


# --- fetching -------------------------------------------------------------------------------------


class ScrapeFailed(Exception):
    """One scrape failed; the message says why in a few words."""


# text/plain 0.0.4 first: prometheus_client answers OpenMetrics only when asked for it. identity:
# compression buys nothing on the loopback and costs the engine CPU (whatever comes is decoded
# within max_scrape_bytes anyway)
_REQUEST_HEADERS = {"Accept": "text/plain;version=0.0.4;q=1.0, */*;q=0.1", "Accept-Encoding": "identity"}


async def scrape_once(
    client: httpx.AsyncClient,
    url: str,
    *,
    timeout_s: float,
    max_scrape_bytes: int,
    clock_ns: Callable[[], int] = time.time_ns,
) -> tuple[int, list[Sample]]:
    """GET ``url`` once: (when its answer arrived, on ``clock_ns``; its kept samples).

    Raises ScrapeFailed for anything but a 200 with a whole, parsable body of at most
    ``max_scrape_bytes`` (decompressed) within ``timeout_s``, counted over the whole exchange.
    """
    answered_ns: int | None = None
    try:
        # httpx's timeouts bound each read, so a head trickling in a byte at a time would never
        # time out; cancelling the whole exchange at the deadline does not depend on the reads
        async with asyncio.timeout(timeout_s):
            async with client.stream("GET", url, headers=_REQUEST_HEADERS, timeout=timeout_s) as answer:
                # The engine reads its gauges, renders, then sends: the head's arrival is the closest
                # bound on when the values held, and a busy engine delays the render, not the answer
                answered_ns = clock_ns()
                if answer.status_code != 200:
                    raise ScrapeFailed(f"HTTP {answer.status_code}")
                declared = answer.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > max_scrape_bytes:
                    raise ScrapeFailed(f"answer of {declared} bytes exceeds --max-scrape-bytes {max_scrape_bytes}")
                decoder = body_decoder(answer.headers.get("content-encoding", ""), max_scrape_bytes)
                async for chunk in answer.aiter_raw():
                    decoder.feed(chunk)
                body = decoder.finish()
    except (TimeoutError, httpx.TimeoutException):
        what = "no answer" if answered_ns is None else "answer not complete"
        raise ScrapeFailed(f"{what} within {timeout_s:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL is no HTTPError, and is this URL's failure
        raise ScrapeFailed(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
    except BodyTooLarge:
        raise ScrapeFailed(f"answer exceeds --max-scrape-bytes {max_scrape_bytes}") from None
    except (UnsupportedEncoding, CorruptBody) as exc:
        raise ScrapeFailed(str(exc)) from None
    assert answered_ns is not None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeFailed(f"answer is not UTF-8 (byte {exc.start})") from None
    try:
        samples = parse_exposition(text, KEPT_METRICS)
    except ExpositionError as exc:
        raise ScrapeFailed(f"not the Prometheus text format: {exc}") from None
    return answered_ns, kept_samples(samples)


# --- the loop -------------------------------------------------------------------------------------


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
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        if not interval_s > 0 or not timeout_s > 0 or max_scrape_bytes < 1:
            raise ValueError("interval_s and timeout_s must be > 0 and max_scrape_bytes >= 1")
        for url in targets:
            problem = target_problem(url)
            if problem:
                raise ValueError(problem)
        self.sink = sink
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.max_scrape_bytes = max_scrape_bytes
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
            answered_ns, samples = await scrape_once(
                client, target.url, timeout_s=self.timeout_s, max_scrape_bytes=self.max_scrape_bytes, clock_ns=self.clock_ns
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
        if samples:
            self._store(target, metrics_table(target.url, answered_ns, samples))

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
