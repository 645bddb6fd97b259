from __future__ import annotations

import json

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from restorelens.clock import to_ns
from restorelens.sim import RequestRecord, emit_llm_request_span
from restorelens.spans import (
    ATTR_GEN_AI_REQUEST_MAX_TOKENS,
    ATTR_GEN_AI_RESPONSE_MODEL,
    ATTR_LATENCY_TIME_IN_QUEUE,
    SPAN_LLM_REQUEST,
    VLLM_LLM_REQUEST_ATTRIBUTES,
)

RECORD = RequestRecord(
    request_id="cmpl-1",
    arrival_s=100.0,
    scheduled_s=100.5,
    first_token_s=101.0,
    last_token_s=103.0,
    finished_s=103.0,
    prompt_tokens=1607,
    completion_tokens=64,
    max_tokens=64,
    priority=0,
    finish_reason="length",
    num_preemptions=0,
)


def test_span_has_exactly_vllms_attribute_names(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    emit_llm_request_span(tracer_provider.get_tracer("t"), RECORD, model=None)
    (span,) = span_exporter.get_finished_spans()
    assert span.name == SPAN_LLM_REQUEST and span.kind == SpanKind.SERVER
    assert span.attributes is not None
    assert set(span.attributes) == set(VLLM_LLM_REQUEST_ATTRIBUTES)


def test_span_times_and_values_follow_vllms_definitions(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    emit_llm_request_span(
        tracer_provider.get_tracer("t"), RECORD, model="qwen", request_params={"max_tokens": 64, "top_p": None}
    )
    (span,) = span_exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert (span.start_time, span.end_time) == (to_ns(100.0), to_ns(103.0))
    assert attributes[ATTR_LATENCY_TIME_IN_QUEUE] == 0.5
    assert attributes["gen_ai.latency.time_to_first_token"] == 1.0
    assert attributes["gen_ai.latency.e2e"] == 3.0
    assert attributes["gen_ai.latency.time_in_model_prefill"] == 0.5
    assert attributes["gen_ai.latency.time_in_model_decode"] == 2.0
    assert attributes["gen_ai.latency.time_in_model_inference"] == 2.5
    assert json.loads(str(attributes["gen_ai.response.finish_reasons"])) == ["length"]
    assert attributes[ATTR_GEN_AI_RESPONSE_MODEL] == "qwen"
    assert attributes[ATTR_GEN_AI_REQUEST_MAX_TOKENS] == 64
    assert "gen_ai.request.top_p" not in attributes
