"""The same scenario live (real simulator + gate on loopback, time-scaled) and in virtual time."""

from __future__ import annotations

import dataclasses
from collections import Counter

from opentelemetry.sdk.trace import ReadableSpan

from restorelens.loadgen.runner import RunTelemetry, run_live, run_virtual
from restorelens.loadgen.scenarios import get_scenario
from restorelens.spans import (
    ATTR_GATE_DECISION,
    ATTR_GATE_SLOT,
    ATTR_HTTP_RESEND_COUNT,
    ATTR_HTTP_STATUS_CODE,
    ATTR_OUTCOME,
    ATTR_REQUEST_ID,
    SPAN_CLIENT_REQUEST,
    SPAN_GATE_REQUEST,
    SPAN_HTTP_POST,
)

# The first 30 s of the balanced protocol (interactive alone, then batch starts borrowing), 20x faster.
SCENARIO = dataclasses.replace(get_scenario("moflux-balanced", "lend"), until_s=30.0)
TIME_SCALE = 20.0


def _per_request(spans: tuple[ReadableSpan, ...]) -> dict[str, tuple]:
    """request id -> its trace: span names with their parents' names, statuses, gate decision, outcome."""
    by_id = {s.context.span_id: s for s in spans}
    traces: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        traces.setdefault(span.context.trace_id, []).append(span)
    out = {}
    for members in traces.values():
        roots = [s for s in members if s.name == SPAN_CLIENT_REQUEST]
        if not roots:
            continue
        (root,) = roots
        (gate,) = [s for s in members if s.name == SPAN_GATE_REQUEST]
        edges = sorted((s.name, by_id[s.parent.span_id].name if s.parent else None) for s in members)
        attempts = [s for s in members if s.name == SPAN_HTTP_POST and s.parent.span_id == root.context.span_id]
        statuses = [s.attributes[ATTR_HTTP_STATUS_CODE] for s in sorted(attempts, key=lambda s: s.start_time)]
        resends = [s.attributes.get(ATTR_HTTP_RESEND_COUNT, 0) for s in sorted(attempts, key=lambda s: s.start_time)]
        out[root.attributes[ATTR_REQUEST_ID]] = (
            tuple(edges), tuple(statuses), tuple(resends), gate.attributes[ATTR_GATE_DECISION],
            gate.attributes.get(ATTR_GATE_SLOT), root.attributes[ATTR_OUTCOME],
        )
    return out


def test_live_time_scaled_and_virtual_runs_give_the_same_spans_and_statuses() -> None:
    with RunTelemetry("memory", batch=False) as live_telemetry:
        live = run_live(SCENARIO, 1, live_telemetry.providers, "live", time_scale=TIME_SCALE)
        live_spans = live_telemetry.exporter.get_finished_spans()
    with RunTelemetry("memory", batch=False) as virtual_telemetry:
        virtual = run_virtual(SCENARIO, 1, virtual_telemetry.providers, "virtual")
        virtual_spans = virtual_telemetry.exporter.get_finished_spans()

    assert len(live.results) == len(virtual.results) > 5
    assert [(r.request_id, r.statuses, r.outcome) for r in live.results] == \
        [(r.request_id, r.statuses, r.outcome) for r in virtual.results]
    assert Counter(s.name for s in live_spans) == Counter(s.name for s in virtual_spans)
    assert _per_request(live_spans) == _per_request(virtual_spans)
    # the live run is the virtual run compressed: the same arrival order
    assert [r.request_id for r in sorted(live.results, key=lambda r: r.start_s)] == \
        [r.request_id for r in sorted(virtual.results, key=lambda r: r.start_s)]
