"""The scraping loop: stopping it mid-scrape, logging a failing target once, a target over the
series cap, the writer storing its rows beside the spans within its bound, and `restorelens collect
--scrape` storing a simulated engine's pressure."""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
from metrics_servers import (
    METRICS,
    PATIENCE_S,
    ListSink,
    TricklingHead,
    collector_counts,
    engine_app,
    start_restorelens,
    wait_until,
)
from starlette.responses import Response

from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.rows import SpanRows
from restorelens.collector.scrape import KEPT_METRICS, Scraper, kept_samples, metrics_table, parse_exposition
from restorelens.store import open_read_only
from restorelens.collector.writer import Overloaded, StoreWriter
from restorelens.serving import ServerThread, bind_socket

DATA = Path(__file__).parents[1] / "data"
#: What the current vLLM exposes of KEPT_METRICS (vllm:gpu_cache_usage_perc is the older name).
CURRENT_VLLM_METRICS = KEPT_METRICS - {"vllm:gpu_cache_usage_perc"}


def test_stopping_a_scraper_mid_scrape_leaves_no_thread_behind() -> None:
    server = TricklingHead()
    try:
        scraper = Scraper([server.url], ListSink(), interval_s=0.01, timeout_s=server.total_s * 2).start()
        wait_until(lambda: any(t.name == f"scrape:{server.url}" for t in threading.enumerate()), "the scrape thread")
        time.sleep(0.2)  # into the head's trickle
        started = time.monotonic()
        scraper.stop()
        assert time.monotonic() - started < server.total_s / 2  # cancelled, not waited out
        assert not any(t.name.startswith("scrape:") for t in threading.enumerate())
    finally:
        server.close()


def test_a_failing_target_logs_once_when_it_fails_and_once_when_it_recovers(caplog: pytest.LogCaptureFixture) -> None:
    healthy = threading.Event()

    def flaky() -> Response:
        return Response(METRICS) if healthy.is_set() else Response(b"down", status_code=500)

    sink = ListSink()
    with ServerThread(engine_app({"/metrics": flaky})) as server, caplog.at_level(logging.WARNING, "restorelens.collector.scrape"):
        url = server.url + "/metrics"
        with Scraper([url], sink, interval_s=0.01) as scraper:
            counts = scraper.counts[url]
            wait_until(lambda: counts.failed >= 5, "five failed scrapes")
            healthy.set()
            wait_until(lambda: counts.samples_stored >= 4, "two scrapes stored")
            sink.refuse = True
            dropped_from = counts.ok
            wait_until(lambda: counts.samples_dropped >= 4, "two scrapes dropped")
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == f"scraping {url} failed: HTTP 500 (logged again when it recovers)"
    recovered = re.fullmatch(rf"scraping {re.escape(url)} recovered after (\d+) failed scrape\(s\)", messages[1])
    assert recovered is not None and int(recovered.group(1)) == counts.failed
    assert messages[2] == f"engine metrics of {url} not stored: full (logged again when stored)"
    assert len(messages) == 3
    assert counts.ok > dropped_from and counts.samples_stored == sum(t.num_rows for t in sink.tables)
    assert {t["Target"][0].as_py() for t in sink.tables} == {url}


def test_the_writer_stores_engine_metrics_beside_spans_and_a_metrics_failure_spares_the_spans(tmp_path: Path) -> None:
    rows = SpanRows()
    decode_traces_json(json.loads((DATA / "otlp_example_trace.json").read_text()), rows)
    good = metrics_table("http://e/metrics", 1, kept_samples(parse_exposition(METRICS.decode())))
    bad = pa.table({"Timestamp": pa.array([1], pa.int64())})  # not the layout: its insert fails
    writer = StoreWriter(tmp_path / "s.duckdb", max_pending_samples=3).start()
    try:
        spans = writer.submit(rows)
        failing = writer.submit_engine_metrics(bad)
        assert spans.result(PATIENCE_S) == (1, 0)
        with pytest.raises(Exception, match="engine_metrics|column"):
            failing.result(PATIENCE_S)
        assert writer.submit_engine_metrics(good).result(PATIENCE_S) == 2
    finally:
        writer.stop()
    with open_read_only(tmp_path / "s.duckdb") as con:
        assert con.execute("select count(*) from otel_traces").fetchone() == (1,)
        assert con.execute("select count(*) from engine_metrics").fetchone() == (2,)


def test_the_writer_refuses_engine_metrics_beyond_its_bound_even_with_none_waiting(tmp_path: Path) -> None:
    table = metrics_table("http://e/metrics", 1, kept_samples(parse_exposition(METRICS.decode())))
    writer = StoreWriter(tmp_path / "s.duckdb", max_pending_samples=3)  # not started: nothing drains
    too_many = pa.concat_tables([table, table])
    with pytest.raises(Overloaded, match="^0 engine metric samples waiting to be stored; 4 more exceed max_pending_samples 3$"):
        writer.submit_engine_metrics(too_many)  # nothing waits: the bound holds all the same
    writer.submit_engine_metrics(table)
    with pytest.raises(Overloaded, match="^2 engine metric samples waiting"):
        writer.submit_engine_metrics(table)
    writer.stop()


def test_a_target_answering_more_series_than_the_cap_has_the_rest_unstored_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flood = "".join(f'vllm:num_requests_running{{engine="{i}"}} {i}\n' for i in range(50)).encode()
    sink = ListSink()
    with ServerThread(engine_app({"/metrics": lambda: Response(flood)})) as server, \
            caplog.at_level(logging.WARNING, "restorelens.collector.scrape"):
        url = server.url + "/metrics"
        with Scraper([url], sink, interval_s=0.01, max_series_per_scrape=10) as scraper:
            counts = scraper.counts[url]
            wait_until(lambda: counts.capped >= 5, "five scrapes cut at the cap")
    assert counts.capped == counts.ok and counts.failed == 0
    assert sink.tables and all(t["Value"].to_pylist() == [float(i) for i in range(10)] for t in sink.tables)
    assert counts.samples_stored == 10 * len(sink.tables)
    assert [r.getMessage() for r in caplog.records] == [
        f"scraping {url}: more than 10 series of the kept metrics in one answer; the rest are not read or stored "
        "(--max-series-per-scrape; logged once)"
    ]


# --- restorelens collect --scrape against restorelens sim -----------------------------------------


def test_collect_scrape_stores_the_sims_pressure_as_it_gets_load_beside_spans_despite_a_dead_target(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.duckdb"
    started_ns = time.time_ns()
    sim, sim_found = start_restorelens(
        ["sim", "--preset", "tiny-cpu", "--port", "0", "--max-num-seqs", "1", "--time-scale", "5",
         "--trace-file", str(tmp_path / "sim-spans.jsonl")],
        r"on (http://127\.0\.0\.1:\d+)",
    )
    dead_sock = bind_socket(listen=False)
    dead = f"http://127.0.0.1:{dead_sock.getsockname()[1]}/metrics"
    target = f"{sim_found.group(1)}/metrics"
    try:
        collector, found = start_restorelens(
            ["collect", "--db", str(db), "--port", "0", "--scrape", target, "--scrape", dead, "--interval-s", "0.02"],
            r"(http://127\.0\.0\.1:\d+)/v1/traces into \S+, scraping (\S+), (\S+) every 0\.02 s",
        )
        try:
            assert found.group(2, 3) == (target, dead)
            url = found.group(1)
            ok = ("restorelens_collector_scrapes_total", f"outcome=ok,target={target}")
            failed = ("restorelens_collector_scrapes_total", f"outcome=failed,target={dead}")
            wait_until(lambda: collector_counts(url).get(failed, 0) >= 5, "the dead target failed five times")
            # spans are stored while one target fails
            body = (DATA / "otlp_example_trace.json").read_bytes()
            answer = httpx.post(url + "/v1/traces", content=body, headers={"content-type": "application/json"}, timeout=30)
            assert answer.status_code == 200
            # load: one sequence at a time, so two of three requests wait
            requests = [
                threading.Thread(
                    target=httpx.post,
                    args=(sim_found.group(1) + "/v1/completions",),
                    kwargs={"json": {"model": "tiny", "prompt": "x " * 50, "max_tokens": 300}, "timeout": 120},
                )
                for _ in range(3)
            ]
            for thread in requests:
                thread.start()
            for thread in requests:
                thread.join()
            seen_ok = collector_counts(url)[ok]
            wait_until(lambda: collector_counts(url)[ok] > seen_ok + 2, "scrapes after the load")
            counts = collector_counts(url)
        finally:
            collector.send_signal(signal.SIGINT)
            _, log = collector.communicate(timeout=60)
    finally:
        dead_sock.close()
        sim.send_signal(signal.SIGINT)
        sim.communicate(timeout=60)
    stopped_ns = time.time_ns()
    # the dead target: counted every time, logged once (it never recovered)
    assert log.count(f"scraping {dead} failed") == 1 and "recovered" not in log
    assert counts[failed] >= 5 and counts.get(("restorelens_collector_scrapes_total", f"outcome=ok,target={dead}")) == 0
    assert counts[("restorelens_collector_spans_stored_total", "")] == 1
    with open_read_only(db) as con:
        assert con.execute("select count(*) from otel_traces").fetchone() == (1,)
        assert con.execute('select count(*) from engine_metrics where "Target" <> $t', {"t": target}).fetchone() == (0,)
        by_name = dict(
            con.execute(
                """select "MetricName", list(distinct "Labels") from engine_metrics group by all"""
            ).fetchall()
        )
        peak = dict(con.execute('select "MetricName", max("Value") from engine_metrics group by all').fetchall())
        stored = con.execute("select count(*), min(epoch_ns(\"Timestamp\")), max(epoch_ns(\"Timestamp\")) from engine_metrics").fetchone()
        preemptions = [
            v for (v,) in con.execute(
                """select "Value" from engine_metrics where "MetricName" = 'vllm:num_preemptions_total' order by "Timestamp" """
            ).fetchall()
        ]
    assert set(by_name) == CURRENT_VLLM_METRICS
    assert all(labels == [{"model_name": "tiny", "engine": "0"}] for labels in by_name.values())
    assert peak["vllm:num_requests_waiting"] >= 1 and peak["vllm:num_requests_running"] == 1
    assert 0 < peak["vllm:kv_cache_usage_perc"] <= 1
    assert preemptions == sorted(preemptions)
    # on the spans' clock (this host's wall clock), inside the run; every sample stored is counted
    assert started_ns <= stored[1] <= stored[2] <= stopped_ns
    assert stored[0] >= counts[("restorelens_collector_engine_samples_stored_total", f"target={target}")]
