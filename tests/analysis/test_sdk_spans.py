"""A wake episode emitted with the real OpenTelemetry SDK, stored by the collector, decomposed.

This checks the analysis against what the SDK and the collector really write (span kinds,
attribute encoding, links, events), not only against hand-built rows.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind

from restorelens import spans as sc
from restorelens.analysis import Analysis
from restorelens.clock import to_ns
from restorelens.collector import SpanStore, store_spans
from restorelens.telemetry import build_tracer_provider

T0 = 1_767_225_600.0


def at(offset_s: float) -> int:
    return to_ns(T0) + round(offset_s * 1e9)


def emit_wake(client_provider: TracerProvider, engine_provider: TracerProvider) -> None:
    tracer = client_provider.get_tracer("restorelens.tests")
    engine_tracer = engine_provider.get_tracer("vllm.tracing")

    client = tracer.start_span(sc.SPAN_CLIENT_REQUEST, kind=SpanKind.INTERNAL, start_time=at(0.0), attributes={
        sc.ATTR_REQUEST_ID: "req-1", sc.ATTR_TRAFFIC_CLASS: "interactive", sc.ATTR_RETRY_POLICY: "honour-retry-after",
        sc.ATTR_GEN_AI_REQUEST_MODEL: "tiny", sc.ATTR_ATTEMPTS: 2, sc.ATTR_OUTCOME: "ok", sc.ATTR_SEED: 7})
    in_client = trace.set_span_in_context(client)

    first = tracer.start_span(sc.SPAN_HTTP_POST, context=in_client, kind=SpanKind.CLIENT, start_time=at(0.0),
                              attributes={sc.ATTR_HTTP_STATUS_CODE: 503, sc.ATTR_HTTP_RETRY_AFTER: ("10",),
                                          sc.ATTR_RETRY_AFTER_S: 10.0})
    gate = tracer.start_span(sc.SPAN_GATE_REQUEST, context=trace.set_span_in_context(first), kind=SpanKind.SERVER,
                             start_time=at(0.03125), attributes={sc.ATTR_GATE_DECISION: "not_ready",
                                                                 sc.ATTR_HTTP_STATUS_CODE: 503,
                                                                 sc.ATTR_GATE_POLICY: "fcfs"})
    gate.end(end_time=at(0.09375))
    first.end(end_time=at(0.125))
    client.add_event(sc.EVENT_RETRY_WAIT, {sc.ATTR_RETRY_WAIT_S: 10.0}, timestamp=at(0.125))

    wake = tracer.start_span(sc.SPAN_MODELCLAIM_WAKE, context=Context(), start_time=at(0.0625),
                             links=[Link(gate.get_span_context())],
                             attributes={sc.ATTR_MODELCLAIM_WAKE_PATH: "in-place", sc.ATTR_GEN_AI_REQUEST_MODEL: "tiny"})
    wake.add_event(sc.EVENT_ENGINE_READY, timestamp=at(4.0625))
    wake.add_event(sc.EVENT_READY_OBSERVED, timestamp=at(4.5625))
    wake.end(end_time=at(4.5625))

    retry = tracer.start_span(sc.SPAN_HTTP_POST, context=in_client, kind=SpanKind.CLIENT, start_time=at(10.125),
                              attributes={sc.ATTR_HTTP_STATUS_CODE: 200, sc.ATTR_HTTP_RESEND_COUNT: 1})
    gate2 = tracer.start_span(sc.SPAN_GATE_REQUEST, context=trace.set_span_in_context(retry), kind=SpanKind.SERVER,
                              start_time=at(10.15625), attributes={sc.ATTR_GATE_DECISION: "admitted",
                                                                   sc.ATTR_HTTP_STATUS_CODE: 200})
    upstream = tracer.start_span(sc.SPAN_HTTP_POST, context=trace.set_span_in_context(gate2), kind=SpanKind.CLIENT,
                                 start_time=at(10.1875), attributes={sc.ATTR_HTTP_STATUS_CODE: 200})
    engine = engine_tracer.start_span(sc.SPAN_LLM_REQUEST, context=trace.set_span_in_context(upstream),
                                      kind=SpanKind.SERVER, start_time=at(10.25), attributes={
                                          sc.ATTR_LATENCY_TIME_IN_QUEUE: 0.125,
                                          sc.ATTR_LATENCY_TIME_TO_FIRST_TOKEN: 0.5, sc.ATTR_LATENCY_E2E: 1.5,
                                          sc.ATTR_USAGE_PROMPT_TOKENS: 16, sc.ATTR_USAGE_COMPLETION_TOKENS: 8,
                                          sc.ATTR_GEN_AI_REQUEST_ID: "chatcmpl-1"})
    engine.end(end_time=at(11.75))
    upstream.end(end_time=at(11.8))
    gate2.end(end_time=at(11.9))
    retry.end(end_time=at(12.0))
    client.add_event(sc.EVENT_RESPONSE_FIRST_CHUNK, timestamp=at(10.8125))
    client.end(end_time=at(12.0))


def test_sdk_spans_through_the_collector_decompose_exactly(tracer_provider: TracerProvider,
                                                            span_exporter: InMemorySpanExporter) -> None:
    engine_provider = build_tracer_provider("unknown_service:python", "memory")
    try:
        emit_wake(tracer_provider, engine_provider)
        store = SpanStore(":memory:")
        store_spans(store, [*span_exporter.get_finished_spans(),
                            *engine_provider.restorelens_exporter.get_finished_spans()])  # type: ignore[attr-defined]
        analysis = Analysis(store.connection())
        episode = analysis.wake_episodes().row(0, named=True)
        request = analysis.requests().row(0, named=True)
    finally:
        engine_provider.shutdown()

    assert (episode["retry_after_s"], episode["ready_s"], episode["observed_s"]) == (10.0, 4.0625, 4.5625)
    assert (episode["hint_error_s"], episode["overshoot_s"], episode["attempts"]) == (5.9375, 6.0625, 2)
    assert (episode["engine_schedule_s"], episode["total_s"]) == (0.25, 10.75)
    assert episode["clock_skew"] is False and episode["censored"] is False
    assert request["engine_service_name"] == "unknown_service:python"
    assert (request["attempts"], request["attempts_reported"], request["seed"]) == (2, 2, 7)
    assert (request["ttft_s"], request["e2e_s"], request["policy"]) == (10.8125, 12.0, "fcfs")
