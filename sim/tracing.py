"""vLLM's ``llm_request`` span, emitted from a finished request's record with explicit timestamps.

vLLM V1 creates the span once a request finishes (``OutputProcessor.do_tracing``): kind SERVER,
start = arrival, child of the incoming W3C trace context, and these attributes. The live app and
virtual-time runs both call ``emit_llm_request_span`` so their spans are identical in shape.
No prompt or completion text ever goes on the span.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Tracer

from restorelens.clock import to_ns
from restorelens.sim.records import RequestRecord
from restorelens.spans import (
    ATTR_GEN_AI_REQUEST_ID,
    ATTR_GEN_AI_REQUEST_MAX_TOKENS,
    ATTR_GEN_AI_REQUEST_N,
    ATTR_GEN_AI_REQUEST_TEMPERATURE,
    ATTR_GEN_AI_REQUEST_TOP_P,
    ATTR_GEN_AI_RESPONSE_FINISH_REASONS,
    ATTR_GEN_AI_RESPONSE_MODEL,
    ATTR_LATENCY_E2E,
    ATTR_LATENCY_TIME_IN_MODEL_DECODE,
    ATTR_LATENCY_TIME_IN_MODEL_INFERENCE,
    ATTR_LATENCY_TIME_IN_MODEL_PREFILL,
    ATTR_LATENCY_TIME_IN_QUEUE,
    ATTR_LATENCY_TIME_TO_FIRST_TOKEN,
    ATTR_USAGE_COMPLETION_TOKENS,
    ATTR_USAGE_PROMPT_TOKENS,
    SPAN_LLM_REQUEST,
)

__all__ = ["REQUEST_PARAM_ATTRIBUTES", "emit_llm_request_span"]

#: Sampling parameters vLLM copies onto the span when the request has them.
REQUEST_PARAM_ATTRIBUTES: dict[str, str] = {
    "max_tokens": ATTR_GEN_AI_REQUEST_MAX_TOKENS,
    "temperature": ATTR_GEN_AI_REQUEST_TEMPERATURE,
    "top_p": ATTR_GEN_AI_REQUEST_TOP_P,
    "n": ATTR_GEN_AI_REQUEST_N,
}


_FINISH_REASONS_JSON: dict[str, str] = {}


def _finish_reasons_json(reason: str) -> str:
    encoded = _FINISH_REASONS_JSON.get(reason)
    if encoded is None:
        encoded = _FINISH_REASONS_JSON[reason] = json.dumps([reason])
    return encoded


def emit_llm_request_span(
    tracer: Tracer,
    record: RequestRecord,
    *,
    model: str | None,
    parent_context: Context | None = None,
    request_params: Mapping[str, float | int | None] | None = None,
) -> None:
    """Emit one ``llm_request`` SERVER span for ``record`` (from arrival to finish).

    ``model`` is recorded as ``gen_ai.response.model`` (one of vLLM's span attribute names; pass
    None to leave it out). ``request_params`` may hold max_tokens, temperature, top_p and n.
    """
    ttft_s = record.ttft_s
    attributes: dict[str, str | int | float] = {
        ATTR_LATENCY_TIME_TO_FIRST_TOKEN: ttft_s if ttft_s is not None else record.e2e_s,
        ATTR_LATENCY_E2E: record.e2e_s,
        ATTR_LATENCY_TIME_IN_QUEUE: record.queue_time_s,
        ATTR_USAGE_PROMPT_TOKENS: record.prompt_tokens,
        ATTR_USAGE_COMPLETION_TOKENS: record.completion_tokens,
        ATTR_LATENCY_TIME_IN_MODEL_PREFILL: record.prefill_time_s,
        ATTR_LATENCY_TIME_IN_MODEL_DECODE: record.decode_time_s,
        ATTR_LATENCY_TIME_IN_MODEL_INFERENCE: record.inference_time_s,
        ATTR_GEN_AI_REQUEST_ID: record.request_id,
        # vLLM writes the list as a JSON string, not as an OTel array attribute.
        ATTR_GEN_AI_RESPONSE_FINISH_REASONS: _finish_reasons_json(record.finish_reason),
    }
    if model is not None:
        attributes[ATTR_GEN_AI_RESPONSE_MODEL] = model
    if request_params:
        for name, key in REQUEST_PARAM_ATTRIBUTES.items():
            value = request_params.get(name)
            if value is not None:
                attributes[key] = value
    span = tracer.start_span(
        SPAN_LLM_REQUEST,
        context=parent_context,
        kind=SpanKind.SERVER,
        attributes=attributes,
        start_time=to_ns(record.arrival_s),
    )
    span.end(end_time=to_ns(record.finished_s))
