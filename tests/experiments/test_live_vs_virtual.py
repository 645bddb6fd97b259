"""The same scenario live (real simulator + gate on loopback, time-scaled) and in virtual time.

Both give the same requests, statuses and span trees, and, since the live run puts every span on
the protocol timeline, the same timings: arrivals, client latencies, gate waits and the engine's
own spans agree within what the real loopback round trips add, magnified by the time scale.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan

from restorelens.experiments.catalog import get_scenario
from restorelens.experiments.run_report import RunReport
from restorelens.experiments.run_telemetry import RunTelemetry
from restorelens.experiments.runner import run_live, run_virtual
from restorelens.spans import (
    ATTR_GATE_DECISION,
    ATTR_GATE_SLOT,
    ATTR_GATE_WAIT_S,
    ATTR_HTTP_RESEND_COUNT,
    ATTR_HTTP_STATUS_CODE,
    ATTR_LATENCY_E2E,
    ATTR_LATENCY_TIME_IN_QUEUE,
    ATTR_OUTCOME,
    ATTR_REQUEST_ID,
    SPAN_CLIENT_REQUEST,
    SPAN_GATE_REQUEST,
    SPAN_HTTP_POST,
    SPAN_LLM_REQUEST,
)

# 12 s of the balanced protocol from 20 s (the last interactive requests, then batch borrowing
# their idle slots), 4 times faster: 3 s of wall time. A low scale keeps the real round trips small
# in protocol seconds. The seed is chosen for margins: nothing waits in the gate, and every batch
# arrival is at least 1.39 protocol seconds (0.35 real seconds at x4) from another batch request's
# end, so which requests overlap, and so the gate's slot decisions, do not flip on a busy machine.
SCENARIO = dataclasses.replace(get_scenario("moflux-balanced", "lend"), from_s=20.0, until_s=32.0)
SEED = 16
TIME_SCALE = 4.0


@dataclasses.dataclass(frozen=True)
class Run:
    report: RunReport
    spans: tuple[ReadableSpan, ...]


@dataclasses.dataclass(frozen=True)
class Runs:
    live: Run
    virtual: Run
    #: Protocol seconds a live time may be off, from the loopback round trip measured around the run.
    tolerance_s: float


@pytest.fixture(scope="module")
def runs(loopback_round_trip_s: Callable[[], float]) -> Runs:
    before_s = loopback_round_trip_s()
    with RunTelemetry("memory", batch=False) as live_telemetry:
        live = run_live(SCENARIO, SEED, live_telemetry.providers, "live", time_scale=TIME_SCALE)
        live_spans = live_telemetry.exporter.get_finished_spans()
    round_trip_s = max(before_s, loopback_round_trip_s())
    with RunTelemetry("memory", batch=False) as virtual_telemetry:
        virtual = run_virtual(SCENARIO, SEED, virtual_telemetry.providers, "virtual")
        virtual_spans = virtual_telemetry.exporter.get_finished_spans()
    return Runs(Run(live, live_spans), Run(virtual, virtual_spans), SCENARIO.live_tolerance_s(TIME_SCALE, round_trip_s))


def _traces(spans: tuple[ReadableSpan, ...]) -> dict[str, list[ReadableSpan]]:
    """request id -> the spans of its trace (client, attempts, gate, engine)."""
    traces: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        traces.setdefault(span.context.trace_id, []).append(span)
    out = {}
    for members in traces.values():
        roots = [s for s in members if s.name == SPAN_CLIENT_REQUEST]
        if roots:
            (root,) = roots
            out[str(root.attributes[ATTR_REQUEST_ID])] = members
    return out


def _per_request(spans: tuple[ReadableSpan, ...]) -> dict[str, tuple]:
    """request id -> its trace: span names with their parents' names, statuses, gate decision, outcome."""
    by_id = {s.context.span_id: s for s in spans}
    out = {}
    for request_id, members in _traces(spans).items():
        (root,) = [s for s in members if s.name == SPAN_CLIENT_REQUEST]
        (gate,) = [s for s in members if s.name == SPAN_GATE_REQUEST]
        edges = sorted((s.name, by_id[s.parent.span_id].name if s.parent else None) for s in members)
        attempts = [s for s in members if s.name == SPAN_HTTP_POST and s.parent.span_id == root.context.span_id]
        statuses = [s.attributes[ATTR_HTTP_STATUS_CODE] for s in sorted(attempts, key=lambda s: s.start_time)]
        resends = [s.attributes.get(ATTR_HTTP_RESEND_COUNT, 0) for s in sorted(attempts, key=lambda s: s.start_time)]
        out[request_id] = (
            tuple(edges), tuple(statuses), tuple(resends), gate.attributes[ATTR_GATE_DECISION],
            gate.attributes.get(ATTR_GATE_SLOT), root.attributes[ATTR_OUTCOME],
        )
    return out


def _timings(spans: tuple[ReadableSpan, ...]) -> dict[str, dict[str, float]]:
    """request id -> protocol seconds: arrival (after the run's first request), gate wait, and the
    engine's own span (arrival, duration, vLLM's queue and e2e latencies)."""
    traces = _traces(spans)
    t0_ns = min(s.start_time for members in traces.values() for s in members if s.name == SPAN_CLIENT_REQUEST)
    out = {}
    for request_id, members in traces.items():
        (root,) = [s for s in members if s.name == SPAN_CLIENT_REQUEST]
        (gate,) = [s for s in members if s.name == SPAN_GATE_REQUEST]
        (engine,) = [s for s in members if s.name == SPAN_LLM_REQUEST]
        out[request_id] = {
            "arrival": (root.start_time - t0_ns) / 1e9,
            "gate wait": float(gate.attributes[ATTR_GATE_WAIT_S]),
            "engine arrival": (engine.start_time - t0_ns) / 1e9,
            "engine span": (engine.end_time - engine.start_time) / 1e9,
            "engine queue": float(engine.attributes[ATTR_LATENCY_TIME_IN_QUEUE]),
            "engine e2e": float(engine.attributes[ATTR_LATENCY_E2E]),
        }
    return out


def test_the_slice_has_both_classes_and_borrowing(runs: Runs) -> None:
    gates = [s for s in runs.virtual.spans if s.name == SPAN_GATE_REQUEST]
    assert {r.traffic_class for r in runs.virtual.report.results} == {"interactive", "batch"}
    assert Counter(s.attributes.get(ATTR_GATE_SLOT) for s in gates)["borrowed"] >= 2


def test_live_time_scaled_and_virtual_runs_give_the_same_spans_and_statuses(runs: Runs) -> None:
    live, virtual = runs.live, runs.virtual
    assert len(live.report.results) == len(virtual.report.results) > 5
    assert [(r.request_id, r.statuses, r.outcome) for r in live.report.results] == \
        [(r.request_id, r.statuses, r.outcome) for r in virtual.report.results]
    assert Counter(s.name for s in live.spans) == Counter(s.name for s in virtual.spans)
    assert _per_request(live.spans) == _per_request(virtual.spans)
    # the live run is the virtual run compressed: the same arrival order
    assert [r.request_id for r in sorted(live.report.results, key=lambda r: r.start_s)] == \
        [r.request_id for r in sorted(virtual.report.results, key=lambda r: r.start_s)]


def test_live_timings_are_protocol_seconds_and_match_virtual_within_the_round_trips(runs: Runs) -> None:
    live, virtual = runs.live, runs.virtual
    tolerance_s = runs.tolerance_s  # real round trips and scheduling x the scale

    def client_times(report: RunReport) -> dict[str, dict[str, Any]]:
        t0_s = min(r.start_s for r in report.results)
        return {r.request_id: {"arrival": r.start_s - t0_s, "ttft": r.ttft_s, "e2e": r.e2e_s} for r in report.results}

    live_client, virtual_client = client_times(live.report), client_times(virtual.report)
    live_spans, virtual_spans = _timings(live.spans), _timings(virtual.spans)
    for request_id, expected in virtual_client.items():
        for name, value in expected.items():
            assert live_client[request_id][name] == pytest.approx(value, abs=tolerance_s), (request_id, name)
        for name, value in virtual_spans[request_id].items():
            assert live_spans[request_id][name] == pytest.approx(value, abs=tolerance_s), (request_id, name)
    # the arrivals span most of the 12 s in both; in wall seconds (x4) they would span 3 s, which
    # the tolerance tells apart
    last_arrival = max(t["arrival"] for t in virtual_client.values())
    assert last_arrival * (1 - 1 / TIME_SCALE) > tolerance_s
    assert max(t["arrival"] for t in live_client.values()) == pytest.approx(last_arrival, abs=tolerance_s)
    # the summary reads protocol seconds too: the same goodput and median TTFT
    live_summary, virtual_summary = live.report.summary(), virtual.report.summary()
    for key in ("interactive_slo_goodput_whole_run_rps", "batch_completions_rps", "interactive_slo_met_whole_run"):
        assert live_summary[key] == virtual_summary[key], key
    assert live_summary["interactive_ttft_p50_s"] == pytest.approx(virtual_summary["interactive_ttft_p50_s"],
                                                                   abs=tolerance_s)
