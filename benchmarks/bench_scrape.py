"""Span ingestion while the collector scrapes a hostile engine, against the same collector idle.

Run: ``.venv/bin/python -m benchmarks bench_scrape`` (20 s a side) or
``.venv/bin/python -m benchmarks.bench_scrape --seconds 60 --series 141593``.

The target (issue #38, item 4): an engine whose ``/metrics`` answers ``--series`` distinct
``vllm:num_requests_running`` series (the issue's 141,593, about 7 MB, under ``--max-scrape-bytes``)
to every scrape. The same receiver (``create_receiver_app`` under uvicorn in its own process) runs
two ways, one after the other, each on a fresh store:

- **anchor, idle**: no ``--scrape`` target;
- **restorelens, hostile target**: that engine scraped every 0.25 s (the default), with the default
  ``--max-series-per-scrape``.

On each, after a warm-up of two scrape intervals, the OpenTelemetry SDK's ``OTLPSpanExporter``
(protobuf) exports a batch of ``--batch`` spans every 50 ms from one thread for ``--seconds``
(a batch that comes late is sent at once). Printed per side: export latency p50/p99 (encode +
answer), failed exports, spans stored, the receiver's CPU (all its threads, from start to store
closed) per second, and the ``engine_metrics`` rows it wrote; then the hostile side against the
idle one, p99 and CPU. The engine runs in a process of its own, so serving its answer costs the
receiver nothing but the machine's share (2 cores here, shared: compare within a run).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from benchmarks.ratios import versus

#: The children run from here, so that they import this folder's `benchmarks.memory`.
ROOT = Path(__file__).resolve().parents[1]
HOSTILE_SERIES = 141_593
SEND_EVERY_S = 0.05

_ENGINE = textwrap.dedent(
    """
    import sys
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route
    from restorelens.serving import ServerThread
    series = int(sys.argv[1])
    body = "".join(f'vllm:num_requests_running{{engine="0",s="{i}"}} 1\\n' for i in range(series)).encode()
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


def _side(batches: list[list[object]], db: Path, targets: list[str]) -> dict[str, Any]:
    """Export ``batches`` on the 50-ms cadence to a fresh receiver scraping ``targets``."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    with subprocess.Popen([sys.executable, "-c", _RECEIVER, str(db), *targets], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        url = proc.stdout.readline().strip() + "/v1/traces"
        time.sleep(0.5)  # two scrape intervals: the scraper is at work before the first export
        exporter = OTLPSpanExporter(endpoint=url)  # the SDK's own 10-s timeout: a late answer is a lost batch
        latencies: list[float] = []
        failures = 0
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
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000}


def _describe(name: str, found: dict[str, Any], sent: int) -> None:
    print(f"  {name}: export p50 {found['p50_ms']:.1f} ms  p99 {found['p99_ms']:.1f} ms   failed exports "
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
    batches = _batches(max(1, int(args.seconds / SEND_EVERY_S)), args.batch)
    sent = sum(len(b) for b in batches)
    with tempfile.TemporaryDirectory(prefix="bench-scrape-") as tmp, \
            subprocess.Popen([sys.executable, "-c", _ENGINE, str(args.series)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT) as engine:
        assert engine.stdout is not None and engine.stdin is not None
        target, size = engine.stdout.readline().split()
        print(f"span exports of {args.batch} spans every {SEND_EVERY_S * 1000:.0f} ms for {args.seconds:g} s "
              f"({len(batches)} exports) from the OTel SDK; the hostile engine answers {args.series:,} series "
              f"({int(size) / 2**20:.1f} MiB) to each scrape, every 0.25 s; load average {_load_average()} before")
        idle = _side(batches, Path(tmp) / "idle.duckdb", [])
        _describe("anchor, idle collector", idle, sent)
        hostile = _side(batches, Path(tmp) / "hostile.duckdb", [target])
        _describe("restorelens, scraping the hostile engine", hostile, sent)
        engine.stdin.write("\n")
        engine.stdin.flush()
        engine.wait(timeout=60)
    print(f"  restorelens vs anchor: {versus(idle['p99_ms'], hostile['p99_ms'])} p99 export latency, "
          f"{versus(idle['p50_ms'], hostile['p50_ms'])} p50, "
          f"{versus(idle['cpu_s'] / idle['wall_s'], hostile['cpu_s'] / hostile['wall_s'], better='less', worse='more')}"
          f" receiver CPU per second; load average {_load_average()} after")


if __name__ == "__main__":
    main()
