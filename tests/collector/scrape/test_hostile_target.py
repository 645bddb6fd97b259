"""A target answering the issue's flood (141,593 distinct ``vllm:num_requests_running`` series, under
``--max-scrape-bytes``) is scraped by `restorelens collect` while an OpenTelemetry SDK exports spans
to it: every span is answered 200 and stored, and ``engine_metrics`` holds at most the cap a scrape.

How much the flood costs span latency is a time, measured in benchmarks/bench_scrape.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

from metrics_servers import collector_counts, engine_app, start_restorelens, wait_until
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.responses import Response

from restorelens.collector.scrape import DEFAULT_MAX_SCRAPE_BYTES, DEFAULT_MAX_SERIES_PER_SCRAPE
from restorelens.serving import ServerThread
from restorelens.store import open_read_only

#: The issue's hostile answer: this many distinct series of one kept metric.
HOSTILE_SERIES = 141_593
BATCHES, SPANS_PER_BATCH = 20, 50


def hostile_answer() -> bytes:
    body = "".join(f'vllm:num_requests_running{{engine="0",s="{i}"}} 1\n' for i in range(HOSTILE_SERIES)).encode()
    assert len(body) < DEFAULT_MAX_SCRAPE_BYTES  # read whole: no size limit saves the collector
    return body


def test_spans_exported_while_a_hostile_target_is_scraped_are_all_stored_and_its_rows_stay_within_the_cap(
    tmp_path: Path, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    tracer = tracer_provider.get_tracer("test")
    for i in range(BATCHES * SPANS_PER_BATCH):
        with tracer.start_as_current_span("work", attributes={"i": i}):
            pass
    spans = span_exporter.get_finished_spans()
    batches = [spans[i:i + SPANS_PER_BATCH] for i in range(0, len(spans), SPANS_PER_BATCH)]
    body = hostile_answer()
    db = tmp_path / "t.duckdb"
    with ServerThread(engine_app({"/metrics": lambda: Response(body)})) as engine:
        target = engine.url + "/metrics"
        collector, found = start_restorelens(
            ["collect", "--db", str(db), "--port", "0", "--scrape", target],
            r"(http://127\.0\.0\.1:\d+)/v1/traces",
        )
        try:
            url = found.group(1)
            ok = ("restorelens_collector_scrapes_total", f"outcome=ok,target={target}")
            wait_until(lambda: collector_counts(url).get(ok, 0) >= 2, "two scrapes")
            exporter = OTLPSpanExporter(endpoint=url + "/v1/traces")  # the SDK's own 10-s timeout
            results = [exporter.export(batch) for batch in batches]
            exporter.shutdown()
            seen = collector_counts(url)[ok]
            wait_until(lambda: collector_counts(url)[ok] >= seen + 2, "scrapes after the spans")
            counts = collector_counts(url)
        finally:
            collector.send_signal(signal.SIGINT)
            _, log = collector.communicate(timeout=60)
    assert results == [SpanExportResult.SUCCESS] * BATCHES  # every one answered 200: none dropped
    assert counts[("restorelens_collector_spans_stored_total", "")] == BATCHES * SPANS_PER_BATCH
    capped = counts.get(("restorelens_collector_scrapes_capped_total", f"target={target}"))
    assert capped == counts[ok]  # every answer was over the cap, and each was counted
    assert log.count("more than 1000 series of the kept metrics in one answer") == 1
    with open_read_only(db) as con:
        assert con.execute("select count(*) from otel_traces").fetchone() == (BATCHES * SPANS_PER_BATCH,)
        per_scrape = con.execute(
            'select min(n), max(n), count(*) from (select count(*) as n from engine_metrics group by "Timestamp")'
        ).fetchone()
    # every scrape stored (none dropped for a busy store), each the cap's worth, not 141,593 rows
    assert per_scrape[:2] == (DEFAULT_MAX_SERIES_PER_SCRAPE, DEFAULT_MAX_SERIES_PER_SCRAPE) and per_scrape[2] >= counts[ok]
