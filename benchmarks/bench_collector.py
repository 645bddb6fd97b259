"""Collector speed: file loading against DuckDB's own JSON reader, and the OTLP/HTTP receiver.

Run: ``.venv/bin/python -m benchmarks bench_collector`` (default: 100k spans, best of 3) or
``.venv/bin/python -m benchmarks.bench_collector --spans 1000000`` for the full target.

1. Load a generated Collector-shaped JSONL file (TracesData lines of 512 spans) with
   ``load_paths`` (derived tables included); side by side, the anchor: DuckDB ``read_json`` +
   unnest into ``otel_traces`` with the store's columns and the primary key ("TraceId", "SpanId")
   on the table, as ``schema.sql`` had it when the anchor was frozen (issue #23), in a fresh
   database, with ``read_json``'s default ``maximum_object_size`` (which holds the longest line);
   the practical limit (``json.loads`` of every line, nothing else), and the lenient span-by-span
   decoder alone (``fast=False``), and the store's work alone (the file decoded into memory before
   the clocks start: what is left once decoding is free, though holding the whole decoded file
   costs it too). Each run is its own process (imports excluded from the timing)
   so its peak memory (max RSS) is its own; the sides run in turn, each the same number of times,
   and the best wall time of each is compared. Wall and CPU seconds (all threads) are both
   printed, since on a shared machine the CPU figures are the stable ones; restorelens's run also
   prints where its time went (``collector/phases.py``).
2. The receiver (``create_receiver_app`` under uvicorn in its own process) fed by the real
   ``OTLPSpanExporter`` (protobuf, batches of 512) from client threads: spans/s, spans per
   receiver CPU-second from its first request to its store closed (so the derived tables written
   at stop count), spans lost, p50/p99 export latency (encode + answer), receiver peak RSS.
   Beside it, the store alone, what no receiver in front of it can beat: the same spans, already
   decoded, written by the receiver's store (one DuckDB thread, derived tables, close) in one
   transaction, and in the groups of two requests that two waiting clients give the receiver;
   CPU of this process, best of the same number of runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME, TELEMETRY_SDK_LANGUAGE

from benchmarks.ratios import versus
from restorelens import spans as S

#: The children run from here, so that they import this folder's `benchmarks.memory`.
ROOT = Path(__file__).resolve().parents[1]

SPANS_PER_LINE = 512
DEFAULT_SPANS = 100_000
DEFAULT_RECEIVER_SPANS = 51_200

SERVICES = ("gate", "restorelens-loadgen", "unknown_service:python")
NAMES = (S.SPAN_GATE_REQUEST, S.SPAN_HTTP_POST, S.SPAN_LLM_REQUEST, S.SPAN_CLIENT_REQUEST)


def generate_jsonl(path: Path, spans: int, seed: int = 7) -> None:
    """Collector file-exporter shape: lower hex, int64 strings, status {}, a few attributes and events."""
    rng = random.Random(seed)
    base = 1_700_000_000_000_000_000
    with open(path, "w", encoding="utf-8") as f:
        for first in range(0, spans, SPANS_PER_LINE):
            items = []
            for i in range(first, min(first + SPANS_PER_LINE, spans)):
                start = base + i * 1_000_000
                span = {
                    "traceId": f"{rng.getrandbits(128):032x}",
                    "spanId": f"{rng.getrandbits(64):016x}",
                    "parentSpanId": f"{rng.getrandbits(64):016x}",
                    "flags": 256,
                    "name": NAMES[i % 4],
                    "kind": 1 + i % 3,
                    "startTimeUnixNano": str(start),
                    "endTimeUnixNano": str(start + rng.randrange(10**6, 10**9)),
                    "attributes": [
                        {"key": S.ATTR_REQUEST_ID, "value": {"stringValue": f"req-{i}"}},
                        {"key": S.ATTR_TRAFFIC_CLASS, "value": {"stringValue": "interactive"}},
                        {"key": S.ATTR_HTTP_STATUS_CODE, "value": {"intValue": str(200 + i % 2 * 303)}},
                        {"key": S.ATTR_GATE_WAIT_S, "value": {"doubleValue": rng.random()}},
                        {"key": S.ATTR_GEN_AI_REQUEST_MODEL, "value": {"stringValue": "tiny"}},
                    ],
                    "status": {"code": 2, "message": "upstream 503"} if i % 10 == 0 else {},
                }
                if i % 4 == 0:
                    span["events"] = [
                        {"timeUnixNano": str(start + 1000), "name": S.EVENT_RETRY_WAIT,
                         "attributes": [{"key": "wait_s", "value": {"doubleValue": 0.5}}]}
                    ]
                items.append(span)
            resource = {"attributes": [
                {"key": SERVICE_NAME, "value": {"stringValue": SERVICES[first // SPANS_PER_LINE % 3]}},
                {"key": TELEMETRY_SDK_LANGUAGE, "value": {"stringValue": "python"}},
            ]}
            line = {"resourceSpans": [{"resource": resource, "scopeSpans": [
                {"scope": {"name": "restorelens", "version": "0.1.0"}, "spans": items}]}]}
            f.write(json.dumps(line, separators=(",", ":")))
            f.write("\n")


# --- the three loaders, each run in a child process -------------------------------------------

# The anchor's table, frozen as store/schema.sql defined otel_traces when the anchor was made fair
# (issue #23): the store's columns with the primary key ("TraceId", "SpanId") on the table itself.
_ANCHOR_DDL = """
create table otel_traces (
    "Timestamp" timestamp_ns not null, "TraceId" varchar not null, "SpanId" varchar not null,
    "ParentSpanId" varchar not null, "TraceState" varchar not null, "SpanName" varchar not null,
    "SpanKind" varchar not null, "ServiceName" varchar not null, "ResourceAttributes" map(varchar, varchar) not null,
    "ScopeName" varchar not null, "ScopeVersion" varchar not null, "SpanAttributes" map(varchar, varchar) not null,
    "Duration" ubigint not null, "StatusCode" varchar not null, "StatusMessage" varchar not null,
    "Events.Timestamp" timestamp_ns[] not null, "Events.Name" varchar[] not null,
    "Events.Attributes" map(varchar, varchar)[] not null, "Links.TraceId" varchar[] not null,
    "Links.SpanId" varchar[] not null, "Links.TraceState" varchar[] not null,
    "Links.Attributes" map(varchar, varchar)[] not null,
    primary key ("TraceId", "SpanId")
)
"""

# The anchor: DuckDB's own JSON reader and SQL, into that table. read_json's default
# maximum_object_size (16 MiB) holds every line here.
_ANCHOR_SQL = """
insert into otel_traces
with lines as (
  select * from read_json($src, format='newline_delimited', columns={
    'resourceSpans': 'STRUCT(resource STRUCT(attributes STRUCT(key VARCHAR, value STRUCT(stringValue VARCHAR, boolValue BOOLEAN, intValue VARCHAR, doubleValue DOUBLE, arrayValue JSON, kvlistValue JSON, bytesValue VARCHAR))[]), scopeSpans STRUCT(scope STRUCT(name VARCHAR, version VARCHAR), spans STRUCT(traceId VARCHAR, spanId VARCHAR, parentSpanId VARCHAR, traceState VARCHAR, name VARCHAR, kind INTEGER, startTimeUnixNano VARCHAR, endTimeUnixNano VARCHAR, attributes STRUCT(key VARCHAR, value STRUCT(stringValue VARCHAR, boolValue BOOLEAN, intValue VARCHAR, doubleValue DOUBLE, arrayValue JSON, kvlistValue JSON, bytesValue VARCHAR))[], events STRUCT(timeUnixNano VARCHAR, name VARCHAR, attributes STRUCT(key VARCHAR, value STRUCT(stringValue VARCHAR, boolValue BOOLEAN, intValue VARCHAR, doubleValue DOUBLE, arrayValue JSON, kvlistValue JSON, bytesValue VARCHAR))[])[], links STRUCT(traceId VARCHAR, spanId VARCHAR, traceState VARCHAR, attributes STRUCT(key VARCHAR, value STRUCT(stringValue VARCHAR, boolValue BOOLEAN, intValue VARCHAR, doubleValue DOUBLE, arrayValue JSON, kvlistValue JSON, bytesValue VARCHAR))[])[], status STRUCT(code INTEGER, message VARCHAR))[])[])[]'})
), rs as (select unnest(resourceSpans) as r from lines),
ss as (select r.resource as resource, unnest(r.scopeSpans) as s from rs),
sp as (select resource, s.scope as scope, unnest(s.spans) as sp from ss)
select make_timestamp_ns(cast(sp.startTimeUnixNano as bigint)) as "Timestamp",
  lower(sp.traceId) as "TraceId", lower(sp.spanId) as "SpanId", lower(coalesce(sp.parentSpanId, '')) as "ParentSpanId",
  coalesce(sp.traceState, '') as "TraceState", sp.name as "SpanName",
  ['Unspecified','Internal','Server','Client','Producer','Consumer'][coalesce(sp.kind, 0) + 1] as "SpanKind",
  coalesce(list_filter(resource.attributes, lambda a: a.key = $service_key)[1].value.stringValue, '') as "ServiceName",
  map_from_entries(list_transform(resource.attributes, lambda a: {'key': a.key, 'value': coalesce(a.value.stringValue, a.value.intValue, cast(a.value.doubleValue as varchar), cast(a.value.boolValue as varchar), cast(a.value.arrayValue as varchar), cast(a.value.kvlistValue as varchar), a.value.bytesValue, '')})) as "ResourceAttributes",
  coalesce(scope.name, '') as "ScopeName", coalesce(scope.version, '') as "ScopeVersion",
  map_from_entries(list_transform(sp.attributes, lambda a: {'key': a.key, 'value': coalesce(a.value.stringValue, a.value.intValue, cast(a.value.doubleValue as varchar), cast(a.value.boolValue as varchar), cast(a.value.arrayValue as varchar), cast(a.value.kvlistValue as varchar), a.value.bytesValue, '')})) as "SpanAttributes",
  cast(cast(sp.endTimeUnixNano as ubigint) - cast(sp.startTimeUnixNano as ubigint) as ubigint) as "Duration",
  ['Unset','Ok','Error'][coalesce(sp.status.code, 0) + 1] as "StatusCode", coalesce(sp.status.message, '') as "StatusMessage",
  list_transform(coalesce(sp.events, []), lambda e: make_timestamp_ns(cast(e.timeUnixNano as bigint))) as "Events.Timestamp",
  list_transform(coalesce(sp.events, []), lambda e: e.name) as "Events.Name",
  list_transform(coalesce(sp.events, []), lambda e: map_from_entries(list_transform(e.attributes, lambda a: {'key': a.key, 'value': coalesce(a.value.stringValue, a.value.intValue, cast(a.value.doubleValue as varchar), cast(a.value.boolValue as varchar), '')}))) as "Events.Attributes",
  list_transform(coalesce(sp.links, []), lambda l: lower(l.traceId)) as "Links.TraceId",
  list_transform(coalesce(sp.links, []), lambda l: lower(l.spanId)) as "Links.SpanId",
  list_transform(coalesce(sp.links, []), lambda l: coalesce(l.traceState, '')) as "Links.TraceState",
  list_transform(coalesce(sp.links, []), lambda l: map_from_entries(list_transform(l.attributes, lambda a: {'key': a.key, 'value': coalesce(a.value.stringValue, a.value.intValue, '')}))) as "Links.Attributes"
from sp
"""

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import duckdb
    from benchmarks.memory import peak_rss_bytes
    from opentelemetry.sdk.resources import SERVICE_NAME
    from restorelens.collector.loader import load_paths  # imports are not part of the timing
    mode, src, db = sys.argv[1:4]
    phases = {}
    t0 = time.perf_counter()
    c0 = time.process_time()
    if mode in ("restorelens", "restorelens-lenient"):
        summary = load_paths([src], db, fast=mode == "restorelens")
        spans = summary.loaded
        phases = summary.phases.as_dict()
    elif mode == "store-alone":
        from restorelens.collector.fast_jsonl import read_collector_jsonl_native
        from restorelens.collector.loader import DERIVE_EVERY_SPANS, INSERT_THREADS
        from restorelens.collector.staging import staged_blocks, staging_folder
        from restorelens.collector.store import SpanStore
        with open(src, "rb") as f, staging_folder() as folder:
            # decoded and staged, as the load's read-ahead thread does, before the clocks start
            tables = list(staged_blocks(read_collector_jsonl_native(f), folder))
            t0 = time.perf_counter()
            c0 = time.process_time()
            # load_paths' store work for one file, as _load_fast does it
            store = SpanStore(db, max_underived_spans=DERIVE_EVERY_SPANS)
            with store.transaction(threads=INSERT_THREADS) as con:
                spans = sum(store.insert_table(con, table, skip_existing=False) for table in tables)
            store.close()
        phases = store.phases.as_dict()
    elif mode == "duckdb-anchor":
        con = duckdb.connect(db)
        con.execute(sys.argv[5])
        con.execute(sys.argv[4], {"src": src, "service_key": SERVICE_NAME})
        spans = con.execute("select count(*) from otel_traces").fetchone()[0]
        con.close()
    else:
        spans = 0
        with open(src, "rb") as f:
            for line in f:
                spans += len(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"])
    elapsed = time.perf_counter() - t0
    cpu_s = time.process_time() - c0  # all threads (Arrow's and DuckDB's too)
    peak_mib = peak_rss_bytes() / 2**20  # bytes -> MiB
    print(json.dumps({"spans": spans, "seconds": elapsed, "cpu_s": cpu_s, "peak_mib": peak_mib, "phases": phases}))
    """
)

#: What each side of the load comparison does, printed beside its figures.
SIDES = {
    "json.loads": "json.loads of each line and a span count; no store (the practical limit)",
    "duckdb-anchor": "read_json + unnest into otel_traces (the store's columns, primary key (TraceId, SpanId) as "
                     "frozen for issue #23); open, commit, close; no derived tables",
    "restorelens": "load_paths: Arrow fast path into otel_traces (schema.sql, primary key); derived tables; "
                   "open, commit, close",
    "restorelens-lenient": "load_paths(fast=False): the span-by-span decoder, then the same store work",
    "store-alone": "restorelens's store work alone, the file decoded (and its attributes staged) before the "
                   "clocks start: insert into otel_traces, derived tables, open, commit, close (what is left "
                   "once decoding is free, though holding the decoded file costs it memory and cache; peak RSS includes the file)",
}


def _load_average() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _run_loader(mode: str, src: Path, db: Path) -> dict[str, Any]:
    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)  # each run loads into a fresh database
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, str(src), str(db), _ANCHOR_SQL, _ANCHOR_DDL],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _longest_line(path: Path) -> int:
    with open(path, "rb") as f:
        return max(len(line) for line in f)


def _breakdown(phases: dict[str, list[float]], total_wall: float, total_cpu: float) -> str:
    parts = [f"{step} {wall:.2f} s ({cpu:.2f} CPU)" for step, (wall, cpu) in phases.items()]
    rest_wall = total_wall - sum(wall for wall, _ in phases.values())
    rest_cpu = total_cpu - sum(cpu for _, cpu in phases.values())
    if rest_wall >= 0:
        parts.append(f"other {rest_wall:.2f} s ({rest_cpu:.2f} CPU)")
    else:  # the fast path decodes the next block in a thread while the current one is inserted
        parts.append(f"steps overlapping by {-rest_wall:.2f} s wall (decoding beside the inserts; the CPU "
                     f"figures are the process's while each step ran, so they overlap too)")
    return ", ".join(parts)


def bench_load(spans: int, workdir: Path, runs: int = 3, sides: tuple[str, ...] = tuple(SIDES)) -> None:
    src = workdir / "spans.jsonl"
    t0 = time.perf_counter()
    generate_jsonl(src, spans)
    size_mib = src.stat().st_size / 2**20
    print(f"load: {spans} spans, {size_mib:.1f} MiB JSONL in lines of {SPANS_PER_LINE}, longest line "
          f"{_longest_line(src) / 1024:.0f} KiB (generated in {time.perf_counter() - t0:.1f} s); each side best of "
          f"{runs} runs, in turn, each in a fresh process and database; load average {_load_average()} before")
    all_runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in sides}
    for _ in range(runs):
        for mode in sides:
            result = _run_loader(mode, src, workdir / f"{mode}.duckdb")
            assert result["spans"] == spans, (mode, result)
            all_runs[mode].append(result)
    results = {mode: min(found, key=lambda r: r["seconds"]) for mode, found in all_runs.items()}
    peaks = {mode: max(r["peak_mib"] for r in found) for mode, found in all_runs.items()}
    for mode, result in results.items():
        rate = spans / result["seconds"]
        print(f"  {mode:19s} {result['seconds']:7.2f} s  {rate:10,.0f} spans/s  {size_mib / result['seconds']:6.1f} MiB/s"
              f"  CPU {result['cpu_s']:6.2f} s ({spans / result['cpu_s']:9,.0f} spans/CPU-s)"
              f"  peak RSS {peaks[mode]:6.0f} MiB (highest run)")
        print(f"  {'':19s} = {SIDES[mode]}")
    print(f"  load average {_load_average()} after")
    for mode in ("restorelens", "restorelens-lenient", "store-alone"):
        if mode in results:
            print(f"  {mode} breakdown (its best run): "
                  f"{_breakdown(results[mode]['phases'], results[mode]['seconds'], results[mode]['cpu_s'])}")
    if "restorelens" not in results or "duckdb-anchor" not in results:
        return
    ours, anchor = results["restorelens"], results["duckdb-anchor"]
    summary = (f"  restorelens vs anchor: {versus(anchor['seconds'], ours['seconds'])} wall (goal >= 1.5x faster, "
               f"derived tables included), {versus(anchor['cpu_s'], ours['cpu_s'], better='less', worse='more')} CPU; "
               f"peak RSS "
               f"{peaks['restorelens']:.0f} vs {peaks['duckdb-anchor']:.0f} MiB, "
               f"{peaks['restorelens'] / peaks['duckdb-anchor']:.2f}x the anchor's (goal <= 1x); "
               f"{spans / ours['seconds']:,.0f} spans/s")
    if "json.loads" in results:
        bare = results["json.loads"]
        summary += (f"; {bare['seconds'] / ours['seconds']:.2f}x the bare json.loads rate wall, "
                    f"{bare['cpu_s'] / ours['cpu_s']:.2f}x by CPU")
    if "restorelens-lenient" in results:
        summary += f"; lenient decoder alone {anchor['seconds'] / results['restorelens-lenient']['seconds']:.2f}x anchor"
    print(summary)
    if "store-alone" in results:
        floor = results["store-alone"]
        print(f"  the store's work alone (the file decoded beforehand and held in memory): {floor['seconds']:.2f} s "
              f"wall, {floor['cpu_s']:.2f} CPU-s, {versus(anchor['seconds'], floor['seconds'])} than the anchor "
              f"wall ({versus(anchor['cpu_s'], floor['cpu_s'])} by CPU); the whole load takes "
              f"{ours['seconds'] / floor['seconds']:.2f}x its wall time")


# --- the receiver --------------------------------------------------------------------------------

# Its CPU is read by the receiver itself (all threads) once the server is up and again once it has
# stopped: the window ends after the writer's drain, the derivation it deferred and the store's close.
_RECEIVER = textwrap.dedent(
    """
    import json, sys, time
    from benchmarks.memory import peak_rss_bytes
    from restorelens.collector.receiver import create_receiver_app
    from restorelens.serving import ServerThread
    app = create_receiver_app(sys.argv[1])
    server = ServerThread(app).start()
    cpu0 = time.process_time()
    print(server.url, flush=True)
    sys.stdin.readline()
    server.stop()
    cpu_s = time.process_time() - cpu0
    peak_mib = peak_rss_bytes() / 2**20  # bytes -> MiB
    print(json.dumps({"cpu_s": cpu_s, "peak_mib": peak_mib, "phases": app.state.phases.as_dict()}), flush=True)
    """
)


def _make_batches(spans: int) -> list[list[object]]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "bench"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for i in range(spans):
        attributes = {"i": i, S.ATTR_TRAFFIC_CLASS: "interactive", S.ATTR_GATE_WAIT_S: 0.01}
        with tracer.start_as_current_span(S.SPAN_GATE_REQUEST, attributes=attributes) as span:
            span.add_event(S.EVENT_GRANT_ACQUIRED)
    finished = list(memory.get_finished_spans())
    provider.shutdown()
    return [finished[i:i + SPANS_PER_LINE] for i in range(0, len(finished), SPANS_PER_LINE)]


def _receive(batches: list[list[object]], db: Path, client_threads: int) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    import duckdb
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    with subprocess.Popen([sys.executable, "-c", _RECEIVER, str(db)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, cwd=ROOT) as proc:
        assert proc.stdout is not None and proc.stdin is not None
        url = proc.stdout.readline().strip() + "/v1/traces"
        exporters = [OTLPSpanExporter(endpoint=url) for _ in range(client_threads)]
        latencies: list[float] = []
        failures = 0

        def send(index: int) -> None:
            nonlocal failures
            t = time.perf_counter()
            result = exporters[index % client_threads].export(batches[index])
            latencies.append(time.perf_counter() - t)
            failures += result is not SpanExportResult.SUCCESS

        t0 = time.perf_counter()
        with ThreadPoolExecutor(client_threads) as pool:
            list(pool.map(send, range(len(batches))))
        elapsed = time.perf_counter() - t0
        proc.stdin.write("\n")
        proc.stdin.flush()
        stats = json.loads(proc.stdout.readline())
        proc.wait(timeout=60)
    con = duckdb.connect(str(db), read_only=True)
    stored = con.execute("select count(*) from otel_traces").fetchone()[0]
    con.close()
    latencies.sort()
    return {**stats, "seconds": elapsed, "stored": stored, "failures": failures,
            "p50_ms": latencies[len(latencies) // 2] * 1000,
            "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000}


def bench_receiver(spans: int, workdir: Path, client_threads: int = 2, runs: int = 3) -> None:
    batches = _make_batches(spans)
    print(f"receiver: {spans} SDK spans via OTLPSpanExporter (protobuf), batches of {SPANS_PER_LINE}, "
          f"{client_threads} client threads, client and receiver sharing the machine's cores; best of {runs} runs "
          f"by receiver CPU; load average {_load_average()} before")
    found = [_receive(batches, workdir / "receiver.duckdb", client_threads) for _ in range(runs)]
    best = min(found, key=lambda r: r["cpu_s"])
    cpu_s = best["cpu_s"]
    print(f"  {spans / best['seconds']:10,.0f} spans/s wall   {spans / cpu_s:10,.0f} spans per receiver CPU-second "
          f"(goal >= 50,000; receiver CPU {cpu_s:.2f} s from the first request to the store closed, derived tables "
          f"included)")
    print(f"  lost {spans - best['stored']} (failed exports {best['failures']})   export latency p50 "
          f"{best['p50_ms']:.1f} ms  p99 {best['p99_ms']:.1f} ms   receiver peak RSS {best['peak_mib']:.0f} MiB")
    parts = [f"{step} {cpu:.2f}" for step, (_, cpu) in best["phases"].items()]
    rest = cpu_s - sum(cpu for _, cpu in best["phases"].values())
    print(f"  receiver CPU seconds by step (on the thread doing it): {', '.join(parts)}, other (HTTP, uvicorn, "
          f"queueing) {rest:.2f}; load average {_load_average()} after")
    for group, label in ((len(batches), "in one transaction"), (client_threads, f"in groups of {client_threads} requests")):
        store_cpu = min(_store_alone(batches, workdir / "alone.duckdb", group) for _ in range(runs))
        print(f"  the store alone, {label}: {store_cpu:.2f} CPU-s, {spans / store_cpu:,.0f} spans per CPU-second "
              "(decoded spans, one DuckDB thread, derived tables, close: the ceiling for any receiver in front of it)")


def _store_alone(batches: list[list[object]], db: Path, group: int) -> float:
    """CPU seconds for the receiver's store to take ``batches`` (decoded), ``group`` requests per commit."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from restorelens.collector.proto_columns import native_table
    from restorelens.collector.store import SpanStore
    from restorelens.collector.writer import StoreWriter

    tables = [native_table(encode_spans(batch).SerializeToString()) for batch in batches]
    for stale in (db, db.with_name(db.name + ".wal")):
        stale.unlink(missing_ok=True)
    writer = StoreWriter(db)  # the receiver's store settings, through its own constructor
    store: SpanStore = writer._store
    started = time.process_time()
    for i in range(0, len(tables), group):
        store.insert_tables(tables[i:i + group])
    store.close()
    return time.process_time() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=DEFAULT_SPANS, help="spans in the generated JSONL file")
    parser.add_argument("--receiver-spans", type=int, default=DEFAULT_RECEIVER_SPANS,
                        help="spans sent to the receiver (0 skips the receiver)")
    parser.add_argument("--client-threads", type=int, default=2, help="concurrent OTLPSpanExporter clients")
    parser.add_argument("--runs", type=int, default=3, help="runs of each side; the best is compared")
    parser.add_argument("--sides", default=",".join(SIDES),
                        help=f"load sides to run, comma-separated (default: all of {', '.join(SIDES)})")
    args = parser.parse_args(sys.argv[1:] if argv is None and __name__ == "__main__" else argv or [])
    with tempfile.TemporaryDirectory(prefix="bench-collector-") as tmp:
        sides = tuple(side for side in args.sides.split(",") if side)
        unknown = [side for side in sides if side not in SIDES]
        if unknown:
            parser.error(f"unknown side {', '.join(unknown)}; known: {', '.join(SIDES)}")
        if args.spans < 1 or args.runs < 1 or args.receiver_spans < 0 or args.client_threads < 1:
            parser.error("--spans, --runs and --client-threads must be at least 1, --receiver-spans at least 0")
        if sides:
            bench_load(args.spans, Path(tmp), runs=args.runs, sides=sides)
        if args.receiver_spans:
            bench_receiver(args.receiver_spans, Path(tmp), client_threads=args.client_threads, runs=args.runs)


if __name__ == "__main__":
    main()
