"""vLLM's startup spans: names, nesting, timestamps, and the TRACEPARENT of the environment."""

from __future__ import annotations

import time

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from restorelens.clock import to_ns
from restorelens.sim import EngineConfig, create_app, emit_startup_spans, get_preset
from restorelens.sim.tracing import environment_trace_context
from restorelens.spans import SPAN_LLM_REQUEST

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"


def test_spans_have_vllms_names_nesting_and_the_phases_timestamps(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    config = get_preset("tiny-cpu")
    emit_startup_spans(tracer_provider.get_tracer("t"), config, 1000.0)
    spans = {span.name: span for span in span_exporter.get_finished_spans()}
    assert set(spans) == {name for name, _, _, _ in config.startup_phases}
    for name, parent, offset_s, duration_s in config.startup_phases:
        span = spans[name]
        assert span.kind == SpanKind.INTERNAL and not span.attributes
        assert span.start_time == to_ns(1000.0 + offset_s)
        assert span.end_time == to_ns(1000.0 + offset_s + duration_s)
        if parent:
            assert span.parent is not None and span.parent.span_id == spans[parent].context.span_id
        else:
            assert span.parent is None
    assert len({span.context.trace_id for span in spans.values()}) == 1
    warmup = spans["Warmup (CPU)"]
    assert warmup.parent.span_id == spans["Prepare model"].context.span_id  # type: ignore[union-attr]


def test_top_level_phases_join_the_environments_trace(
    tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    context = environment_trace_context({"TRACEPARENT": TRACEPARENT, "TRACESTATE": "vendor=1"})
    emit_startup_spans(tracer_provider.get_tracer("t"), get_preset("llama-8b-h20"), 0.0, context)
    spans = span_exporter.get_finished_spans()
    assert {format(span.context.trace_id, "032x") for span in spans} == {TRACE_ID}
    (overall,) = [span for span in spans if span.name == "Overall Loading"]
    assert overall.parent is not None and format(overall.parent.span_id, "016x") == PARENT_SPAN_ID
    assert overall.context.trace_state.get("vendor") == "1"


def test_no_traceparent_in_the_environment_is_no_context() -> None:
    assert environment_trace_context({}) is None
    assert environment_trace_context({"TRACESTATE": "vendor=1"}) is None
    assert environment_trace_context({"traceparent": TRACEPARENT}) is not None  # either case, as vLLM


def test_a_config_without_phases_emits_nothing(tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    emit_startup_spans(tracer_provider.get_tracer("t"), EngineConfig(), 0.0)
    assert span_exporter.get_finished_spans() == ()


def test_a_cold_started_sim_exports_its_startup_spans_when_ready_in_the_environments_trace(
    serve_asgi, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRACEPARENT", TRACEPARENT)
    config = EngineConfig(cold_start_s=0.5, startup_phases=(("Overall Loading", "", 0.1, 0.3),
                                                           ("Prepare model", "Overall Loading", 0.2, 0.1)))
    app = create_app(config, tracer_provider=tracer_provider, start_mode="cold")
    assert app.sim.engine.cold_start is not None
    started_s = app.sim.engine.cold_start[0]
    server = serve_asgi(app)
    assert httpx.get(f"{server.url}/health").status_code == 503
    for _ in range(500):  # bounded (at most ~10 s): the modelled load takes 0.5 s
        if span_exporter.get_finished_spans():
            break
        time.sleep(0.02)
    # Emitted once the engine is ready, before any request: the sim's only spans are these.
    spans = {span.name: span for span in span_exporter.get_finished_spans()}
    assert set(spans) == {"Overall Loading", "Prepare model"}
    assert httpx.get(f"{server.url}/health").status_code == 200
    overall = spans["Overall Loading"]
    assert format(overall.context.trace_id, "032x") == TRACE_ID
    assert overall.start_time == to_ns(started_s + 0.1)
    assert abs(overall.end_time - to_ns(started_s + 0.4)) <= 1000  # float sums differ in the last bits

    # A request without a traceparent header joins the environment's trace, as in vLLM; one with
    # a header keeps its own.
    httpx.post(f"{server.url}/v1/completions", json={"prompt": "x", "max_tokens": 1})
    own = "00-11111111111111111111111111111111-2222222222222222-01"
    httpx.post(f"{server.url}/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers={"traceparent": own})
    requests = [s for s in span_exporter.get_finished_spans() if s.name == SPAN_LLM_REQUEST]
    assert [format(s.context.trace_id, "032x") for s in requests] == [TRACE_ID, "1" * 32]
    assert format(requests[0].parent.span_id, "016x") == PARENT_SPAN_ID  # type: ignore[union-attr]
