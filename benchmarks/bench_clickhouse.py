"""Fleet scale (issue #22): the full decomposition on chDB (embedded ClickHouse) beside DuckDB, at 10M
and 100M spans of a 24-hour table, and with a 1-hour window pushed down.

The spans: the virtual runs of ``bench_dashboard`` (8 MoFlux lending runs and 12 ModelClaim wake
runs, run ids on every resource), loaded through the collector into a DuckDB store and copied into
chDB by ``restorelens export --to chdb:`` (``export_to_clickhouse``), into the OpenTelemetry
Collector ClickHouse exporter's own table (``EXPORTER_DDL``). They are then replicated in
ClickHouse itself: ``numbers(copies)`` cross joined with the base, every copy k with fresh ids
(trace, span, parent and link ids: the hex MD5 of id || k), run and request ids + "-k" (span and
resource attributes, ``mapApply``), seeds + 1000 k, and times moved by k steps, the copies spread
evenly over 24 hours. The DuckDB store gets the same spans by the same SQL in DuckDB's dialect
(``bench_dashboard.REPLICATE_SQL``'s form), inserted copy by copy in time order as a collector
writes them; a fingerprint of both tables (count, durations, instants, runs, request ids, links)
must be equal before anything is timed.

Timed, best of the same number of rounds on each side, each run in a fresh process (cold: no
engine cache, buffer pool or Python state survives; the OS page cache is not dropped, and both
stores are read once before timing, so both start from it alike):

- full: ``build_report`` (every section of ``restorelens report``) on ``open_analysis`` of the
  source with ``materialize=True``, as ``restorelens report --source`` runs it. On chDB the layers
  others read are computed once into session temporary tables (``analysis.clickhouse.analysis.KEPT_LAYERS``) and
  the rest are CTEs over them; on DuckDB the store has no derived tables (the copies went in by
  SQL, past the collector), so every layer is computed from ``otel_traces`` too, the shared ones
  into temporary tables: the like-for-like pair. Up to ``DERIVE_UP_TO`` spans the DuckDB store's derived tables are then built
  (as a collector keeps them) and the DuckDB report is timed again on them;
- windowed: the same report on a 1-hour ``Window`` in the middle of the 24 hours (ClickHouse: a
  ``where`` on the scan, pruned by partition and granule; DuckDB: a temporary ``otel_traces`` of
  the window's spans).

Printed per size: build times, bytes per span on each engine, each timing (wall, CPU, the worker's
peak RSS), the ratios chDB / DuckDB, decomposed spans per second, and the growth from the smallest
size to each larger one per engine. Episode counts must be equal between the engines (full and
windowed) and, in full, equal to copies x the base's.

``python -m benchmarks bench_clickhouse`` runs 10M and 100M; ``--sizes 1M,10M`` (or
``RESTORELENS_BENCH_CH_SIZES=1M,10M``) other sizes, ``--rounds N`` (``RESTORELENS_BENCH_CH_ROUNDS``;
default 3 up to 10M spans, 2 above) the rounds. A size is skipped with the reason printed when the
disk cannot hold its two stores or the estimate from the size before it exceeds ``--max-minutes``
(default 40).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.memory import peak_rss_bytes

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SIZES = (10_000_000, 100_000_000)
SIZES_ENV = "RESTORELENS_BENCH_CH_SIZES"
ROUNDS_ENV = "RESTORELENS_BENCH_CH_ROUNDS"
DAY_NS = 24 * 3600 * 1_000_000_000
HOUR_NS = 3600 * 1_000_000_000
#: The DuckDB store's derived tables are built and timed up to this size (~2.6 GiB peak RSS and
#: ~27 s per 10M spans in bench_analysis: beyond it they would not fit the machine's memory).
DERIVE_UP_TO = 20_000_000
#: Copies per DuckDB insert (~0.9M spans): each sorted by copy and time, as a collector's store is.
DUCKDB_COPIES_PER_INSERT = 200
WORKER_TIMEOUT_S = 3600

_COLUMNS = ("Timestamp", "TraceId", "SpanId", "ParentSpanId", "TraceState", "SpanName", "SpanKind", "ServiceName",
            "ResourceAttributes", "ScopeName", "ScopeVersion", "SpanAttributes", "Duration", "StatusCode",
            "StatusMessage", "Events.Timestamp", "Events.Name", "Events.Attributes", "Links.TraceId", "Links.SpanId",
            "Links.TraceState", "Links.Attributes")
_RENAMED_SPAN_KEYS = ("restore.run_id", "restore.request_id", "gen_ai.request.id")

# Copy k of the base (ks: k in [0, copies)), in ClickHouse: the same rewrite as DUCKDB_REPLICATE.
CLICKHOUSE_REPLICATE = """
insert into otel_traces ({columns})
select
    fromUnixTimestamp64Nano(toUnixTimestamp64Nano(Timestamp) + k * {step_ns}),
    lower(hex(MD5(concat(TraceId, toString(k))))),
    substring(lower(hex(MD5(concat(SpanId, toString(k))))), 1, 16),
    if(ParentSpanId = '', '', substring(lower(hex(MD5(concat(ParentSpanId, toString(k))))), 1, 16)),
    TraceState, SpanName, SpanKind, ServiceName,
    mapApply((key, value) -> (key, if(key = 'restore.run_id', concat(value, '-', toString(k)), value)),
             ResourceAttributes),
    ScopeName, ScopeVersion,
    mapApply((key, value) -> (key, multiIf(key in ({renamed}), concat(value, '-', toString(k)),
                                           key = 'restore.seed', toString(toInt64(value) + 1000 * k),
                                           value)),
             SpanAttributes),
    Duration, StatusCode, StatusMessage,
    arrayMap(ts -> fromUnixTimestamp64Nano(toUnixTimestamp64Nano(ts) + k * {step_ns}), `Events.Timestamp`),
    `Events.Name`, `Events.Attributes`,
    arrayMap(id -> lower(hex(MD5(concat(id, toString(k))))), `Links.TraceId`),
    arrayMap(id -> substring(lower(hex(MD5(concat(id, toString(k))))), 1, 16), `Links.SpanId`),
    `Links.TraceState`, `Links.Attributes`
from (select toInt64(number) as k from numbers({copies})) as ks cross join base_spans
"""

# The same in DuckDB, copies [$first, $last) at a time from the attached base store.
DUCKDB_REPLICATE = """
insert into otel_traces
select
    "Timestamp" + to_microseconds(k * $step_us),
    md5("TraceId" || k),
    substr(md5("SpanId" || k), 1, 16),
    case when "ParentSpanId" = '' then '' else substr(md5("ParentSpanId" || k), 1, 16) end,
    "TraceState", "SpanName", "SpanKind", "ServiceName",
    map_from_entries(list_transform(map_entries("ResourceAttributes"), lambda entry:
        case when entry.key = 'restore.run_id' then {'key': entry.key, 'value': entry.value || '-' || k}
             else entry end)),
    "ScopeName", "ScopeVersion",
    map_from_entries(list_transform(map_entries("SpanAttributes"), lambda entry:
        case when entry.key in ('restore.run_id', 'restore.request_id', 'gen_ai.request.id')
                 then {'key': entry.key, 'value': entry.value || '-' || k}
             when entry.key = 'restore.seed'
                 then {'key': entry.key, 'value': (try_cast(entry.value as bigint) + 1000 * k)::varchar}
             else entry end)),
    "Duration", "StatusCode", "StatusMessage",
    list_transform("Events.Timestamp", lambda ts: ts + to_microseconds(k * $step_us)),
    "Events.Name", "Events.Attributes",
    list_transform("Links.TraceId", lambda id: md5(id || k)),
    list_transform("Links.SpanId", lambda id: substr(md5(id || k), 1, 16)),
    "Links.TraceState", "Links.Attributes"
from (select range as k from range($first, $last)) as ks cross join base.otel_traces
order by k, "Timestamp"
"""

# Order-free fingerprint of a table's spans, equal on both engines when they hold the same spans.
_FINGERPRINT = {
    "duckdb": """select count(*), sum("Duration")::hugeint, sum(epoch_ns("Timestamp") % 1000003)::hugeint,
                        count(distinct "ResourceAttributes"['restore.run_id']),
                        sum(length(coalesce("SpanAttributes"['restore.request_id'], '')))::hugeint,
                        sum(len("Links.SpanId"))::hugeint, min(epoch_ns("Timestamp")), max(epoch_ns("Timestamp"))
                 from otel_traces""",
    "chdb": """select count(), sum(Duration), sum(toUnixTimestamp64Nano(Timestamp) % 1000003),
                      uniqExact(ResourceAttributes['restore.run_id']),
                      sum(length(SpanAttributes['restore.request_id'])),
                      sum(length(`Links.SpanId`)), min(toUnixTimestamp64Nano(Timestamp)),
                      max(toUnixTimestamp64Nano(Timestamp))
               from otel_traces""",
}


# --- sizes and options ---------------------------------------------------------------------------

def parse_size(text: str) -> int:
    text = text.strip().lower().replace("_", "")
    scale = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("kmg")) * scale)


def options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_clickhouse", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=os.environ.get(SIZES_ENV, ""),
                        help=f"comma-separated span counts, e.g. 1M,10M (default {SIZES_ENV} or 10M,100M)")
    parser.add_argument("--rounds", type=int, default=int(os.environ.get(ROUNDS_ENV, "0")) or None,
                        help="timed runs per engine and measurement, the best kept (default 3 up to 10M "
                             "spans, 2 above)")
    parser.add_argument("--max-minutes", type=float, default=40.0,
                        help="skip a size whose estimated build and measurement exceeds this (default 40)")
    parser.add_argument("--folder", default=None, help="work folder (default: a temporary one under /tmp)")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sizes = tuple(sorted(parse_size(s) for s in args.sizes.split(",") if s.strip())) or DEFAULT_SIZES
    return args


def rounds_for(size: int, rounds: int | None) -> int:
    """Timed runs per engine and measurement: ``rounds``, or 3 up to 10M spans and 2 above (as
    bench_analysis; the machine is shared, others only ever add time)."""
    return rounds or (3 if size <= 10_000_000 else 2)


def human(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:g}{unit}"
    return f"{n:g}"


def folder_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --- building the stores -------------------------------------------------------------------------

def build_base(folder: Path) -> tuple[Path, int, dict[str, int]]:
    """The base runs in a DuckDB store: its path, span count and episode counts."""
    import duckdb

    from benchmarks.bench_dashboard import record_runs
    from restorelens.analysis import Analysis
    from restorelens.collector import load_paths

    db = folder / "base.duckdb"
    load_paths(record_runs(folder), db)
    with Analysis.open(db) as analysis:
        counts = {"lending": analysis.lending_episodes().height, "wake": analysis.wake_episodes().height}
    con = duckdb.connect(str(db), read_only=True)
    try:
        spans, first_ns, last_ns = con.execute(
            'select count(*), min(epoch_ns("Timestamp")), max(epoch_ns("Timestamp") + "Duration") from otel_traces'
        ).fetchone()
    finally:
        con.close()
    counts["first_ns"], counts["last_ns"] = first_ns, last_ns
    return db, spans, counts


def build_chdb(base_db: Path, path: Path, copies: int, step_ns: int) -> None:
    """``otel_traces`` (the exporter's DDL) in a chDB folder holding ``copies`` copies of the base."""
    from chdb import session

    from restorelens.store import EXPORTER_DDL
    from restorelens.collector.export import export_to_clickhouse
    from restorelens.sources import parse_source

    export_to_clickhouse(base_db, parse_source(f"chdb:{path}"))
    chdb = session.Session(str(path))
    try:
        chdb.query("rename table otel_traces to base_spans")
        chdb.query(EXPORTER_DDL)
        chdb.query(CLICKHOUSE_REPLICATE.format(
            columns=", ".join(f"`{c}`" for c in _COLUMNS), step_ns=step_ns, copies=copies,
            renamed=", ".join(f"'{key}'" for key in _RENAMED_SPAN_KEYS)))
        chdb.query("drop table base_spans sync")
    finally:
        chdb.close()


def build_duckdb(base_db: Path, path: Path, copies: int, step_ns: int) -> None:
    """The same spans in a DuckDB store (restorelens's schema), copy by copy in time order."""
    import duckdb

    from restorelens.store import create_schema

    con = duckdb.connect(str(path))
    try:
        create_schema(con)
        con.execute(f"attach '{base_db}' as base (read_only)")
        for first in range(0, copies, DUCKDB_COPIES_PER_INSERT):
            con.execute(DUCKDB_REPLICATE, {"step_us": step_ns // 1000, "first": first,
                                           "last": min(copies, first + DUCKDB_COPIES_PER_INSERT)})
        con.execute("detach base")
        con.execute("checkpoint")
    finally:
        con.close()


def fingerprint(engine: str, path: Path) -> tuple[int, ...]:
    if engine == "duckdb":
        import duckdb

        con = duckdb.connect(str(path), read_only=True)
        try:
            return tuple(int(v) for v in con.execute(_FINGERPRINT["duckdb"]).fetchone())
        finally:
            con.close()
    from chdb import session

    chdb = session.Session(str(path))
    try:
        return tuple(int(v) for v in chdb.query(_FINGERPRINT["chdb"], "CSV").bytes().decode().strip().split(","))
    finally:
        chdb.close()


def chdb_parts(path: Path) -> tuple[int, int]:
    """Active parts of ``otel_traces`` and its bytes on disk (compressed)."""
    from chdb import session

    chdb = session.Session(str(path))
    try:
        text = chdb.query("select count(), sum(bytes_on_disk) from system.parts "
                          "where active and table = 'otel_traces'", "CSV").bytes().decode()
    finally:
        chdb.close()
    parts, size = text.strip().split(",")
    return int(parts), int(size)


def derive(path: Path) -> float:
    """Build the DuckDB store's derived tables as a collector keeps them; seconds taken."""
    import duckdb

    from restorelens.analysis import derived

    started = time.perf_counter()
    con = duckdb.connect(str(path))
    try:
        derived.ensure(con)
        con.execute("checkpoint")
    finally:
        con.close()
    return time.perf_counter() - started


# --- one timed run, in its own process ----------------------------------------------------------

def worker(spec: dict) -> dict:
    """Open the source (with the window, if any) and build the whole report: wall and CPU seconds
    and the episode counts."""
    from restorelens.analysis.report import build_report
    from restorelens.analysis.sources import open_analysis
    from restorelens.analysis.window import Window
    from restorelens.sources import parse_source

    window = Window(since_ns=spec.get("since_ns"), until_ns=spec.get("until_ns"))
    started, cpu = time.perf_counter(), time.process_time()
    with open_analysis(parse_source(spec["source"]), window=window, materialize=True) as analysis:
        report = build_report(analysis)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    counts = dict(zip(report["episode_counts"]["episodes"].to_list(), report["episode_counts"]["count"].to_list(),
                      strict=True))
    censored = dict(zip(report["episode_counts"]["episodes"].to_list(),
                        report["episode_counts"]["censored"].to_list(), strict=True))
    return {"wall": wall, "cpu": cpu, "lending": counts["lending"], "wake": counts["wake"],
            "lending_censored": censored["lending"], "wake_censored": censored["wake"],
            "policy_rows": report["policy_summary"].height}


def timed(spec: dict) -> dict:
    """``worker(spec)`` in a fresh process, with its peak RSS (KiB -> bytes); a failure is a dict
    with ``error``."""
    process = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_clickhouse", "--worker", json.dumps(spec)],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return {"error": f"timed out after {WORKER_TIMEOUT_S} s"}
    if process.returncode == -signal.SIGKILL:
        # nothing on stderr: the kernel's OOM killer is what sends SIGKILL to a worker here
        return {"error": "killed by SIGKILL (out of memory: the kernel's OOM killer; see dmesg)"}
    if process.returncode != 0:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        return {"error": f"exit {process.returncode}: {lines[-1] if lines else '?'}"}
    return json.loads(out.strip().splitlines()[-1])


def best(runs: list[dict]) -> dict:
    good = [run for run in runs if "error" not in run]
    return min(good, key=lambda run: run["wall"]) if good else runs[0]


# --- one size ------------------------------------------------------------------------------------

def line(label: str, run: dict, spans: int) -> str:
    if "error" in run:
        return f"  {label:<46} FAILED: {run['error']}"
    rate = f"  {spans / run['wall'] / 1e6:6.2f}M spans/s" if spans else ""
    return (f"  {label:<52} {run['wall']:7.2f} s wall {run['cpu']:7.2f} s CPU  peak RSS {run['rss'] / 2**30:5.2f} GiB"
            + rate)


def measure(size: int, base: tuple[Path, int, dict[str, int]], folder: Path, rounds: int) -> dict:
    base_db, base_spans, base_counts = base
    copies = max(1, -(-size // base_spans))
    base_length_ns = base_counts["last_ns"] - base_counts["first_ns"]
    step_ns = (DAY_NS - base_length_ns) // max(1, copies - 1) // 1000 * 1000  # whole microseconds
    chdb_path, duck_path = folder / f"chdb-{human(size)}", folder / f"spans-{human(size)}.duckdb"
    result: dict = {"size": size, "copies": copies}

    started = time.perf_counter()
    build_chdb(base_db, chdb_path, copies, step_ns)
    result["build_chdb_s"] = time.perf_counter() - started
    started = time.perf_counter()
    build_duckdb(base_db, duck_path, copies, step_ns)
    result["build_duckdb_s"] = time.perf_counter() - started
    started = time.perf_counter()
    ch_print, duck_print = fingerprint("chdb", chdb_path), fingerprint("duckdb", duck_path)
    result["fingerprint_s"] = time.perf_counter() - started
    if ch_print != duck_print:
        raise RuntimeError(f"the engines hold different spans: chDB {ch_print}, DuckDB {duck_print}")
    spans, first_ns, last_ns = ch_print[0], ch_print[6], ch_print[7]
    parts, parts_bytes = chdb_parts(chdb_path)
    result.update(spans=spans, chdb_bytes=folder_bytes(chdb_path), chdb_parts=parts, chdb_parts_bytes=parts_bytes,
                  duckdb_bytes=folder_bytes(duck_path), hours=(last_ns - first_ns) / HOUR_NS)
    print(f"{spans:,} spans ({copies:,} copies of {base_spans:,}, over {result['hours']:.1f} h), identical on both "
          f"engines (count {spans:,}, durations, instants, {ch_print[3]:,} runs, request ids, links): "
          f"chDB built in {result['build_chdb_s']:.0f} s, DuckDB in {result['build_duckdb_s']:.0f} s", flush=True)
    print(f"  on disk: chDB {result['chdb_bytes'] / 2**30:.2f} GiB ({result['chdb_bytes'] / spans:.1f} B/span; "
          f"{parts} parts), DuckDB {result['duckdb_bytes'] / 2**30:.2f} GiB "
          f"({result['duckdb_bytes'] / spans:.1f} B/span)", flush=True)

    middle = first_ns + DAY_NS // 2
    window = {"since_ns": middle, "until_ns": middle + HOUR_NS}
    specs = {"chdb": {"source": f"chdb:{chdb_path}"}, "duckdb": {"source": str(duck_path)},
             "chdb 1h": {"source": f"chdb:{chdb_path}", **window}, "duckdb 1h": {"source": str(duck_path), **window},
             # a window before every span: what a chDB report costs whatever the data
             "chdb 0": {"source": f"chdb:{chdb_path}", "since_ns": 0, "until_ns": 1}}
    runs: dict[str, list[dict]] = {name: [] for name in specs}
    for _ in range(rounds):
        for name, spec in specs.items():
            runs[name].append(timed(spec))
    if size <= DERIVE_UP_TO:
        result["derive_s"] = derive(duck_path)
        result["duckdb_derived_bytes"] = folder_bytes(duck_path)
        runs["duckdb derived"] = [timed(specs["duckdb"]) for _ in range(rounds)]
    result["best"] = {name: best(group) for name, group in runs.items()}
    result["window_spans"] = window_spans(chdb_path, window)

    b = result["best"]
    print(f"  (best of {rounds} each, a fresh process per run)")
    print(line("full report, chDB (every layer from otel_traces)", b["chdb"], spans))
    print(line("full report, DuckDB (every layer from otel_traces)", b["duckdb"], spans))
    if "duckdb derived" in b:
        print(f"  DuckDB derived tables built (as a collector keeps them) in {result['derive_s']:.1f} s; store "
              f"{result['duckdb_derived_bytes'] / spans:.1f} B/span with them")
        print(line("full report, DuckDB on its derived tables", b["duckdb derived"], spans))
    else:
        print(f"  DuckDB derived tables: not built above {human(DERIVE_UP_TO)} spans (~2.6 GiB peak RSS per 10M "
              "spans to build: more than the machine's memory)")
    print(line(f"1-hour window, chDB ({result['window_spans']:,} spans)", b["chdb 1h"], result["window_spans"]))
    print(line(f"1-hour window, DuckDB ({result['window_spans']:,} spans)", b["duckdb 1h"], result["window_spans"]))
    print(line("empty window, chDB (its fixed cost per report)", b["chdb 0"], 0))
    for what, ch, duck in (("full", "chdb", "duckdb"), ("full, DuckDB derived", "chdb", "duckdb derived"),
                           ("1-hour window", "chdb 1h", "duckdb 1h")):
        if duck in b and "error" not in b[ch] and "error" not in b[duck]:
            print(f"  ratio chDB / DuckDB, {what}: {b[ch]['wall'] / b[duck]['wall']:.2f}x wall, "
                  f"{b[ch]['cpu'] / b[duck]['cpu']:.2f}x CPU")
    check_counts(result, base_counts)
    return result


def window_spans(chdb_path: Path, window: dict) -> int:
    from chdb import session

    chdb = session.Session(str(chdb_path))
    try:
        return int(chdb.query(f"select count() from otel_traces where toUnixTimestamp64Nano(Timestamp) >= "
                              f"{int(window['since_ns'])} and toUnixTimestamp64Nano(Timestamp) < "
                              f"{int(window['until_ns'])}", "CSV").bytes().decode().strip())
    finally:
        chdb.close()


def check_counts(result: dict, base_counts: dict[str, int]) -> None:
    """Episode counts equal between the engines, and in full equal to copies x the base's."""
    b = result["best"]
    keys = ("lending", "wake", "lending_censored", "wake_censored", "policy_rows")
    pairs = [("chdb", "duckdb"), ("chdb", "duckdb derived"), ("chdb 1h", "duckdb 1h")]
    for ch, duck in pairs:
        if duck not in b or "error" in b[ch] or "error" in b[duck]:
            continue
        if any(b[ch][k] != b[duck][k] for k in keys):
            raise RuntimeError(f"the engines disagree ({ch} vs {duck}): "
                               f"{ {k: b[ch][k] for k in keys} } vs { {k: b[duck][k] for k in keys} }")
    full = b["chdb"] if "error" not in b["chdb"] else b["duckdb"]
    if "error" not in full:
        expected = {k: result["copies"] * base_counts[k] for k in ("lending", "wake")}
        got = {k: full[k] for k in ("lending", "wake")}
        if got != expected:
            raise RuntimeError(f"episodes {got}, expected copies x base = {expected}")
        print(f"  episodes agree: {full['lending']:,} lending and {full['wake']:,} wake in full "
              f"(= {result['copies']:,} copies x the base's), ", end="")
    window = b["chdb 1h"] if "error" not in b["chdb 1h"] else b["duckdb 1h"]
    if "error" not in window:
        print(f"{window['lending']:,} lending ({window['lending_censored']:,} censored) and {window['wake']:,} wake "
              f"({window['wake_censored']:,} censored) in the window, on both engines")
    else:
        print()


def feasible(size: int, rounds: int, previous: dict | None, folder: Path, max_minutes: float) -> str | None:
    """Why ``size`` cannot run here (None: it can), from the size before it."""
    if previous is None:
        return None
    scale = size / previous["spans"]
    free = shutil.disk_usage(folder).free
    need = scale * (previous["chdb_bytes"] + previous.get("duckdb_derived_bytes", previous["duckdb_bytes"])) * 1.2
    if need > free:
        return (f"needs ~{need / 2**30:.0f} GiB on disk for both stores ({scale:g}x the {human(previous['spans'])} "
                f"stores), {free / 2**30:.0f} GiB free")
    b = previous["best"]
    per_round = sum(b[name]["wall"] for name in ("chdb", "duckdb", "chdb 1h", "duckdb 1h") if "error" not in b[name])
    minutes = (scale * (previous["build_chdb_s"] + previous["build_duckdb_s"] + previous["fingerprint_s"]
                        + per_round * rounds) + b["chdb 0"]["wall"] * rounds) / 60
    if minutes > max_minutes:
        return (f"estimated ~{minutes:.0f} min ({scale:.1f}x the {human(previous['spans'])} run's build and "
                f"measurements), over --max-minutes {max_minutes:g}")
    return None


def main(argv: list[str] | None = None) -> None:
    # run by `python -m benchmarks`, sys.argv holds the runner's arguments, not ours
    if argv is None:
        argv = sys.argv[1:] if Path(sys.argv[0]).stem == "bench_clickhouse" else []
    args = options(argv)
    if args.worker:
        result = worker(json.loads(args.worker))
        result["rss"] = peak_rss_bytes()
        print(json.dumps(result))
        return

    load = os.getloadavg()
    print(f"sizes {', '.join(human(s) for s in args.sizes)}; {os.cpu_count()} cores; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    parent = Path(args.folder) if args.folder else None
    if parent:
        parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-clickhouse-", dir=parent) as name:
        folder = Path(name)
        started = time.perf_counter()
        base = build_base(folder)
        print(f"base: {base[1]:,} spans of {len(_base_runs())} virtual runs, {base[2]['lending']:,} lending and "
              f"{base[2]['wake']:,} wake episodes, in {time.perf_counter() - started:.1f} s", flush=True)
        results: list[dict] = []
        for size in args.sizes:
            print(f"-- {human(size)} spans", flush=True)
            rounds = rounds_for(size, args.rounds)
            reason = feasible(size, rounds, results[-1] if results else None, folder, args.max_minutes)
            if reason:
                print(f"  SKIPPED: {reason}", flush=True)
                continue
            result = measure(size, base, folder, rounds)
            results.append(result)
            for path in folder.glob(f"*-{human(size)}*"):  # the next size needs the disk
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        growth(results)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


def _base_runs() -> tuple:
    from benchmarks.bench_dashboard import LENDING_RUNS, WAKE_RUNS

    return LENDING_RUNS + WAKE_RUNS


def growth(results: list[dict]) -> None:
    """Each larger size's time over the smallest's, per engine and measurement, beside the span ratio."""
    if len(results) < 2:
        return
    first = results[0]
    for later in results[1:]:
        scale = later["spans"] / first["spans"]
        parts = []
        for name in ("chdb", "duckdb", "chdb 1h", "duckdb 1h"):
            a, b = first["best"].get(name, {}), later["best"].get(name, {})
            if "wall" in a and "wall" in b:
                parts.append(f"{name} {b['wall'] / a['wall']:.1f}x")
        print(f"growth {human(first['spans'])} -> {human(later['spans'])} ({scale:.1f}x spans): " + ", ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
