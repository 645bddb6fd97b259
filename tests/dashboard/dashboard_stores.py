"""Realistic span stores for the dashboard tests.

MoFlux runs come from the real virtual-time runner (client, gate and engine spans, loaded through
the collector's file loader); wake episodes and lifecycle states are hand-built with the analysis
tests' span builder, because no runner emits them yet. Every wake timing below is exact, so tests
can look for the numbers in the figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))

from builders import Traces  # noqa: E402

from restorelens import spans as sc  # noqa: E402
from restorelens.collector import load_paths  # noqa: E402
from restorelens.experiments import RunTelemetry, get_scenario, run_virtual  # noqa: E402

#: (arm, seed) of the MoFlux runs in the realistic store.
MOFLUX_RUNS = (("lend", 1), ("lend", 2), ("static", 1), ("static", 2))

#: The hand-built wake episodes: (model, wake path, hint s, ready s, observed s, retry times, success s).
WAKES = (
    ("tiny", "in-place", 10.0, 4.0625, 4.5625, (), 10.125),
    ("small", "make-room", 20.0, 12.5, 13.0, (), 20.25),
    ("tiny", "cold-start", 10.0, 31.25, 31.5, (10.25, 20.5), 30.75 + 1.0),
)


#: The cold-start wake's engine startup spans, (name, start s, end s, children) from its process
#: start (t0 + 0.0625; ready 31.1875 s later): 24 s covered, 7.1875 s outside the engine's spans.
STARTUP = (
    (sc.SPAN_VLLM_OVERALL_LOADING, 2.0, 26.0, (
        (sc.SPAN_VLLM_ENGINE_CORE_PROC_INIT, 3.0, 25.0, (
            (sc.SPAN_VLLM_LOAD_MODEL, 3.0, 8.0, ()),
            (sc.SPAN_VLLM_WARMUP_CPU, 8.0, 24.0, ()),
        )),
    )),
)


def moflux_files(folder: Path) -> list[Path]:
    paths = []
    for arm, seed in MOFLUX_RUNS:
        path = folder / f"moflux-{arm}-{seed}.jsonl"
        telemetry = RunTelemetry("file", path=path)
        run_virtual(get_scenario("moflux-balanced", arm), seed, telemetry.providers, run_id=f"{arm}-{seed}")
        telemetry.shutdown()
        paths.append(path)
    return paths


def wake_traces() -> Traces:
    """Three wake episodes (retries answered 503 until the engine was ready) and lifecycle states."""
    traces = Traces()
    base = 200.0  # after the MoFlux runs, so the stores' timelines do not overlap
    for index, (model, path, hint, ready, observed, retries, success) in enumerate(WAKES):
        t0 = base + 100.0 * index
        trace = traces.new_trace()
        client = traces.client_request(trace, t0, t0 + success + 2.0, first_chunk_s=t0 + success + 0.75,
                                       model=model, request_id=f"wake-{index}", retry_policy="honour-retry-after",
                                       workload="modelclaim", attempts=2 + len(retries))
        first = _not_ready(traces, trace, client, t0, hint)
        for resend, at in enumerate(retries, start=1):
            _not_ready(traces, trace, client, t0 + at, hint, resend=resend)
        attempt = traces.attempt(trace, client, t0 + success, t0 + success + 2.0, status=200,
                                 resend_count=len(retries) + 1)
        traces.served_via_gate(trace, attempt, t0 + success + 0.03125, t0 + success + 1.9,
                               upstream_s=t0 + success + 0.0625, engine_arrival_s=t0 + success + 0.125,
                               time_in_queue_s=0.125, ttft_s=0.5, e2e_s=1.5, policy="fcfs")
        wake = traces.model_wake(t0 + 0.0625, t0 + observed, link=(trace, first), model=model, wake_path=path,
                                 wake_called_s=t0 + 0.0625, ready_s=t0 + ready, observed_s=t0 + observed)
        if path == "cold-start":
            _startup(traces, traces.spans[-1].trace_id, wake, STARTUP, t0 + 0.0625)
        traces.model_state(t0 - 30.0, t0, phase="Sleeping", reason="EngineSleeping", model=model)
        traces.model_state(t0, t0 + ready, phase="Activating", reason="EngineSleeping", model=model)
        traces.model_state(t0 + ready, t0 + 90.0, phase="Active", reason="ModelClaimActive", model=model)
    return traces


#: A user's own app calling vLLM directly, no gate, no restorelens client: (app.tier, attempt start s,
#: engine arrival s, time in queue s, TTFT s, prefill s or None for an engine core that reported
#: none). Scheduled at arrival + TTFT - prefill (upper bound) and arrival + queue (lower bound).
GATELESS = (
    ("premium", 1000.0, 1000.25, 0.5, 1.0, None),
    ("premium", 1005.0, 1005.25, 0.25, 0.75, None),
    ("premium", 1010.0, 1010.125, 1.0, 1.5, 0.25),  # the core took it late: scheduled at 1011.375
    ("standard", 1015.0, 1015.25, 2.0, 2.5, None),
    ("standard", 1020.0, 1020.25, 0.125, 0.5, "missing"),  # no prefill time: the lower bound is the point
)
#: The attribute the gateless app puts its traffic class under (map it with --label).
GATELESS_TIER = "app.tier"


def gateless_traces(traces: Traces | None = None) -> Traces:
    """``GATELESS``: the app's own span > its HTTP POST > vLLM's llm_request (no service name)."""
    traces = traces or Traces()
    for tier, start, arrival, queue, ttft, prefill in GATELESS:
        trace = traces.new_trace()
        chat = traces.span(trace, "chat", start, arrival + 3.0, service="chat-app", attributes={GATELESS_TIER: tier})
        post = traces.attempt(trace, chat, start, arrival + 3.0, status=200, service="chat-app")
        traces.engine(trace, post, arrival, time_in_queue_s=queue, ttft_s=ttft, e2e_s=2.75,
                      prefill_s=prefill if isinstance(prefill, float) else None)
        if prefill == "missing":
            del traces.spans[-1].attributes[sc.ATTR_LATENCY_TIME_IN_MODEL_PREFILL]
    return traces


def gateless_store(db_path: Path) -> Path:
    gateless_traces().save(db_path)
    return db_path


RUNNING, WAITING, KV = "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"
#: Scrapes of the two engines serving "tiny" around the first wake episode (t0 = 200 s): (offset s,
#: running, waiting, KV-cache usage). Its window is t0 - 5 s to its first token + 5 s (195 to 215.75).
TINY_SCRAPES = {
    "http://engine-a:8000/metrics": ((190.0, 0, 0, 0.0), (199.75, 3, 4, 0.875), (200.25, 2, 5, 0.9375),
                                     (205.0, 1, 1, 0.5), (210.5, 1, 0, 0.25), (230.0, 0, 0, 0.0)),
    "http://engine-b:8000/metrics": ((199.5, 1, 0, 0.125), (208.0, 2, 1, 0.375)),
}
#: The MoFlux runs' model: scraped every half second over their whole protocol.
MOFLUX_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"


def engine_store(db_path: Path, realistic: Path) -> Path:
    """The realistic store plus ``GATELESS`` requests and engine scrapes: ``TINY_SCRAPES`` and the
    MoFlux engine's every 0.5 s (the "small" model's engine was never scraped)."""
    db_path.write_bytes(realistic.read_bytes())
    traces = gateless_traces()
    for target, samples in TINY_SCRAPES.items():
        traces.engine_samples(target, "tiny", [(at, {RUNNING: running, WAITING: waiting, KV: kv})
                                               for at, running, waiting, kv in samples])
    traces.engine_samples("http://moflux:8000/metrics", MOFLUX_MODEL,
                          [(k / 2, {RUNNING: k % 4, WAITING: k % 3, KV: (k % 8) / 8}) for k in range(0, 300)])
    traces.save(db_path)
    return db_path


#: Interactive requests that called the engine directly (the no-gate arm, a null policy), each in
#: the contention phase of a 10 s window and on time (SLO goodput 0.1 req/s): (request id,
#: workload, seed). One carries no workload or seed label; one shares the MoFlux runs' balanced
#: seed 1, so the paired differences compare the no-gate arm with lend and static there.
ARMLESS = (("direct-0", None, None), ("direct-1", "balanced", 1))


def armless_store(db_path: Path, realistic: Path) -> Path:
    """The realistic store plus the ``ARMLESS`` requests (no gate, no policy label)."""
    db_path.write_bytes(realistic.read_bytes())
    traces = Traces()
    for index, (request_id, workload, seed) in enumerate(ARMLESS):
        start = 2000.0 + 10.0 * index
        trace = traces.new_trace()
        client = traces.client_request(trace, start, start + 2.0, first_chunk_s=start + 0.5, request_id=request_id,
                                       workload=workload, seed=seed, run_id=f"armless-{index}",
                                       arrival_phase=sc.ARRIVAL_PHASE_RETURN, arrival_phase_window_s=10.0)
        attempt = traces.attempt(trace, client, start, start + 2.0, status=200)
        traces.engine(trace, attempt, start + 0.0625, time_in_queue_s=0.125, ttft_s=0.375, e2e_s=1.5)
    traces.save(db_path)
    return db_path


def _startup(traces: Traces, trace: str, parent: str, tree: tuple, process_start_s: float) -> None:
    """An engine's startup spans under the wake span, as an engine started with its TRACEPARENT exports them."""
    for name, start, end, children in tree:
        span = traces.span(trace, name, process_start_s + start, process_start_s + end, parent=parent,
                           service="vllm")
        _startup(traces, trace, span, children, process_start_s)


def _not_ready(traces: Traces, trace: str, client: str, start: float, hint: float, resend: int | None = None) -> str:
    attempt = traces.attempt(trace, client, start, start + 0.125, status=503, retry_after_header=f"{hint:g}",
                             retry_after_s=hint, resend_count=resend)
    return traces.gate_request(trace, attempt, start + 0.03125, start + 0.09375, status=503, decision="not_ready",
                               retry_after_s=hint, phase="Sleeping", reason="EngineSleeping")


def build_store(db_path: Path, work: Path) -> Path:
    """MoFlux runs through the collector's loader, then the wake spans, into ``db_path``."""
    summary = load_paths(moflux_files(work), db_path)
    assert summary.rejected == 0 and summary.malformed == 0, summary.describe()
    wake_traces().save(db_path)
    return db_path


def empty_store(db_path: Path) -> Path:
    from restorelens.collector import SpanStore

    with SpanStore(db_path):
        pass
    return db_path


#: Markup a span name, a service name or an attribute value could carry: Plotly reads each of these
#: tags in the text it draws (a link, bold, a styled span, a line break).
HOSTILE = '<a href="https://evil.example/x">click</a><b>bold</b><span style="color:red">red</span><br>&amp;'
#: The attributes that carry a user's words into the figures (models, policies, workloads, paths, ids).
_HOSTILE_KEYS = (
    sc.ATTR_POLICY, sc.ATTR_GATE_POLICY, sc.ATTR_WORKLOAD, sc.ATTR_GEN_AI_REQUEST_MODEL, sc.ATTR_RETRY_POLICY,
    sc.ATTR_REQUEST_ID, sc.ATTR_RUN_ID, sc.ATTR_MODELCLAIM_PHASE, sc.ATTR_MODELCLAIM_REASON, sc.ATTR_MODELCLAIM_POD,
    sc.ATTR_MODELCLAIM_WAKE_PATH,
)


def hostile_store(db_path: Path, realistic: Path) -> Path:
    """The realistic store with ``HOSTILE`` appended to every service name and to each attribute in
    ``_HOSTILE_KEYS`` (consistently, so every join and episode still holds), plus a child span named
    ``HOSTILE`` with an event named ``HOSTILE`` under each client request."""
    from restorelens.analysis.derived import rebuild

    db_path.write_bytes(realistic.read_bytes())
    keys = ", ".join(f"'{key}'" for key in _HOSTILE_KEYS)
    con = duckdb.connect(str(db_path))
    try:
        con.execute(f"""
            create temporary table hostile as
            select * replace (
                "ServiceName" || $hostile as "ServiceName",
                map_from_entries(list_transform(map_entries("SpanAttributes"), lambda e: {{
                    'key': e.key, 'value': case when e.key in ({keys}) then e.value || $hostile else e.value end
                }})) as "SpanAttributes"
            ) from otel_traces
            union all
            select * replace (
                substr(md5("SpanId"), 1, 16) as "SpanId", "SpanId" as "ParentSpanId", $hostile as "SpanName",
                'Internal' as "SpanKind", "ServiceName" || $hostile as "ServiceName",
                map([], [])::map(varchar, varchar) as "SpanAttributes",
                (1000000)::ubigint as "Duration",
                ["Timestamp"] as "Events.Timestamp", [$hostile] as "Events.Name",
                [map([], [])::map(varchar, varchar)] as "Events.Attributes",
                []::varchar[] as "Links.TraceId", []::varchar[] as "Links.SpanId",
                []::varchar[] as "Links.TraceState", []::map(varchar, varchar)[] as "Links.Attributes"
            ) from otel_traces where "SpanName" = $client
        """, {"hostile": HOSTILE, "client": sc.SPAN_CLIENT_REQUEST})
        con.execute("delete from otel_traces")
        con.execute("insert into otel_traces select * from hostile")
        rebuild(con)  # the derived tables the copy kept hold the old values
    finally:
        con.close()
    return db_path
