"""Hand-built span stores with known timings for the analysis tests.

Spans are written as rows of ``otel_traces`` (the ClickHouse-exporter layout) through a pyarrow
table, the way the collector stores them: attribute values as strings, ``string[]`` as a JSON
list, times as nanoseconds. Offsets are seconds from ``BASE_S`` and are turned into integer
nanoseconds *before* adding the base, so every expected duration is exact.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from restorelens import spans as sc
from restorelens.clock import DEFAULT_VIRTUAL_EPOCH_S
from restorelens.otlp_json import encode_value
from restorelens.store import COLUMNS, TABLE, create_schema

BASE_S = int(DEFAULT_VIRTUAL_EPOCH_S)
BASE_NS = BASE_S * 1_000_000_000
VLLM_SERVICE = "unknown_service:python"


def ns(offset_s: float) -> int:
    """Offset in seconds from BASE_S -> absolute nanoseconds, exact to the nanosecond."""
    return BASE_NS + round(offset_s * 1e9)


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return json.dumps([str(item) for item in value])
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _attributes(values: dict[str, Any]) -> list[tuple[str, str]]:
    return [(key, _text(value)) for key, value in values.items() if value is not None]


_OTLP_KINDS = {"Internal": 1, "Server": 2, "Client": 3}


def _otlp_attributes(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": key, "value": encode_value(value)} for key, value in values.items() if value is not None]


@dataclass
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    service: str
    start_s: float
    end_s: float
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, float, dict[str, Any]]] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)
    #: Resource attributes besides service.name.
    resource: dict[str, Any] = field(default_factory=dict)


class Traces:
    """Collects spans; ``store()`` writes them into a fresh or given DuckDB connection."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.samples: list[tuple[str, str, float, dict[str, float]]] = []

    @staticmethod
    def new_trace() -> str:
        return secrets.token_hex(16)

    def span(
        self,
        trace_id: str,
        name: str,
        start_s: float,
        end_s: float,
        *,
        parent: str = "",
        kind: str = "Internal",
        service: str = "restorelens-test",
        attributes: dict[str, Any] | None = None,
        events: list[tuple[str, float, dict[str, Any]]] | None = None,
        links: list[tuple[str, str]] | None = None,
        resource: dict[str, Any] | None = None,
    ) -> str:
        span_id = secrets.token_hex(8)
        self.spans.append(
            Span(trace_id, span_id, parent, name, kind, service, start_s, end_s,
                 attributes or {}, events or [], links or [], resource or {})
        )
        return span_id

    # --- the project's spans -------------------------------------------------------------------

    def client_request(self, trace_id: str, start_s: float, end_s: float, *, first_chunk_s: float | None = None,
                       **attributes: Any) -> str:
        values = {
            sc.ATTR_REQUEST_ID: attributes.pop("request_id", secrets.token_hex(4)),
            sc.ATTR_TRAFFIC_CLASS: attributes.pop("traffic_class", "interactive"),
            sc.ATTR_GEN_AI_REQUEST_MODEL: attributes.pop("model", "tiny"),
            sc.ATTR_OUTCOME: attributes.pop("outcome", "ok"),
            sc.ATTR_RETRY_POLICY: attributes.pop("retry_policy", "honour-retry-after"),
            sc.ATTR_WORKLOAD: attributes.pop("workload", "balanced"),
            sc.ATTR_SEED: attributes.pop("seed", 1),
            sc.ATTR_RUN_ID: attributes.pop("run_id", "run-1"),
            sc.ATTR_SCENARIO: attributes.pop("scenario", "test"),
            sc.ATTR_ARRIVAL_PHASE: attributes.pop("arrival_phase", None),
            sc.ATTR_ARRIVAL_PHASE_START_S: attributes.pop("arrival_phase_start_s", None),
            sc.ATTR_ARRIVAL_PHASE_WINDOW_S: attributes.pop("arrival_phase_window_s", None),
            sc.ATTR_POLICY: attributes.pop("policy", None),
            sc.ATTR_ATTEMPTS: attributes.pop("attempts", None),
        }
        assert not attributes, f"unknown client attributes {attributes}"
        events = [(sc.EVENT_RESPONSE_FIRST_CHUNK, first_chunk_s, {})] if first_chunk_s is not None else []
        return self.span(trace_id, sc.SPAN_CLIENT_REQUEST, start_s, end_s, service="loadgen",
                         attributes=values, events=events)

    def attempt(self, trace_id: str, parent: str, start_s: float, end_s: float, *, status: int | None,
                retry_after_header: str | None = None, retry_after_s: float | None = None,
                resend_count: int | None = None, service: str = "loadgen",
                resource: dict[str, Any] | None = None) -> str:
        values = {
            sc.ATTR_HTTP_STATUS_CODE: status,
            sc.ATTR_HTTP_RESEND_COUNT: resend_count,
            sc.ATTR_HTTP_RETRY_AFTER: [retry_after_header] if retry_after_header is not None else None,
            sc.ATTR_RETRY_AFTER_S: retry_after_s,
        }
        return self.span(trace_id, sc.SPAN_HTTP_POST, start_s, end_s, parent=parent, kind="Client",
                         service=service, attributes=values, resource=resource)

    def gate_request(self, trace_id: str, parent: str, start_s: float, end_s: float, *, status: int,
                     policy: str = "lend", decision: str = "admitted", slot: str | None = "own",
                     request_id: str | None = None, grant_s: float | None = None,
                     first_byte_s: float | None = None, retry_after_s: float | None = None,
                     wait_s: float | None = None, phase: str | None = None, reason: str | None = None,
                     model: str | None = "tiny", extra: dict[str, Any] | None = None,
                     hold_released_s: float | None = None) -> str:
        values = {
            **(extra or {}),
            sc.ATTR_REQUEST_ID: request_id,
            sc.ATTR_GEN_AI_REQUEST_MODEL: model,
            sc.ATTR_GATE_POLICY: policy,
            sc.ATTR_GATE_DECISION: decision,
            sc.ATTR_GATE_SLOT: slot if decision == "admitted" else None,
            sc.ATTR_GATE_WAIT_S: wait_s,
            sc.ATTR_HTTP_STATUS_CODE: status,
            sc.ATTR_RETRY_AFTER_S: retry_after_s,
            sc.ATTR_HTTP_RETRY_AFTER: [_text(int(retry_after_s))] if retry_after_s is not None else None,
            sc.ATTR_MODELCLAIM_PHASE: phase,
            sc.ATTR_MODELCLAIM_REASON: reason,
        }
        events = []
        if grant_s is not None:
            events.append((sc.EVENT_GRANT_ACQUIRED, grant_s, {sc.ATTR_GATE_SLOT: slot}))
        if first_byte_s is not None:
            events.append((sc.EVENT_UPSTREAM_FIRST_BYTE, first_byte_s, {}))
        if hold_released_s is not None:
            events.append((sc.EVENT_HOLD_RELEASED, hold_released_s, {}))
        return self.span(trace_id, sc.SPAN_GATE_REQUEST, start_s, end_s, parent=parent, kind="Server",
                         service="gate", attributes=values, events=events)

    def engine(self, trace_id: str, parent: str, arrival_s: float, *, time_in_queue_s: float, ttft_s: float,
               e2e_s: float, service: str = VLLM_SERVICE, prefill_s: float | None = None) -> str:
        """A vLLM ``llm_request`` span as V1's do_tracing writes it (all its attributes, as strings).

        ``prefill_s`` defaults to what an engine core that queued the request on arrival reports
        (first token - scheduled = ttft - time in queue), so the schedule interval is one instant;
        a smaller one is an engine core that took the request late.
        """
        if prefill_s is None:
            prefill_s = ttft_s - time_in_queue_s
        values = {
            sc.ATTR_LATENCY_TIME_TO_FIRST_TOKEN: ttft_s,
            sc.ATTR_LATENCY_E2E: e2e_s,
            sc.ATTR_LATENCY_TIME_IN_QUEUE: time_in_queue_s,
            sc.ATTR_USAGE_PROMPT_TOKENS: 16,
            sc.ATTR_USAGE_COMPLETION_TOKENS: 32,
            sc.ATTR_LATENCY_TIME_IN_MODEL_PREFILL: prefill_s,
            sc.ATTR_LATENCY_TIME_IN_MODEL_DECODE: e2e_s - ttft_s,
            sc.ATTR_LATENCY_TIME_IN_MODEL_INFERENCE: e2e_s - time_in_queue_s,
            sc.ATTR_GEN_AI_REQUEST_ID: f"chatcmpl-{secrets.token_hex(6)}",
            sc.ATTR_GEN_AI_RESPONSE_FINISH_REASONS: ["length"],
            sc.ATTR_GEN_AI_REQUEST_MAX_TOKENS: 32,
        }
        return self.span(trace_id, sc.SPAN_LLM_REQUEST, arrival_s, arrival_s + e2e_s, parent=parent,
                         kind="Server", service=service, attributes=values)

    def served_via_gate(self, trace_id: str, attempt: str, start_s: float, end_s: float, *, upstream_s: float,
                        engine_arrival_s: float, time_in_queue_s: float, ttft_s: float, e2e_s: float,
                        **gate: Any) -> str:
        """gate.request (200) -> the gate's upstream POST -> llm_request; returns the gate span id."""
        gate_id = self.gate_request(trace_id, attempt, start_s, end_s, status=200, **gate)
        upstream = self.attempt(trace_id, gate_id, upstream_s, end_s, status=200, service="gate")
        self.engine(trace_id, upstream, engine_arrival_s, time_in_queue_s=time_in_queue_s, ttft_s=ttft_s,
                    e2e_s=e2e_s)
        return gate_id

    def gate_restore(self, start_s: float, end_s: float, *, link: tuple[str, str] | None, policy: str = "lend",
                     borrowed_at_return: int = 2, grant_restored_s: float | None = None,
                     drained_s: float | None = None) -> str:
        events = []
        if grant_restored_s is not None:
            events.append((sc.EVENT_GRANT_RESTORED, grant_restored_s, {}))
        if drained_s is not None:
            events.append((sc.EVENT_BORROWED_DRAINED, drained_s, {}))
        values = {sc.ATTR_GATE_POLICY: policy, sc.ATTR_GATE_BORROWED_AT_RETURN: borrowed_at_return}
        return self.span(self.new_trace(), sc.SPAN_GATE_RESTORE, start_s, end_s, service="gate",
                         attributes=values, events=events, links=[link] if link else [])

    def model_wake(self, start_s: float, end_s: float, *, link: tuple[str, str] | None, model: str = "tiny",
                   wake_path: str = "in-place", pod: str = "pod-a", ready_s: float | None = None,
                   observed_s: float | None = None, wake_called_s: float | None = None) -> str:
        events = []
        for name, at in ((sc.EVENT_ENGINE_WAKE_CALLED, wake_called_s), (sc.EVENT_ENGINE_READY, ready_s),
                         (sc.EVENT_READY_OBSERVED, observed_s)):
            if at is not None:
                events.append((name, at, {}))
        values = {sc.ATTR_GEN_AI_REQUEST_MODEL: model, sc.ATTR_MODELCLAIM_WAKE_PATH: wake_path,
                  sc.ATTR_MODELCLAIM_POD: pod}
        return self.span(self.new_trace(), sc.SPAN_MODELCLAIM_WAKE, start_s, end_s, service="gate",
                         attributes=values, events=events, links=[link] if link else [])

    def model_state(self, start_s: float, end_s: float, *, phase: str, reason: str, model: str = "tiny",
                    pod: str = "pod-a") -> str:
        values = {sc.ATTR_GEN_AI_REQUEST_MODEL: model, sc.ATTR_MODELCLAIM_PHASE: phase,
                  sc.ATTR_MODELCLAIM_REASON: reason, sc.ATTR_MODELCLAIM_POD: pod}
        return self.span(self.new_trace(), sc.SPAN_MODELCLAIM_STATE, start_s, end_s, service="gate",
                         attributes=values)

    # --- storage -------------------------------------------------------------------------------

    def arrow(self) -> pa.Table:
        string_map = pa.map_(pa.string(), pa.string())
        rows = self.spans
        columns = {
            "Timestamp": pa.array([ns(s.start_s) for s in rows], pa.timestamp("ns")),
            "TraceId": [s.trace_id for s in rows],
            "SpanId": [s.span_id for s in rows],
            "ParentSpanId": [s.parent_span_id for s in rows],
            "TraceState": ["" for _ in rows],
            "SpanName": [s.name for s in rows],
            "SpanKind": [s.kind for s in rows],
            "ServiceName": [s.service for s in rows],
            "ResourceAttributes": pa.array([[("service.name", s.service), *_attributes(s.resource)] for s in rows],
                                           string_map),
            "ScopeName": ["tests" for _ in rows],
            "ScopeVersion": ["" for _ in rows],
            "SpanAttributes": pa.array([_attributes(s.attributes) for s in rows], string_map),
            "Duration": pa.array([ns(s.end_s) - ns(s.start_s) for s in rows], pa.uint64()),
            "StatusCode": ["Unset" for _ in rows],
            "StatusMessage": ["" for _ in rows],
            "Events.Timestamp": pa.array([[ns(t) for _, t, _ in s.events] for s in rows],
                                         pa.list_(pa.timestamp("ns"))),
            "Events.Name": pa.array([[name for name, _, _ in s.events] for s in rows], pa.list_(pa.string())),
            "Events.Attributes": pa.array([[_attributes(a) for _, _, a in s.events] for s in rows],
                                          pa.list_(string_map)),
            "Links.TraceId": pa.array([[t for t, _ in s.links] for s in rows], pa.list_(pa.string())),
            "Links.SpanId": pa.array([[i for _, i in s.links] for s in rows], pa.list_(pa.string())),
            "Links.TraceState": pa.array([["" for _ in s.links] for s in rows], pa.list_(pa.string())),
            "Links.Attributes": pa.array([[[] for _ in s.links] for s in rows], pa.list_(string_map)),
        }
        assert tuple(columns) == COLUMNS
        return pa.table(columns)

    def engine_samples(self, target: str, model: str, samples: list[tuple[float, dict[str, float]]]) -> None:
        """Scrapes of an engine's /metrics: (offset in seconds, {metric name: value}) each, stored
        by ``store()`` into ``engine_metrics`` as ``collect --scrape`` writes them."""
        self.samples.extend((target, model, at_s, values) for at_s, values in samples)

    def otlp_json(self) -> str:
        """The spans as one OTLP/JSON export request (what a collector's file exporter writes, one
        per line), one resource per service: load it with the collector's own loader."""
        by_service: dict[str, list[dict[str, Any]]] = {}
        for s in self.spans:
            by_service.setdefault(s.service, []).append({
                "traceId": s.trace_id, "spanId": s.span_id, "parentSpanId": s.parent_span_id, "name": s.name,
                "kind": _OTLP_KINDS[s.kind], "startTimeUnixNano": str(ns(s.start_s)),
                "endTimeUnixNano": str(ns(s.end_s)), "attributes": _otlp_attributes(s.attributes),
                "events": [{"timeUnixNano": str(ns(at)), "name": name, "attributes": _otlp_attributes(values)}
                           for name, at, values in s.events],
                "links": [{"traceId": trace, "spanId": span} for trace, span in s.links],
            })
        return json.dumps({"resourceSpans": [
            {"resource": {"attributes": _otlp_attributes({"service.name": service})},
             "scopeSpans": [{"scope": {"name": "tests"}, "spans": spans}]}
            for service, spans in by_service.items()
        ]})

    def save(self, path: Any) -> None:
        """Write the spans into a DuckDB file at ``path`` (a store the CLI can open)."""
        con = duckdb.connect(str(path))
        try:
            self.store(con)
        finally:
            con.close()

    def store(self, con: duckdb.DuckDBPyConnection | None = None) -> duckdb.DuckDBPyConnection:
        con = con or duckdb.connect(":memory:")
        create_schema(con)
        batch = self.arrow()
        con.register("spans_batch", batch)
        con.execute(f"insert into {TABLE} select * from spans_batch")
        con.unregister("spans_batch")
        rows = [(ns(at_s), target, name, {"model_name": model, "engine": "0"}, value)
                for target, model, at_s, values in self.samples for name, value in values.items()]
        if rows:
            con.executemany(
                "insert into engine_metrics values (make_timestamp_ns(?), ?, ?, ?, ?)", rows
            )
        return con
