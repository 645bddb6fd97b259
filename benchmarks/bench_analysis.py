"""Decompose generated episodes: DuckDB SQL (analysis/sql) beside its anchor, polars from the raw spans.

Default: 100k and 1M spans; ``--10m`` (or RESTORELENS_BENCH_10M=1) adds 10M (goal: <= 10 s on
2 cores, near-linear). Each unit of 16 spans is one lending episode (returning request + restore),
one wake episode (503 attempt, retry, engine, wake span) and two lifecycle state intervals.

Every side starts from the same store file (a generated ``otel_traces``, as ``restorelens report
--db`` reads it), each run on a fresh connection, best of the same number of runs (``--repeats``,
3 by default) for every side, the sides taking turns round by round. The work, every side alike:
every public view of the decomposition (requests, attempts, lending and wake episodes, lifecycle
intervals) and the policy summary, as polars DataFrames; their row counts and metric totals are
checked equal between the sides.

(a) The like-for-like comparison, both from the raw spans: SQL computing every layer from
``otel_traces`` (shared layers materialised once, the report's mode) against the anchor, polars
reading the columns it uses from the same file and computing the same decomposition. The ratio
is printed both against that whole and against polars' decomposition alone (spans already in
memory). The polars twin computes only the columns the compared metrics need (the SQL views have
more: 29 against 6 in lending_episodes); so SQL is also timed reading of each view only the
columns the twin computes too (``Analysis.view(name, columns)``, as the report reads them).

(b) The store as a collector keeps it: the typed and trace layers kept as tables
(``analysis/derived.py``). Their build (one transaction, as a writer's ``derived.ensure`` runs it,
plus a checkpoint) is timed on its own line, and the SQL reading them beside it, alone and build +
query against the anchor.

(c) Also timed: plain views on the derived tables (up to 1M spans), and the two episode views alone (what the
dashboard's overview reads).

Where the time goes: each side's best run, split by ``STAGES`` into the same parts on every side
(SQL: each layer ``Analysis`` materialises and each view it reads; polars: the same steps).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from collections.abc import Mapping
from pathlib import Path

import duckdb
import polars as pl
from opentelemetry.sdk.resources import SERVICE_NAME

from benchmarks.ratios import versus
from restorelens import spans as S
from restorelens.analysis import Analysis
from restorelens.analysis import derived
from restorelens.store import create_schema

SPANS_PER_UNIT = 16
#: Runs of every side at every size; the fastest of each side is printed.
REPEATS = 3
#: Largest store the plain-views reading is timed on.
PLAIN_VIEWS_UP_TO = 1_000_000
BASE_NS = 1_767_225_600 * 1_000_000_000

# Synthetic traces in the otel_traces layout. Offsets in nanoseconds within a unit; each unit is
# shifted by $unit_ns so episodes do not overlap. Ids are hex of the unit number. Span names,
# attribute keys and event names are bound as parameters named after their restorelens.spans
# constant ($span_client_request is SPAN_CLIENT_REQUEST), so a renamed span renames them here too.
GENERATE_SQL = """
insert into otel_traces
with units as (
    select
        range as u,
        $base_ns + range * $unit_ns as t,
        ['fcfs', 'priority', 'static', 'lend'][1 + range % 4] as policy,
        ['balanced', 'long-context'][1 + (range // 4) % 2] as workload,
        (range // 8) % 5 as seed,
        printf('%016x', range) as h
    from range($units)
),
spans as (
    -- lending: returning request trace (client, attempt, gate, upstream POST, engine) + restore
    select u, 'a' || h || h as tr, 'c1' || h as id, '' as par, $span_client_request as name, 'Internal' as kind,
           t as s, t + 10_000_000_000 as e,
           map([$attr_request_id, $attr_traffic_class, $attr_outcome, $attr_workload, $attr_seed,
                $attr_run_id, $attr_arrival_phase, $attr_arrival_phase_window_s, $attr_gen_ai_request_model],
               ['r' || h, 'interactive', 'ok', workload, seed::varchar, 'run', 'return', '25', 'tiny']) as attrs,
           [$event_response_first_chunk] as ev_names, [t + 4_900_000_000] as ev_ts,
           []::varchar[] as link_tr, []::varchar[] as link_id
    from units
    union all select u, 'a'||h||h, 'p1'||h, 'c1'||h, $span_http_post, 'Client', t, t + 10_000_000_000,
           map([$attr_http_status_code], ['200']), [], [], [], [] from units
    union all select u, 'a'||h||h, 'g1'||h, 'p1'||h, $span_gate_request, 'Server', t + 62_500_000, t + 9_900_000_000,
           map([$attr_request_id, $attr_gate_policy, $attr_gate_decision, $attr_gate_slot, $attr_http_status_code],
               ['r' || h, policy, 'admitted', 'own', '200']),
           [$event_grant_acquired], [t + 1_000_000_000], [], [] from units
    union all select u, 'a'||h||h, 'q1'||h, 'g1'||h, $span_http_post, 'Client', t + 1_000_000_000, t + 9_800_000_000,
           map([$attr_http_status_code], ['200']), [], [], [], [] from units
    union all select u, 'a'||h||h, 'e1'||h, 'q1'||h, $span_llm_request, 'Server', t + 1_125_000_000, t + 9_125_000_000,
           map([$attr_latency_time_in_queue, $attr_latency_time_to_first_token, $attr_latency_e2e,
                $attr_usage_prompt_tokens, $attr_usage_completion_tokens, $attr_gen_ai_request_id],
               [(3.5 + (u % 7) / 8)::varchar, '3.75', '8.0', '16', '32', 'x' || h]), [], [], [], [] from units
    union all select u, 'b'||h||h, 'rs'||h, '', $span_gate_restore, 'Internal', t + 62_500_000, t + 4_562_500_000,
           map([$attr_gate_policy, $attr_gate_borrowed_at_return], [policy, (u % 3)::varchar]),
           [$event_grant_restored, $event_borrowed_drained], [t + 1_062_500_000, t + 4_562_500_000],
           ['a'||h||h], ['g1'||h] from units
    -- wake: 503 attempt + retry served, in one client trace; the wake span links the first gate.request
    union all select u, 'c'||h||h, 'c2'||h, '', $span_client_request, 'Internal', t, t + 12_000_000_000,
           map([$attr_request_id, $attr_traffic_class, $attr_outcome, $attr_workload, $attr_seed,
                $attr_run_id, $attr_arrival_phase, $attr_arrival_phase_window_s, $attr_retry_policy,
                $attr_gen_ai_request_model],
               ['w' || h, 'batch', 'ok', workload, seed::varchar, 'run', 'borrow', '35', 'honour-retry-after',
                'tiny']),
           [$event_response_first_chunk], [t + 10_812_500_000], [], [] from units
    union all select u, 'c'||h||h, 'p2'||h, 'c2'||h, $span_http_post, 'Client', t, t + 125_000_000,
           map([$attr_http_status_code, $attr_http_retry_after, $attr_retry_after_s],
               ['503', '["10"]', '10']), [], [], [], [] from units
    union all select u, 'c'||h||h, 'g2'||h, 'p2'||h, $span_gate_request, 'Server', t + 31_250_000, t + 93_750_000,
           map([$attr_request_id, $attr_gate_policy, $attr_gate_decision, $attr_http_status_code, $attr_retry_after_s],
               ['w' || h, policy, 'not_ready', '503', '10']), [], [], [], [] from units
    union all select u, 'c'||h||h, 'p3'||h, 'c2'||h, $span_http_post, 'Client', t + 10_125_000_000, t + 12_000_000_000,
           map([$attr_http_status_code, $attr_http_resend_count], ['200', '1']), [], [], [], [] from units
    union all select u, 'c'||h||h, 'g3'||h, 'p3'||h, $span_gate_request, 'Server',
           t + 10_156_250_000, t + 11_900_000_000,
           map([$attr_request_id, $attr_gate_policy, $attr_gate_decision, $attr_gate_slot, $attr_http_status_code],
               ['w' || h, policy, 'admitted', 'borrowed', '200']), [], [], [], [] from units
    union all select u, 'c'||h||h, 'q3'||h, 'g3'||h, $span_http_post, 'Client', t + 10_187_500_000, t + 11_800_000_000,
           map([$attr_http_status_code], ['200']), [], [], [], [] from units
    union all select u, 'c'||h||h, 'e3'||h, 'q3'||h, $span_llm_request, 'Server',
           t + 10_250_000_000, t + 11_750_000_000,
           map([$attr_latency_time_in_queue, $attr_latency_time_to_first_token, $attr_latency_e2e,
                $attr_usage_prompt_tokens, $attr_usage_completion_tokens, $attr_gen_ai_request_id],
               ['0.125', '0.5', '1.5', '1600', '64', 'y' || h]), [], [], [], [] from units
    union all select u, 'd'||h||h, 'wk'||h, '', $span_modelclaim_wake, 'Internal', t + 62_500_000, t + 4_562_500_000,
           map([$attr_gen_ai_request_model, $attr_modelclaim_wake_path, $attr_modelclaim_pod],
               ['tiny', ['in-place','make-room','move','cold-start'][1 + u % 4], 'pod-a']),
           [$event_engine_wake_called, $event_engine_ready, $event_ready_observed],
           [t + 62_500_000, t + 4_062_500_000 + (u % 5) * 250_000_000, t + 4_562_500_000 + (u % 5) * 250_000_000],
           ['c'||h||h], ['g2'||h] from units
    union all select u, 'e'||h||h, 's1'||h, '', $span_modelclaim_state, 'Internal', t, t + 62_500_000,
           map([$attr_gen_ai_request_model, $attr_modelclaim_phase, $attr_modelclaim_reason, $attr_modelclaim_pod],
               ['m' || (u % 50), 'Sleeping', 'EngineSleeping', 'pod-a']), [], [], [], [] from units
    union all select u, 'e'||h||h, 's2'||h, '', $span_modelclaim_state, 'Internal', t + 62_500_000, t + 4_562_500_000,
           map([$attr_gen_ai_request_model, $attr_modelclaim_phase, $attr_modelclaim_reason, $attr_modelclaim_pod],
               ['m' || (u % 50), 'Activating', 'EngineWaking', 'pod-a']), [], [], [], [] from units
)
-- the readable ids above become real OTLP ids (32 and 16 lower-case hex digits), as stored
select
    make_timestamp_ns(s), md5(tr), left(md5(id), 16), if(par = '', '', left(md5(par), 16)), '', name, kind, 'svc',
    map([$resource_service_name], ['svc']), 'bench', '', attrs, (e - s)::ubigint, 'Unset', '',
    list_transform(ev_ts, lambda x: make_timestamp_ns(x)), ev_names,
    list_transform(ev_names, lambda x: map([]::varchar[], []::varchar[])),
    list_transform(link_tr, lambda x: md5(x)), list_transform(link_id, lambda x: left(md5(x), 16)),
    list_transform(link_id, lambda x: ''),
    list_transform(link_id, lambda x: map([]::varchar[], []::varchar[]))
from spans
"""

PUBLIC = ("requests", "attempts", "lending_episodes", "wake_episodes", "lifecycle_intervals")


#: Parameter name -> the span-contract name it stands for.
CONTRACT_NAMES = {
    name.lower(): value
    for name, value in {**S.span_names(), **S.attribute_keys(), **S.event_names()}.items()
} | {"resource_service_name": SERVICE_NAME}


def name_parameters(sql: str) -> dict[str, str]:
    """The contract names ``sql`` uses, by parameter name (DuckDB refuses parameters a query lacks)."""
    return {name: CONTRACT_NAMES[name] for name in re.findall(r"\$([a-z0-9_]+)", sql) if name in CONTRACT_NAMES}


def generate(con: duckdb.DuckDBPyConnection, spans: int) -> int:
    create_schema(con)
    units = max(1, spans // SPANS_PER_UNIT)
    parameters = {"units": units, "base_ns": BASE_NS, "unit_ns": 20_000_000_000, **name_parameters(GENERATE_SQL)}
    con.execute(GENERATE_SQL, parameters)
    return units * SPANS_PER_UNIT


class Laps:
    """Wall and CPU seconds (this process, all threads) between successive marks, summed by the
    name of the part that ended at each mark: the breakdown of one run, both sides alike."""

    def __init__(self) -> None:
        self.parts: dict[str, tuple[float, float]] = {}
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def mark(self, name: str) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        spent_wall, spent_cpu = self.parts.get(name, (0.0, 0.0))
        self.parts[name] = (spent_wall + wall - self._wall, spent_cpu + cpu - self._cpu)
        self._wall, self._cpu = wall, cpu


# --- the same decomposition in polars ------------------------------------------------------------


def _attr(key: str, dtype: type[pl.DataType] | pl.DataType | None = None) -> pl.Expr:
    value = pl.col("SpanAttributes").map.get(key)
    return value.cast(dtype, strict=False) if dtype is not None else value


def _event_ns(name: str) -> pl.Expr:
    position = pl.col("Events.Name").list.eval(pl.arg_where(pl.element() == name))
    return pl.col("Events.Timestamp").list.gather(position).list.first().cast(pl.Int64)


def _base(spans: pl.DataFrame, name: str, *extra: pl.Expr) -> pl.DataFrame:
    start = pl.col("Timestamp").cast(pl.Int64)
    return spans.filter(pl.col("SpanName") == name).select(
        pl.col("TraceId").alias("trace_id"),
        pl.col("SpanId").alias("span_id"),
        pl.col("ParentSpanId").alias("parent_span_id"),
        start.alias("start_ns"),
        (start + pl.col("Duration").cast(pl.Int64)).alias("end_ns"),
        *extra,
    )


def polars_decompose(spans: pl.DataFrame, slo_ttft_s: float = 5.0, slo_e2e_s: float = 30.0,
                     excluded_phases: tuple[str, ...] = (S.ARRIVAL_PHASE_WAKE,), laps: Laps | None = None
                     ) -> dict[str, pl.DataFrame]:
    """The layers of analysis/sql, written with polars expressions (same joins, same metrics).

    Eager on purpose: each step runs where it is written, so ``laps`` can time it (``STAGES``
    names the steps beside the SQL layers they stand for)."""
    laps = laps if laps is not None else Laps()
    clients = _base(
        spans, S.SPAN_CLIENT_REQUEST,
        _event_ns(S.EVENT_RESPONSE_FIRST_CHUNK).alias("first_chunk_ns"),
        _attr(S.ATTR_REQUEST_ID).alias("request_id"), _attr(S.ATTR_RUN_ID).alias("run_id"),
        _attr(S.ATTR_WORKLOAD).alias("workload"), _attr(S.ATTR_SEED, pl.Int64).alias("seed"),
        _attr(S.ATTR_TRAFFIC_CLASS).alias("traffic_class"), _attr(S.ATTR_OUTCOME).alias("outcome"),
        _attr(S.ATTR_ARRIVAL_PHASE).alias("arrival_phase"), _attr(S.ATTR_RETRY_POLICY).alias("retry_policy"),
        _attr(S.ATTR_ARRIVAL_PHASE_WINDOW_S, pl.Float64).alias("arrival_phase_window_s"),
    )
    raw_retry_after = _attr(S.ATTR_HTTP_RETRY_AFTER).str.json_path_match("$[0]")
    posts = _base(
        spans, S.SPAN_HTTP_POST,
        _attr(S.ATTR_HTTP_STATUS_CODE, pl.Int64).alias("status_code"),
        pl.coalesce(_attr(S.ATTR_RETRY_AFTER_S, pl.Float64), raw_retry_after.cast(pl.Float64, strict=False))
        .alias("retry_after_s"),
    )
    gates = _base(
        spans, S.SPAN_GATE_REQUEST,
        _event_ns(S.EVENT_UPSTREAM_FIRST_BYTE).alias("upstream_first_byte_ns"),
        _attr(S.ATTR_GATE_POLICY).alias("policy"), _attr(S.ATTR_GATE_DECISION).alias("decision"),
        _attr(S.ATTR_HTTP_STATUS_CODE, pl.Int64).alias("gate_status_code"),
        _attr(S.ATTR_RETRY_AFTER_S, pl.Float64).alias("gate_retry_after_s"),
        _attr(S.ATTR_REQUEST_ID).alias("gate_request_id"),
    )
    queue_s = _attr(S.ATTR_LATENCY_TIME_IN_QUEUE, pl.Float64)
    ttft_s = _attr(S.ATTR_LATENCY_TIME_TO_FIRST_TOKEN, pl.Float64)
    start = pl.col("Timestamp").cast(pl.Int64)
    engines = _base(
        spans.filter(pl.col("SpanName") == S.SPAN_LLM_REQUEST), S.SPAN_LLM_REQUEST,
        (start + (queue_s * 1e9).round().cast(pl.Int64)).alias("engine_scheduled_ns"),
        (start + (ttft_s * 1e9).round().cast(pl.Int64)).alias("engine_first_token_ns"),
    ).rename({"start_ns": "engine_arrival_ns", "span_id": "engine_span_id"})
    laps.mark("typed")

    upstream = posts.select("trace_id", "span_id", pl.col("parent_span_id").alias("gate_span_id"),
                            pl.col("start_ns").alias("upstream_start_ns"))
    engine_via_upstream = (
        engines.join(upstream, left_on=["trace_id", "parent_span_id"], right_on=["trace_id", "span_id"])
        .sort("engine_arrival_ns", descending=True)
        .unique(["trace_id", "gate_span_id"], keep="first")
        .drop("parent_span_id", "end_ns")
    )
    gate_requests = gates.join(engine_via_upstream, left_on=["trace_id", "span_id"],
                               right_on=["trace_id", "gate_span_id"], how="left")
    laps.mark("gate_requests")

    client_attempts = posts.join(
        clients.select("trace_id", pl.col("span_id").alias("client_span_id"), "request_id",
                       pl.col("first_chunk_ns").alias("client_first_chunk_ns")),
        left_on=["trace_id", "parent_span_id"], right_on=["trace_id", "client_span_id"], how="inner",
    ).with_columns(pl.col("parent_span_id").alias("client_span_id"))
    gate_cols = gate_requests.select(
        "trace_id", pl.col("parent_span_id").alias("attempt_span_id"), pl.col("span_id").alias("gate_span_id"),
        "policy", "decision", "gate_status_code", "gate_retry_after_s", "upstream_first_byte_ns",
        "engine_span_id", "engine_arrival_ns", "engine_scheduled_ns", "engine_first_token_ns",
    )
    direct = engines.select("trace_id", pl.col("parent_span_id").alias("attempt_span_id"),
                            pl.col("engine_span_id").alias("direct_span_id"),
                            pl.col("engine_scheduled_ns").alias("direct_scheduled_ns"),
                            pl.col("engine_first_token_ns").alias("direct_first_token_ns"))
    attempts = (
        client_attempts.join(gate_cols, left_on=["trace_id", "span_id"], right_on=["trace_id", "attempt_span_id"],
                             how="left")
        .join(direct, left_on=["trace_id", "span_id"], right_on=["trace_id", "attempt_span_id"], how="left")
        .with_columns(
            pl.coalesce("engine_span_id", "direct_span_id").alias("engine_span_id"),
            pl.coalesce("engine_scheduled_ns", "direct_scheduled_ns").alias("engine_scheduled_ns"),
            pl.coalesce("engine_first_token_ns", "direct_first_token_ns").alias("engine_first_token_ns"),
            pl.coalesce("retry_after_s", "gate_retry_after_s").alias("retry_after_s"),
        )
        .sort("trace_id", "client_span_id", "start_ns", "span_id")
        .with_columns(
            pl.int_range(1, pl.len() + 1).over("trace_id", "client_span_id").alias("attempt_index"),
            pl.len().over("trace_id", "client_span_id").alias("attempt_count"),
            pl.col("start_ns").shift(-1).over("trace_id", "client_span_id").alias("next_start_ns"),
        )
        .with_columns(
            ((pl.col("next_start_ns") - pl.col("end_ns")) / 1e9).alias("wait_before_next_s"),
            ((pl.col("engine_scheduled_ns") - pl.col("start_ns")) / 1e9).alias("engine_schedule_s"),
        )
    )
    laps.mark("attempts")

    last = attempts.filter(pl.col("attempt_index") == pl.col("attempt_count"))
    requests = clients.join(
        last.select("trace_id", "client_span_id", "policy", "decision", "engine_first_token_ns",
                    pl.col("attempt_count").alias("attempts")),
        left_on=["trace_id", "span_id"], right_on=["trace_id", "client_span_id"], how="left",
    ).with_columns(
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e9).alias("e2e_s"),
        ((pl.coalesce("first_chunk_ns", "engine_first_token_ns") - pl.col("start_ns")) / 1e9).alias("ttft_s"),
    )
    laps.mark("requests")

    restores = _base(
        spans, S.SPAN_GATE_RESTORE,
        _event_ns(S.EVENT_GRANT_RESTORED).alias("grant_restored_ns"),
        _event_ns(S.EVENT_BORROWED_DRAINED).alias("drained_ns"),
        _attr(S.ATTR_GATE_BORROWED_AT_RETURN, pl.Int64).alias("borrowed_at_return"),
        _attr(S.ATTR_GATE_POLICY).alias("policy"),
        pl.col("Links.TraceId").list.first().alias("returning_trace_id"),
        pl.col("Links.SpanId").list.first().alias("returning_span_id"),
    )
    lending = restores.join(
        gate_requests.select("trace_id", pl.col("span_id").alias("gate_span_id"), "engine_scheduled_ns",
                             pl.coalesce("engine_first_token_ns", "upstream_first_byte_ns").alias("first_token_ns")),
        left_on=["returning_trace_id", "returning_span_id"], right_on=["trace_id", "gate_span_id"], how="left",
    ).select(
        "policy", "borrowed_at_return",
        ((pl.col("grant_restored_ns") - pl.col("start_ns")) / 1e9).alias("grant_restore_s"),
        pl.when(pl.col("drained_ns").is_not_null()).then((pl.col("drained_ns") - pl.col("start_ns")) / 1e9)
        .when(pl.col("borrowed_at_return") == 0).then(0.0).alias("drain_s"),
        ((pl.col("engine_scheduled_ns") - pl.col("grant_restored_ns")) / 1e9).alias("engine_schedule_s"),
        ((pl.col("first_token_ns") - pl.col("start_ns")) / 1e9).alias("ttft_s"),
    )
    laps.mark("lending_episodes")

    wakes = _base(
        spans, S.SPAN_MODELCLAIM_WAKE,
        _event_ns(S.EVENT_ENGINE_READY).alias("ready_ns"), _event_ns(S.EVENT_READY_OBSERVED).alias("observed_ns"),
        _attr(S.ATTR_MODELCLAIM_WAKE_PATH).alias("wake_path"),
        pl.col("Links.TraceId").list.first().alias("trigger_trace_id"),
        pl.col("Links.SpanId").list.first().alias("trigger_span_id"),
    )
    trigger = attempts.select(
        "trace_id", "client_span_id", "gate_span_id", pl.col("attempt_index").alias("trigger_index"),
        "attempt_count", pl.col("start_ns").alias("t0_ns"), pl.col("status_code").alias("first_status"),
        "retry_after_s",
    )
    triggered = wakes.join(trigger, left_on=["trigger_trace_id", "trigger_span_id"],
                           right_on=["trace_id", "gate_span_id"], how="left")
    successes = (
        triggered.select(pl.col("span_id").alias("wake_span_id"), "trigger_trace_id", "client_span_id",
                         "trigger_index")
        .join(attempts.filter(pl.col("status_code").is_between(200, 299)),
              left_on=["trigger_trace_id", "client_span_id"], right_on=["trace_id", "client_span_id"])
        .filter(pl.col("attempt_index") >= pl.col("trigger_index"))
        .sort("attempt_index")
        .unique("wake_span_id", keep="first")
        .select("wake_span_id", pl.col("attempt_index").alias("success_index"),
                pl.col("start_ns").alias("success_start_ns"), "engine_scheduled_ns",
                pl.coalesce("engine_first_token_ns", "upstream_first_byte_ns", "client_first_chunk_ns")
                .alias("first_token_ns"))
    )
    ready_s = (pl.col("ready_ns") - pl.col("t0_ns")) / 1e9
    wake = triggered.join(successes, left_on="span_id", right_on="wake_span_id", how="left").select(
        "wake_path", "first_status", "retry_after_s",
        ready_s.alias("ready_s"),
        ((pl.col("observed_ns") - pl.col("t0_ns")) / 1e9).alias("observed_s"),
        (pl.col("retry_after_s") - ready_s).alias("hint_error_s"),
        ((pl.col("success_start_ns") - pl.col("ready_ns")) / 1e9).alias("overshoot_s"),
        (pl.coalesce("success_index", "attempt_count") - pl.col("trigger_index") + 1).alias("attempts"),
        ((pl.col("engine_scheduled_ns") - pl.col("success_start_ns")) / 1e9).alias("engine_schedule_s"),
        ((pl.col("first_token_ns") - pl.col("t0_ns")) / 1e9).alias("total_s"),
    )
    laps.mark("wake_episodes")

    states = _base(spans, S.SPAN_MODELCLAIM_STATE, _attr(S.ATTR_GEN_AI_REQUEST_MODEL).alias("model"),
                   _attr(S.ATTR_MODELCLAIM_PHASE).alias("phase"))
    lifecycle = states.sort("model", "start_ns", "end_ns").with_columns(
        ((pl.col("end_ns") - pl.col("start_ns")) / 1e9).alias("duration_s"),
        pl.int_range(1, pl.len() + 1).over("model").alias("interval_index"),
    )
    laps.mark("lifecycle_intervals")

    scored = requests.filter(~pl.col("arrival_phase").is_in(excluded_phases).fill_null(False)).with_columns(
        pl.col("policy").fill_null("none"),
        ((pl.col("outcome") == "ok") & (pl.col("ttft_s") <= slo_ttft_s) & (pl.col("e2e_s") <= slo_e2e_s))
        .fill_null(False).alias("meets_slo"),
    )
    contention = pl.col("arrival_phase") == S.ARRIVAL_PHASE_RETURN
    borrow = pl.col("arrival_phase") == S.ARRIVAL_PHASE_BORROW
    runs = scored.group_by("policy", "workload", "seed", "run_id").agg(
        pl.col("arrival_phase_window_s").filter(contention).max().alias("contention_window_s"),
        pl.col("arrival_phase_window_s").filter(borrow).max().alias("borrow_window_s"),
        ((pl.col("traffic_class") == "interactive") & contention & pl.col("meets_slo")).sum()
        .alias("interactive_slo_met"),
        ((pl.col("traffic_class") == "batch") & borrow & (pl.col("outcome") == "ok")).sum()
        .alias("batch_borrow_completed"),
    )
    summary = runs.group_by("policy", "workload", "seed").agg(
        (pl.col("interactive_slo_met").sum() / pl.col("contention_window_s").sum())
        .alias("interactive_slo_goodput_rps"),
        (pl.col("batch_borrow_completed").sum() / pl.col("borrow_window_s").sum()).alias("batch_borrow_goodput_rps"),
    )
    laps.mark("policy_summary")
    return {"requests": requests, "attempts": attempts, "lending_episodes": lending, "wake_episodes": wake,
            "lifecycle_intervals": lifecycle, "policy_summary": summary}


# --- the measurement ----------------------------------------------------------------------------

#: Metrics whose totals must agree between the SQL and polars decompositions.
COMPARED = {
    "requests": ("e2e_s", "ttft_s"),
    "attempts": ("wait_before_next_s", "engine_schedule_s"),
    "lending_episodes": ("grant_restore_s", "drain_s", "engine_schedule_s", "ttft_s"),
    "wake_episodes": ("ready_s", "observed_s", "hint_error_s", "overshoot_s", "attempts", "engine_schedule_s",
                      "total_s"),
    "lifecycle_intervals": ("duration_s",),
    "policy_summary": ("interactive_slo_goodput_rps", "batch_borrow_goodput_rps"),
}

#: The otel_traces columns the polars twin reads (the SQL, too, reads only the columns it uses).
POLARS_COLUMNS = ("Timestamp", "TraceId", "SpanId", "ParentSpanId", "SpanName", "SpanAttributes", "Duration",
                  "Events.Timestamp", "Events.Name", "Links.TraceId", "Links.SpanId")

#: Where each run's time goes: a row of the breakdown -> the SQL parts it sums (a layer made into a
#: temporary table by ``Analysis``, or ``read VIEW``: computing a view and converting it to
#: polars) and the polars steps (``Laps`` marks in ``polars_decompose``) that do the same work.
#: SQL parts named nowhere (macros, label map, engine metrics, empty views) fall into SETUP.
SETUP = "set up / read the spans"
STAGES = {
    SETUP: ((), ("read",)),
    "typed layers (client, HTTP, engine spans)": (
        ("typed_client_requests", "typed_http_attempts", "typed_engine_requests"), ("typed",)),
    "gate_requests (with typed gate spans)": (("gate_requests",), ("gate_requests",)),
    "request_attempts + attempts": (("request_attempts", "read attempts"), ("attempts",)),
    "span_labels + requests": (("span_labels", "requests", "read requests"), ("requests",)),
    "lending_episodes": (("read lending_episodes",), ("lending_episodes",)),
    "wake_episodes": (("read wake_episodes",), ("wake_episodes",)),
    "lifecycle_intervals": (("read lifecycle_intervals",), ("lifecycle_intervals",)),
    "policy_summary": (("policy_summary",), ("policy_summary",)),
}

_CREATED = re.compile(r"\s*create\s+(?:or\s+replace\s+)?temp(?:orary)?\s+(?:table|view)\s+(\w+)", re.IGNORECASE)


class _LayerTimer:
    """Stands in for the DuckDB connection ``Analysis`` is given and marks every layer it creates,
    so that the breakdown times the real Analysis code rather than a copy of its steps."""

    def __init__(self, con: duckdb.DuckDBPyConnection, laps: Laps) -> None:
        self._con = con
        self._laps = laps

    def execute(self, query: str, *args: object, **kwargs: object) -> duckdb.DuckDBPyConnection:
        created = _CREATED.match(query)
        if created is None:
            return self._con.execute(query, *args, **kwargs)
        self._laps.mark(SETUP)
        result = self._con.execute(query, *args, **kwargs)
        self._laps.mark(created.group(1))
        return result

    def __getattr__(self, name: str) -> object:
        return getattr(self._con, name)


def sql_decompose(con: duckdb.DuckDBPyConnection, *, materialize: bool, use_derived: bool = True,
                  laps: Laps | None = None, columns: Mapping[str, list[str]] | None = None
                  ) -> dict[str, pl.DataFrame]:
    """Every public view and the policy summary; ``columns`` reads only those of a view (as the
    report reads only what its statistics use)."""
    laps = laps if laps is not None else Laps()
    analysis = Analysis(_LayerTimer(con, laps), materialize=materialize, use_derived=use_derived)  # type: ignore[arg-type]
    laps.mark(SETUP)
    frames = {}
    for name in PUBLIC:
        frames[name] = analysis.view(name, None if columns is None else columns[name])
        laps.mark(f"read {name}")
    frames["policy_summary"] = analysis.policy_summary()
    laps.mark("policy_summary")
    return frames


def sql_episodes(con: duckdb.DuckDBPyConnection) -> dict[str, pl.DataFrame]:
    """What the dashboard's overview reads: both episode views, as plain views, nothing else."""
    analysis = Analysis(con)
    return {"lending_episodes": analysis.lending_episodes(), "wake_episodes": analysis.wake_episodes()}


#: What the agreement check compares of one side's frames: per view, its rows, its columns and
#: the totals of its COMPARED metrics (kept instead of the frames: at 10M spans each side's frames
#: are gigabytes).
Totals = dict[str, tuple[int, list[str], dict[str, float]]]


def totals(frames: dict[str, pl.DataFrame]) -> Totals:
    return {view: (frames[view].height, frames[view].columns, {metric: frames[view][metric].sum() for metric in metrics})
            for view, metrics in COMPARED.items()}


def _agree(sql: Totals, polars: Totals) -> list[str]:
    """Where two sides' decompositions differ: a view's row count or a metric's total."""
    problems = []
    for view in COMPARED:
        (sql_rows, _, sql_sums), (polars_rows, _, polars_sums) = sql[view], polars[view]
        if sql_rows != polars_rows:
            problems.append(f"{view}: {sql_rows} rows in SQL, {polars_rows} in polars")
        for metric, left in sql_sums.items():
            right = polars_sums[metric]
            if abs(left - right) > 1e-6 * max(1.0, abs(left)):
                problems.append(f"{view}.{metric}: SQL total {left} != polars total {right}")
    return problems


# Each side below is one run from the store file: a fresh connection (as each `restorelens report`
# opens one), closed before the next side starts. Each returns (frames or None, Laps).

def sql_from_file(db: Path, *, use_derived: bool, materialize: bool = True,
                  columns: Mapping[str, list[str]] | None = None) -> tuple[dict[str, pl.DataFrame], Laps]:
    laps = Laps()
    with duckdb.connect(str(db), read_only=True) as con:
        frames = sql_decompose(con, materialize=materialize, use_derived=use_derived, laps=laps, columns=columns)
    return frames, laps


def common_columns(sql: Totals, polars: Totals) -> dict[str, list[str]]:
    """Per public view, the SQL view's columns the polars twin computes too (by name)."""
    return {name: [column for column in sql[name][1] if column in polars[name][1]] for name in PUBLIC}


def episodes_from_file(db: Path) -> tuple[dict[str, pl.DataFrame], Laps]:
    laps = Laps()
    with duckdb.connect(str(db), read_only=True) as con:
        frames = sql_episodes(con)
    laps.mark("episodes")
    return frames, laps


def polars_from_file(db: Path) -> tuple[dict[str, pl.DataFrame], Laps]:
    """The anchor: the spans polars needs read from the same store file (the only copy of the raw
    spans a user has), then the same decomposition in polars."""
    laps = Laps()
    columns = ", ".join(f'"{column}"' for column in POLARS_COLUMNS)
    with duckdb.connect(str(db), read_only=True) as con:
        spans = con.sql(f"select {columns} from otel_traces").pl()
    laps.mark("read")
    return polars_decompose(spans, laps=laps), laps


def build_derived(db: Path) -> tuple[None, Laps]:
    """The derived tables built from every stored span, as a writer's ``derived.ensure`` does on
    open (one transaction), then checkpointed: what a store pays for them at load."""
    laps = Laps()
    with duckdb.connect(str(db)) as writer:
        writer.begin()
        derived.rebuild(writer)
        writer.commit()
        writer.execute("checkpoint")
    laps.mark("build")
    return None, laps


#: The sides of one size, each run once per round in this order: name -> (what it runs, its line's
#: label, what that line includes; the legend is printed once at the start).
SIDES = {
    "build": (lambda db, _: build_derived(db), "derived tables, build:",
              "the 9 typed and trace layers built from otel_traces in one transaction + checkpoint, as a "
              "writer's derived.ensure does (a real store pays this while loading)"),
    "sql_raw": (lambda db, _: sql_from_file(db, use_derived=False), "SQL from raw spans:",
                "every layer computed from otel_traces (the derived tables ignored), the shared layers "
                "materialised once; the 5 public views (every column) and the policy summary read into polars"),
    "polars": (lambda db, _: polars_from_file(db), "anchor, polars from raw spans:",
               f"the {len(POLARS_COLUMNS)} otel_traces columns it uses read from the same store file into polars, "
               "then the same decomposition (same views, same metrics; fewer columns, listed below)"),
    "sql_raw_narrow": (lambda db, columns: sql_from_file(db, use_derived=False, columns=columns),
                       "SQL from raw spans, polars' columns:",
                       "as 'SQL from raw spans', reading of each view only the columns the polars twin computes "
                       "too (the shared layers still whole)"),
    "sql_derived": (lambda db, _: sql_from_file(db, use_derived=True), "SQL on the derived tables:",
                    "the 9 kept layers read from the store's tables, the rest computed (shared ones "
                    "materialised once); the same views and summary read into polars; build not included"),
    "sql_views": (lambda db, _: sql_from_file(db, use_derived=True, materialize=False), "SQL, plain views:",
                  "as the line above, with nothing materialised (each view computes what it reads)"),
    "episodes": (lambda db, _: episodes_from_file(db), "SQL, the two episode views alone:",
                 "the lending and wake episode views on the derived tables, as plain views (what the "
                 "dashboard's overview reads)"),
}


def legend() -> list[str]:
    """What each printed line includes (every run: a fresh connection to the store file; the
    time from opening it to the last DataFrame)."""
    return [f"  {label:<38s} {includes}" for _, label, includes in SIDES.values()]


@dataclass
class Measured:
    """One side's best run of a size (the fastest by wall: a shared machine only ever adds time)."""

    wall_s: float
    cpu_s: float
    laps: Laps
    runs: int

    @classmethod
    def best(cls, runs: list[tuple[float, float, Laps]]) -> Measured:
        wall_s, cpu_s, laps = min(runs, key=lambda run: run[0])
        return cls(wall_s, cpu_s, laps, len(runs))

    def part(self, *names: str) -> tuple[float, float]:
        found = [self.laps.parts.get(name, (0.0, 0.0)) for name in names]
        return sum(wall for wall, _ in found), sum(cpu for _, cpu in found)


def _sql_stages(measured: Measured) -> dict[str, tuple[float, float]]:
    """The SQL side's parts summed into ``STAGES`` rows, whatever no row names counted as SETUP."""
    rows = {stage: measured.part(*sql_parts) for stage, (sql_parts, _) in STAGES.items()}
    named = {part for sql_parts, _ in STAGES.values() for part in sql_parts}
    rest = [name for name in measured.laps.parts if name not in named]
    rows[SETUP] = measured.part(*rest)
    return rows


def _polars_stages(measured: Measured) -> dict[str, tuple[float, float]]:
    return {stage: measured.part(*polars_parts) for stage, (_, polars_parts) in STAGES.items()}


def measure(db: Path, repeats: int, skip: tuple[str, ...] = ()) -> tuple[dict[str, Measured], dict[str, list[str]],
                                                                         list[str]]:
    """Every side ``repeats`` times, round by round (so a busy spell of the shared machine slows
    every side alike): the best run of each, the columns SQL and polars both compute per view,
    and the disagreements of every SQL side with polars."""
    runs: dict[str, list[tuple[float, float, Laps]]] = {name: [] for name in SIDES if name not in skip}
    kept: dict[str, Totals] = {}
    common: dict[str, list[str]] = {}
    for _ in range(repeats):
        for name, (side, _, _) in SIDES.items():
            if name in skip:
                continue
            if name == "sql_raw_narrow" and not common:  # the first round's two wide sides ran already
                common = common_columns(kept["sql_raw"], kept["polars"])
            started, cpu_started = time.perf_counter(), time.process_time()
            result, laps = side(db, common)
            runs[name].append((time.perf_counter() - started, time.process_time() - cpu_started, laps))
            if name in ("sql_raw", "sql_raw_narrow", "sql_derived", "polars") and name not in kept:
                kept[name] = totals(result)
            del result
    problems = [f"{SIDES[name][1]} vs polars: {problem}" for name in ("sql_raw", "sql_raw_narrow", "sql_derived")
                for problem in _agree(kept[name], kept["polars"])]
    widths = {name: (len(kept["sql_raw"][name][1]), len(kept["polars"][name][1])) for name in COMPARED}
    return {name: Measured.best(side_runs) for name, side_runs in runs.items()}, widths, problems


def _line(side: str, measured: Measured, extra: str = "") -> str:
    label = SIDES[side][1]
    return f"    {label:<38s} {measured.wall_s:7.2f} s wall, {measured.cpu_s:7.2f} s CPU{extra}"


def run(spans: int, folder: Path, repeats: int) -> dict[str, float]:
    # A store file, as users have it (`restorelens report --db`), read through read-only connections
    db = folder / f"bench-{spans}.duckdb"
    with duckdb.connect(str(db)) as writer:
        spans, generate_s, _ = _timed(generate, writer, spans)
        writer.execute("checkpoint")
    # plain views compute the shared layers again for every view that reads them: minutes at 10M
    skip = ("sql_views",) if spans > PLAIN_VIEWS_UP_TO else ()
    best, widths, problems = measure(db, repeats, skip)
    build, raw, anchor, on_derived = best["build"], best["sql_raw"], best["polars"], best["sql_derived"]
    narrow = best["sql_raw_narrow"]
    read_s, _ = anchor.part("read")
    compute_s = anchor.wall_s - read_s
    build_and_query_s = build.wall_s + on_derived.wall_s
    build_and_query_cpu_s = build.cpu_s + on_derived.cpu_s
    lines = [
        f"{spans:>10,} spans (generated in {generate_s:.1f} s); every line: best of {repeats} runs, the sides "
        "alternating, each run on a fresh connection to the store file",
        "  (a) from the raw spans, both sides",
        _line("sql_raw", raw, f"  ({spans / raw.wall_s / 1e6:.2f} M spans/s wall)"),
        _line("polars", anchor,
              f"  (read the spans {read_s:.2f} s + decompose {compute_s:.2f} s)"),
        f"    restorelens vs anchor: {versus(anchor.wall_s, raw.wall_s)} wall, "
        f"{versus(anchor.cpu_s, raw.cpu_s, better='less', worse='more')} CPU (SQL from raw spans vs polars from raw "
        f"spans); vs polars' decomposition alone, spans already in memory: {versus(compute_s, raw.wall_s)} wall",
        "    columns computed, SQL / polars: " + ", ".join(f"{name} {sql}/{twin}" for name, (sql, twin) in widths.items()),
        _line("sql_raw_narrow", narrow, f"  (vs anchor: {versus(anchor.wall_s, narrow.wall_s)} wall, "
                                        f"{versus(anchor.cpu_s, narrow.cpu_s, better='less', worse='more')} CPU)"),
        "  (b) on the derived tables a collector keeps, their build beside",
        _line("build", build),
        _line("sql_derived", on_derived,
              f"  ({spans / on_derived.wall_s / 1e6:.2f} M spans/s wall; goal at 10M: <= 10 s)"),
        f"    on derived tables vs anchor: {versus(anchor.wall_s, on_derived.wall_s)} wall, "
        f"{versus(anchor.cpu_s, on_derived.cpu_s, better='less', worse='more')} CPU (query alone); build + query "
        f"{build_and_query_s:.2f} s wall, {build_and_query_cpu_s:.2f} s CPU vs anchor {anchor.wall_s:.2f} s: "
        f"{versus(anchor.wall_s, build_and_query_s)} wall, "
        f"{versus(anchor.cpu_s, build_and_query_cpu_s, better='less', worse='more')} CPU",
        "  (c) other readings, on the derived tables",
        *([_line("sql_views", best["sql_views"])] if "sql_views" in best else []),
        _line("episodes", best["episodes"]),
        f"  results: every SQL side above and polars "
        f"{'agree' if not problems else 'DISAGREE'} (rows of every view, totals of "
        f"{sum(map(len, COMPARED.values()))} metrics)",
    ]
    lines += [f"    DISAGREE {problem}" for problem in problems]
    lines += _breakdown({"SQL from raw": raw, "raw, polars' cols": narrow, "SQL on derived": on_derived,
                         "polars": anchor})
    print("\n".join(lines), flush=True)
    db.unlink()
    db.with_suffix(".duckdb.wal").unlink(missing_ok=True)
    return {"spans": spans, "raw_cpu_s": raw.cpu_s, "derived_cpu_s": on_derived.cpu_s, "polars_cpu_s": anchor.cpu_s}


def _breakdown(sides: dict[str, Measured]) -> list[str]:
    """Where each side's best run went, row by row of ``STAGES`` (wall s / CPU s); the last side
    is polars, and the last column compares the first side with it."""
    *sql_sides, anchor = sides.values()
    stages = [*(_sql_stages(side) for side in sql_sides), _polars_stages(anchor)]
    header = f"    {'wall s / CPU s':<44s}" + "".join(f" {name:>17s}" for name in sides) + f" {'raw/polars':>10s}"
    lines = ["  where the time goes (the best run of each side):", header]
    for stage in STAGES:
        cells = "".join(f" {f'{side[stage][0]:6.2f} / {side[stage][1]:5.2f}':>17s}" for side in stages)
        ratio = stages[0][stage][0] / stages[-1][stage][0] if stages[-1][stage][0] > 0 else float("nan")
        lines.append(f"    {stage:<44s}{cells} {ratio:9.2f}x")
    totals = "".join(f" {f'{side.wall_s:6.2f} / {side.cpu_s:5.2f}':>17s}" for side in sides.values())
    lines.append(f"    {'total':<44s}{totals} {sql_sides[0].wall_s / anchor.wall_s:9.2f}x")
    return lines


def _timed(function, *args, **kwargs):  # type: ignore[no-untyped-def]
    """(result, wall seconds, CPU seconds of this process over all its threads)."""
    started, cpu_started = time.perf_counter(), time.process_time()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - started, time.process_time() - cpu_started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--10m", dest="ten_million", action="store_true",
                        help="add 10M spans (~10 GiB and ~5 minutes; also RESTORELENS_BENCH_10M=1)")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs of every side at every size (best kept)")
    args = parser.parse_args(sys.argv[1:] if argv is None and __name__ == "__main__" else argv or [])
    sizes = [100_000, 1_000_000]
    if args.ten_million or os.environ.get("RESTORELENS_BENCH_10M") == "1":
        sizes.append(10_000_000)
    print("analysis decomposition: DuckDB SQL (analysis/sql) vs the anchor, the same decomposition in polars from "
          "the raw spans; goal <= 10 s for 10M spans on 2 cores (CPU seconds / 2 estimates that on a shared "
          f"machine); load average {_load()}\nwhat each line includes:\n" + "\n".join(legend()), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as folder:
        results = [run(size, Path(folder), args.repeats) for size in sizes]
    first = results[0]
    for result in results[1:]:
        scale = result["spans"] / first["spans"]
        growth = ", ".join(f"{label} {(result[key] / first[key]) / scale:.2f}x" for label, key in
                           (("SQL from raw", "raw_cpu_s"), ("SQL on derived", "derived_cpu_s"),
                            ("polars", "polars_cpu_s")))
        print(f"CPU time per span at {result['spans']:,} vs {first['spans']:,} (1.00 = linear): {growth}")
    print(f"load average at the end: {_load()}")


def _load() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg()) + f" (1/5/15 min) on {os.cpu_count()} cores"


if __name__ == "__main__":
    main()
