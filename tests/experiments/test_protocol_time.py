"""RescaledExporter: wall-stamped spans onto the protocol timeline, with vLLM's latencies scaled."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from restorelens.clock import to_ns
from restorelens.experiments.protocol_time import RescaledExporter
from restorelens.spans import (
    ATTR_LATENCY_E2E,
    ATTR_LATENCY_TIME_IN_MODEL_DECODE,
    ATTR_LATENCY_TIME_IN_MODEL_INFERENCE,
    ATTR_LATENCY_TIME_IN_MODEL_PREFILL,
    ATTR_LATENCY_TIME_IN_QUEUE,
    ATTR_LATENCY_TIME_TO_FIRST_TOKEN,
    ATTR_USAGE_COMPLETION_TOKENS,
    ATTR_USAGE_PROMPT_TOKENS,
    EVENT_RESPONSE_FIRST_CHUNK,
    SPAN_CLIENT_REQUEST,
    SPAN_LLM_REQUEST,
)
from restorelens.telemetry import build_tracer_provider

LATENCIES = (ATTR_LATENCY_TIME_TO_FIRST_TOKEN, ATTR_LATENCY_E2E, ATTR_LATENCY_TIME_IN_QUEUE,
             ATTR_LATENCY_TIME_IN_MODEL_PREFILL, ATTR_LATENCY_TIME_IN_MODEL_DECODE,
             ATTR_LATENCY_TIME_IN_MODEL_INFERENCE)


def test_wall_stamped_spans_are_mapped_and_every_vllm_latency_is_scaled() -> None:
    inner = InMemorySpanExporter()
    origin_s = 1_000.0
    provider = build_tracer_provider("t", RescaledExporter(inner, origin_s, time_scale=4.0), batch=False)
    engine = provider.get_tracer("restorelens.sim").start_span(SPAN_LLM_REQUEST, start_time=to_ns(origin_s + 1.0))
    engine.set_attributes({key: 0.5 for key in LATENCIES})
    engine.set_attributes({ATTR_USAGE_PROMPT_TOKENS: 10, ATTR_USAGE_COMPLETION_TOKENS: 3})
    engine.add_event(EVENT_RESPONSE_FIRST_CHUNK, timestamp=to_ns(origin_s + 1.5))
    engine.end(end_time=to_ns(origin_s + 2.0))
    # stamped with the scaled clock already: passes unchanged
    client = provider.get_tracer("restorelens.loadgen").start_span(SPAN_CLIENT_REQUEST, start_time=to_ns(origin_s + 1.0))
    client.set_attribute(ATTR_LATENCY_E2E, 0.5)
    client.end(end_time=to_ns(origin_s + 2.0))
    provider.shutdown()

    spans = {s.name: s for s in inner.get_finished_spans()}
    rescaled, unchanged = spans[SPAN_LLM_REQUEST], spans[SPAN_CLIENT_REQUEST]
    assert (rescaled.start_time, rescaled.end_time) == (to_ns(origin_s + 4.0), to_ns(origin_s + 8.0))
    assert rescaled.events[0].timestamp == to_ns(origin_s + 6.0)
    assert {key: rescaled.attributes[key] for key in LATENCIES} == {key: 2.0 for key in LATENCIES}
    assert (rescaled.attributes[ATTR_USAGE_PROMPT_TOKENS], rescaled.attributes[ATTR_USAGE_COMPLETION_TOKENS]) == (10, 3)
    assert (unchanged.start_time, unchanged.end_time) == (to_ns(origin_s + 1.0), to_ns(origin_s + 2.0))
    assert unchanged.attributes[ATTR_LATENCY_E2E] == 0.5
