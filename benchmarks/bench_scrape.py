"""Span ingestion while the collector scrapes a hostile engine, against the same collector idle.

Run: ``.venv/bin/python -m benchmarks bench_scrape`` (20 s a side) or
``.venv/bin/python -m benchmarks.bench_scrape --seconds 60 --series 141593``.

The target (issue #38, item 4): span export latency within 2x of an idle collector's while an
engine whose ``/metrics`` is hostile is scraped. Two hostile engines, each answering ``--series``
distinct series (the issue's 141,593, about 7 MB, under ``--max-scrape-bytes``) to every scrape:

- **kept**: all of ``vllm:num_requests_running``, the issue's flood (cut at
  ``--max-series-per-scrape``; the scrape stops receiving there);
- **other**: the same bytes of a metric the collector does not keep, so every scrape receives
  and searches the whole answer (the most a target can cost under ``--max-scrape-bytes``).

The same receiver (``create_receiver_app`` under uvicorn in its own process) runs three ways, one
after the other, each on a fresh store: **the anchor, idle** (no ``--scrape`` target), then
scraping each hostile engine every 0.25 s (the default), with the default
``--max-series-per-scrape``.

On each, one export that is not measured opens the store, then after two scrape intervals the
OpenTelemetry SDK's ``OTLPSpanExporter`` (protobuf) exports a batch of ``--batch`` spans every
50 ms from one thread for ``--seconds`` (a batch that comes late is sent at once). The warm-up
puts the anchor's store on the same clock as a scraping one (whose first scrape opens it): the
writer lets the file go for readers every 5 s under steady load (``max_hold_s``), each time
stalling the exports that wait on it, and a store opened by the first measured export would
shift those stalls out of the anchor's window. Printed per side: export latency p50/p95/p99/max
(encode + answer), failed exports, spans stored, the receiver's CPU (all its threads, from start
to store closed) per second, and the ``engine_metrics`` rows it wrote; then each hostile side
against the idle one. The engines run in processes of their own, so serving their answers costs
the receiver nothing but the machine's share (2 cores here, shared: compare within a run).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.ratios import versus

#: The children run from here, so that they import this folder's `benchmarks.memory`.
ROOT = Path(__file__).resolve().parents[1]
HOSTILE_SERIES = 141_593
#: The hostile engines: each answers --series series of one metric, kept by the collector or not.
HOSTILE = {"kept": "vllm:num_requests_running", "other": "vllm:not_kept_by_the_collector"}
SEND_EVERY_S = 0.05

_ENGINE = textwrap.dedent(
    """
    import sys
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route
    from restorelens.serving import ServerThread
    series, name = int(sys.argv[1]), sys.argv[2]
    body = "".join(f'{name}{{engine="0",s="{i}"}} 1\\n' for i in range(series)).encode()
    async def metrics(request):
        return Response(body, media_type="text/plain; version=0.0.4")
    server = ServerThread(Starlette(routes=[Route("/metrics", metrics)])).start()
    print(server.url + "/metrics", len(body), flush=True)
    sys.stdin.readline()
    server.stop()
    """
)

_RECEIVER = textwrap.dedent(
    """
    import json, sys, time
    import duckdb
    from benchmarks.memory import peak_rss_bytes
    from restorelens.collector.receiver import create_receiver_app
    from restorelens.serving import ServerThread
    db, targets = sys.argv[1], sys.argv[2:]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    app = create_receiver_app(db, scrape_targets=targets)
    server = ServerThread(app).start()
    print(server.url, flush=True)
    sys.stdin.readline()
    server.stop()
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    counts = {url: vars(c) for url, c in app.state.scraper.counts.items()}
    con = duckdb.connect(db, read_only=True)
    rows = con.execute("select count(*), count(distinct \\"Timestamp\\") from engine_metrics").fetchone()
    spans = con.execute("select count(*) from otel_traces").fetchone()[0]
    con.close()
    print(json.dumps({"cpu_s": cpu_s, "wall_s": wall_s, "rows": rows[0], "scrapes_stored": rows[1], "spans": spans,
                      "scrapes": {u: {k: v for k, v in c.items() if not k.startswith("_")} for u, c in counts.items()},
                      "peak_mib": peak_rss_bytes() / 2**20}))
    """
)


def _load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _batches(count: int, size: int) -> list[list[object]]:
    from restorelens.telemetry import build_tracer_provider

    provider = build_tracer_provider("bench-scrape", "memory")
    tracer = provider.get_tracer("bench")
    for i in range(count * size):
        with tracer.start_as_current_span("work", attributes={"i": i}):
            pass
    spans = list(provider.restorelens_exporter.get_finished_spans())  # type: ignore[attr-defined]
    provider.shutdown()
    return [spans[i:i + size] for i in range(0, len(spans), size)]


def _side(warm_up: list[object], batches: list[list[object]], db: Path, targets: list[str]) -> dict[str, Any]:
    """Export ``batches`` on the 50-ms cadence to a fresh receiver scraping ``targets``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    with subprocess.Popen([sys.executable, "-c", _RECEIVER, str(db), *targets], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        url = proc.stdout.readline().strip() + "/v1/traces"
        exporter = OTLPSpanExporter(endpoint=url)  # the SDK's own 10-s timeout: a late answer is a lost batch
        failures = exporter.export(warm_up) is not SpanExportResult.SUCCESS  # opens the store, as a scrape does
        time.sleep(0.5)  # two scrape intervals: the scraper is at work before the first export
        latencies: list[float] = []
        next_s = time.perf_counter()
        for batch in batches:
            next_s = max(next_s + SEND_EVERY_S, time.perf_counter())
            time.sleep(max(0.0, next_s - time.perf_counter()))
            started = time.perf_counter()
            failures += exporter.export(batch) is not SpanExportResult.SUCCESS
            latencies.append(time.perf_counter() - started)
        exporter.shutdown()
        proc.stdin.write("\n")
        proc.stdin.flush()
        stats = json.loads(proc.stdout.readline())
        proc.wait(timeout=60)
    latencies.sort()
    return {**stats, "failures": failures, "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p95_ms": latencies[int(len(latencies) * 0.95)] * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
            "max_ms": latencies[-1] * 1000}


def _describe(name: str, found: dict[str, Any], sent: int) -> None:
    print(f"  {name}: export p50 {found['p50_ms']:.1f} ms  p95 {found['p95_ms']:.1f} ms  p99 {found['p99_ms']:.1f} ms  "
          f"max {found['max_ms']:.1f} ms"
          f"   failed exports "
          f"{found['failures']}   spans stored {found['spans']:,} of {sent:,}   receiver CPU "
          f"{found['cpu_s'] / found['wall_s']:.2f} s/s ({found['cpu_s']:.1f} s in {found['wall_s']:.1f} s), peak RSS "
          f"{found['peak_mib']:.0f} MiB   engine_metrics rows {found['rows']:,} from {found['scrapes_stored']} scrapes")
    for url, c in found["scrapes"].items():
        print(f"    {url}: scrapes ok {c['ok']}, failed {c['failed']}, capped {c['capped']}; samples stored "
              f"{c['samples_stored']:,}, dropped {c['samples_dropped']:,}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="seconds of span exports on each side")
    parser.add_argument("--batch", type=int, default=100, help="spans per export")
    parser.add_argument("--series", type=int, default=HOSTILE_SERIES, help="distinct series in the engine's answer")
    args = parser.parse_args(sys.argv[1:] if argv is None and __name__ == "__main__" else argv or [])
    if not args.seconds > 0 or args.batch < 1 or args.series < 1:
        parser.error("--seconds must be > 0, --batch and --series at least 1")
    batches = _batches(max(1, int(args.seconds / SEND_EVERY_S)) + 1, args.batch)
    warm_up, batches = batches[0], batches[1:]
    sent = sum(len(b) for b in batches) + len(warm_up)  # the warm-up's spans are stored too
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as tmp, contextlib.ExitStack() as engines:
        targets = {shape: engines.enter_context(_engine(args.series, name)) for shape, name in HOSTILE.items()}
        size = targets["kept"][1]
        print(f"span exports of {args.batch} spans every {SEND_EVERY_S * 1000:.0f} ms for {args.seconds:g} s "
              f"({len(batches)} exports) from the OTel SDK; each hostile engine answers {args.series:,} series "
              f"({size / 2**20:.1f} MiB) to each scrape, every 0.25 s; load average {_load_average()} before")
        idle = _side(warm_up, batches, Path(tmp) / "idle.duckdb", [])
        _describe("anchor, idle collector", idle, sent)
        found = {}
        for shape, (target, _) in targets.items():
            found[shape] = _side(warm_up, batches, Path(tmp) / f"{shape}.duckdb", [target])
            _describe(f"restorelens, scraping the hostile engine ({shape}: {HOSTILE[shape]})", found[shape], sent)
    for shape, hostile in found.items():
        print(f"  restorelens ({shape}) vs anchor: {versus(idle['p99_ms'], hostile['p99_ms'])} p99 export latency, "
              f"{versus(idle['p50_ms'], hostile['p50_ms'])} p50, {versus(idle['p95_ms'], hostile['p95_ms'])} p95, "
              f"{versus(idle['max_ms'], hostile['max_ms'])} max, "
              f"{versus(idle['cpu_s'] / idle['wall_s'], hostile['cpu_s'] / hostile['wall_s'], better='less', worse='more')}"
              " receiver CPU per second")
    print(f"  load average {_load_average()} after")


@contextlib.contextmanager
def _engine(series: int, name: str) -> Iterator[tuple[str, int]]:
    """A hostile engine in its own process: its /metrics URL and its answer's size in bytes."""
    with subprocess.Popen([sys.executable, "-c", _ENGINE, str(series), name], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, cwd=ROOT) as engine:
        assert engine.stdout is not None and engine.stdin is not None
        target, size = engine.stdout.readline().split()
        try:
            yield target, int(size)
        finally:
            engine.stdin.write("\n")
            engine.stdin.flush()
            engine.wait(timeout=60)


if __name__ == "__main__":
    main()
