"""Real vLLM behind the gate: the engine's own llm_request spans join the client and gate spans,
and the queue times the analysis reports are vLLM's own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from restorelens import spans
from restorelens.analysis import Analysis
from restorelens.store import open_read_only
from restorelens.collector.scrape import KEPT_METRICS, Scraper
from restorelens.collector.writer import StoreWriter
from restorelens.gate import GateSettings, create_gate_app
from restorelens.gate.admission import Admission
from restorelens.loadgen import ClientRequest, RunLabels, TracedClient
from restorelens.serving import ServerThread

from .conftest import start_vllm, stop_process, wait_for_spans

pytestmark = pytest.mark.live

BATCH_REQUESTS = 4
INTERACTIVE_REQUESTS = 2
# Long enough that the traffic lasts seconds even where the tiny model is fast: with 256 tokens a
# run finished its requests in about 2 s, the engine's API server answered only 3 scrapes among
# them (it shares the cores with the engine), and none saw a request running. The prompt is about
# 70 tokens, so a request stays within --max-model-len 1024.
BATCH_MAX_TOKENS = 768
LEND_TIMEOUT_S = 120.0
PROMPT = "the quick brown fox jumps over the lazy dog " * 8


#: Further rounds of batch traffic, at most, until a scrape saw a request running and one waiting.
EXTRA_ROUNDS = 3


class _PressureSeen:
    """The scraper's sink, passed through: notes when a scrape saw a request running and one waiting,
    so the traffic lasts until it did instead of for a length guessed for this machine."""

    def __init__(self, writer: StoreWriter) -> None:
        self.writer = writer
        self.running, self.waiting = threading.Event(), threading.Event()

    def submit_engine_metrics(self, table):  # noqa: ANN001, ANN201 - the writer's own signature
        for name, value in zip(table["MetricName"].to_pylist(), table["Value"].to_pylist(), strict=True):
            if name == "vllm:num_requests_running" and value >= 1:
                self.running.set()
            elif name == "vllm:num_requests_waiting" and value > 0:
                self.waiting.set()
        return self.writer.submit_engine_metrics(table)

    def seen(self) -> bool:
        return self.running.is_set() and self.waiting.is_set()


async def _drive(gate_url: str, provider: TracerProvider, admission: Admission, pressure: _PressureSeen) -> list:
    labels = RunLabels(scenario="live-vllm-lend", workload="live", seed=0, run_id="live")
    async with TracedClient(gate_url, tracer_provider=provider, timeout_s=300) as client:

        def batch_round(name: str) -> list:
            return [
                asyncio.create_task(
                    client.request(
                        ClientRequest(f"{name}{i}", "tiny", PROMPT, BATCH_MAX_TOKENS, traffic_class="batch",
                                      arrival_phase="borrow", labels=labels)
                    )
                )
                for i in range(BATCH_REQUESTS)
            ]

        batch = batch_round("b")
        # Interactive demand returns while batch holds the lent slot: waited for, not slept for
        # (vLLM, the gate and this client share two cores; a fixed sleep once let the batch
        # finish first, and no restoration happened).
        deadline_s = time.monotonic() + LEND_TIMEOUT_S
        while admission.occupancy().borrowed == 0:
            assert time.monotonic() < deadline_s, "the gate never lent its protected slot to batch"
            await asyncio.sleep(0.02)
        interactive = [
            asyncio.create_task(
                client.request(ClientRequest(f"i{i}", "tiny", PROMPT, 16, arrival_phase="return", labels=labels))
            )
            for i in range(INTERACTIVE_REQUESTS)
        ]
        results = list(await asyncio.gather(*batch, *interactive))
        # vLLM's API server shares two cores with the engine and answers few scrapes under load:
        # more of the same traffic until one saw the queue (bounded; the check then fails as it would).
        for extra in range(EXTRA_ROUNDS):
            if pressure.seen():
                break
            results += await asyncio.gather(*batch_round(f"x{extra}-"))
        return results


@contextlib.contextmanager
def _scraping(metrics_url: str, db: Path) -> Iterator[tuple[Scraper, _PressureSeen]]:
    """restorelens collect --scrape's scraper and writer on vLLM's /metrics, into a store of its own
    (the collector fixture's writer holds the span store, and DuckDB takes one writer)."""
    writer = StoreWriter(db).start()
    try:
        # a generous timeout: vLLM's API server shares two cores with the engine and this test
        pressure = _PressureSeen(writer)
        with Scraper([metrics_url], pressure, interval_s=0.05, timeout_s=5.0) as scraper:
            yield scraper, pressure
    finally:
        writer.stop()


def _assert_engine_pressure(db: Path, target: str) -> None:
    """Every kept metric vLLM 0.32 exposes was stored for the served model, with consistent values."""
    with open_read_only(db) as con:
        rows = con.execute(
            """select "MetricName", "Labels"['model_name'], "Labels"['engine'], "Value" from engine_metrics
               where "Target" = $target order by "Timestamp" """,
            {"target": target},
        ).fetchall()
    by_name: dict[str, list[float]] = {}
    for name, model, engine, value in rows:
        assert (model, engine) == ("tiny", "0"), name
        by_name.setdefault(name, []).append(value)
    assert set(by_name) == KEPT_METRICS - {"vllm:gpu_cache_usage_perc"}  # the older name of kv_cache_usage_perc
    running, waiting = by_name["vllm:num_requests_running"], by_name["vllm:num_requests_waiting"]
    assert all(v in (0, 1) for v in running) and max(running) == 1  # --max-num-seqs 1, under traffic
    # the gate lets several requests through to one sequence slot: they queue for seconds, and
    # scrapes several times a second see it (a run saw up to 2 waiting)
    assert all(v >= 0 and v == int(v) for v in waiting) and max(waiting) > 0
    assert all(0 <= v <= 1 for v in by_name["vllm:kv_cache_usage_perc"]) and max(by_name["vllm:kv_cache_usage_perc"]) > 0
    preemptions = by_name["vllm:num_preemptions_total"]
    assert preemptions == sorted(preemptions)  # a counter


def test_real_vllm_spans_join_the_gate_and_client_traces(
    live_python: str, model_dir: str, collector: ServerThread, providers: Callable[[str], TracerProvider],
    store: Path, tmp_path: Path,
) -> None:
    proc, vllm_url = start_vllm(live_python, model_dir, collector.url, tmp_path / "vllm.log")
    metrics_db, metrics_url = tmp_path / "engine-metrics.duckdb", f"{vllm_url}/metrics"
    scraping = contextlib.ExitStack()
    try:
        scraper, pressure = scraping.enter_context(_scraping(metrics_url, metrics_db))  # the engine's pressure, during the traffic
        settings = GateSettings(
            upstreams={"tiny": vllm_url}, policy="lend", floors={"interactive": 2, "batch": 1},
            lendable_slots=1, wait_timeout_s=240,
        )
        gate_provider, client_provider = providers("restorelens-gate"), providers("restorelens-loadgen")
        app = create_gate_app(settings, tracer_provider=gate_provider)
        with ServerThread(app) as gate:
            results = asyncio.run(_drive(gate.url, client_provider, app.state.admission, pressure))
        assert len(results) >= BATCH_REQUESTS + INTERACTIVE_REQUESTS
        assert [r.statuses[-1] for r in results] == [200] * len(results)
        gate_provider.force_flush()
        client_provider.force_flush()
        served = wait_for_spans(store, spans.SPAN_LLM_REQUEST, len(results))
    finally:
        scraping.close()
        stop_process(proc)
    assert served == len(results), f"vLLM exported {served} llm_request spans for {len(results)} requests"
    assert scraper.counts[metrics_url].ok > 0 and scraper.counts[metrics_url].samples_stored > 0
    _assert_engine_pressure(metrics_db, metrics_url)

    with open_read_only(store) as con:
        rows = con.execute(
            """
            select e."TraceId", e."ServiceName", e."ParentSpanId", p."SpanName", p."ServiceName",
                   cast(e."SpanAttributes"[$queue] as double)
            from otel_traces e
            left join otel_traces p on p."TraceId" = e."TraceId" and p."SpanId" = e."ParentSpanId"
            where e."SpanName" = $engine
            """,
            {"queue": spans.ATTR_LATENCY_TIME_IN_QUEUE, "engine": spans.SPAN_LLM_REQUEST},
        ).fetchall()
        client_traces = {
            r[0]
            for r in con.execute(
                'select "TraceId" from otel_traces where "SpanName" = $name', {"name": spans.SPAN_CLIENT_REQUEST}
            ).fetchall()
        }
    vllm_queue_by_trace = {trace_id: queue_s for trace_id, *_, queue_s in rows}
    # Every real engine span is the child of the gate's upstream attempt, in a client's trace.
    for trace_id, service, parent_id, parent_name, parent_service, _ in rows:
        assert trace_id in client_traces
        assert parent_name == spans.SPAN_HTTP_POST and parent_service == "restorelens-gate", (service, parent_id)
    # max-num-seqs 1 with overlapping requests: vLLM really queued some of them.
    assert max(vllm_queue_by_trace.values()) > 0

    with Analysis.open(store) as analysis:
        requests = analysis.requests()
        lending = analysis.lending_episodes()
        engine = analysis.engine_requests()
    assert requests.height == len(results)
    assert requests["reached_engine"].all()
    reported = dict(zip(requests["trace_id"], requests["engine_time_in_queue_s"], strict=True))
    assert reported == vllm_queue_by_trace
    # The returning interactive demand opened a lending episode, decomposed down to the real engine.
    assert lending.height >= 1
    first = lending.row(0, named=True)
    assert first["grant_restore_s"] is not None and first["grant_restore_s"] >= 0
    assert first["engine_schedule_s"] is not None
    assert first["engine_schedule_point"] == "upper"  # vLLM 0.32 reports the prefill time

    # The engine view: one row per request vLLM served, its queue time vLLM's own, the schedule an
    # interval (vLLM's API server sees the first token after the engine core made it).
    assert engine.height == len(results)
    assert dict(zip(engine["trace_id"], engine["queue_s"], strict=True)) == vllm_queue_by_trace
    assert set(engine["engine"].to_list()) == {"tiny"}  # vLLM names no service: the model does
    assert set(engine["schedule_point"].to_list()) == {"upper"}
    bounds = engine.select("schedule_delay_lower_s", "schedule_delay_upper_s").rows()
    assert all(lower <= upper for lower, upper in bounds), bounds
    _assert_engine_section(store, requests, vllm_queue_by_trace)


def _assert_engine_section(store: Path, requests, vllm_queue_by_trace: dict[str, float]) -> None:
    """report --format json's engine section: per traffic class, vLLM's own queue times."""
    from click.testing import CliRunner

    import restorelens.cli

    result = CliRunner().invoke(restorelens.cli.cli, ["report", "--db", str(store), "--format", "json",
                                                      "--section", "engine"])
    assert result.exit_code == 0, result.output
    queue_rows = {row["traffic_class"]: row for row in json.loads(result.output)["engine"]
                  if row["metric"] == "queue_s"}
    classes = dict(zip(requests["trace_id"], requests["traffic_class"], strict=True))
    assert set(queue_rows) == {"batch", "interactive"}
    for traffic_class, row in queue_rows.items():
        own = [queue_s for trace_id, queue_s in vllm_queue_by_trace.items() if classes[trace_id] == traffic_class]
        assert (row["engine"], row["count"], row["max"]) == ("tiny", len(own), max(own))
