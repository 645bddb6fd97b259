"""vLLM's spans, emitted with explicit timestamps so live and virtual-time runs make the same ones.

``llm_request``: vLLM V1 creates it once a request finishes (``OutputProcessor.do_tracing``): kind
SERVER, start = arrival, child of the incoming W3C trace context, and these attributes. No prompt
or completion text ever goes on the span.

Startup spans (``Overall Loading`` and the phases inside it): vLLM's ``@instrument`` decorator
opens one INTERNAL span per instrumented start-up function, nested as the calls nest, under the
W3C context of the process's ``TRACEPARENT``/``TRACESTATE`` environment (``_get_smart_context`` in
vllm/tracing/otel.py). ``emit_startup_spans`` replays an ``EngineConfig``'s phases that way.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

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

if TYPE_CHECKING:
    from restorelens.sim.config import EngineConfig

__all__ = ["REQUEST_PARAM_ATTRIBUTES", "emit_llm_request_span", "emit_startup_spans", "environment_trace_context"]

_PROPAGATOR = TraceContextTextMapPropagator()

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


def environment_trace_context(environ: Mapping[str, str] | None = None) -> Context | None:
    """The W3C context in ``TRACEPARENT``/``TRACESTATE`` (either case, as vLLM reads them); None
    when there is no ``traceparent``."""
    environ = os.environ if environ is None else environ
    carrier = {}
    for key in ("traceparent", "tracestate"):
        value = environ.get(key, environ.get(key.upper()))
        if value:
            carrier[key] = value
    if "traceparent" not in carrier:
        return None
    return _PROPAGATOR.extract(carrier)


def emit_startup_spans(
    tracer: Tracer, config: EngineConfig, started_s: float, parent_context: Context | None = None
) -> None:
    """Emit the cold start's spans of ``config.startup_phases`` for a process started at ``started_s``.

    Each phase becomes an INTERNAL span from ``started_s + offset_s`` lasting ``duration_s``, child
    of its parent phase's span; top-level phases are children of ``parent_context`` (the
    environment's trace, see ``environment_trace_context``) or roots. No attributes: vLLM's only
    ones (``code.function``, ``code.filepath``, ...) point into its own source.
    """
    opened: dict[str, Span] = {}
    ends: list[tuple[Span, float]] = []
    for name, parent, offset_s, duration_s in config.startup_phases:
        context = trace.set_span_in_context(opened[parent]) if parent else parent_context
        span = tracer.start_span(name, context=context, kind=SpanKind.INTERNAL,
                                 start_time=to_ns(started_s + offset_s))
        opened[name] = span
        ends.append((span, started_s + offset_s + duration_s))
    for span, end_s in reversed(ends):  # children end before their parents, as they would live
        span.end(end_time=to_ns(end_s))
