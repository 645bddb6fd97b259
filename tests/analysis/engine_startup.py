"""Wakes whose engine exports its own startup spans, emitted with the real OpenTelemetry SDK.

The lifecycle (one provider, the gate's service) writes a ``modelclaim.wake`` span; each engine
process (its own provider: service ``vllm``, its own ``service.instance.id``) starts its spans under
that span's context, as an engine started with the wake's TRACEPARENT does. ``store()`` puts every
finished span through the collector's own path (OTLP encoding, ``SpanStore``) into a DuckDB file.
A span that is started but never ended is never exported: a missing span, as a crash leaves it.

Times are seconds from ``T0`` (multiples of 1/64 s, so every sum of them is exact).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Link, Span, SpanKind

from restorelens import spans as sc
from restorelens.clock import to_ns
from restorelens.collector import SpanStore, store_spans
from restorelens.telemetry import build_tracer_provider

T0 = 1_767_225_600.0
GATE_SERVICE = "restorelens-gate"
ENGINE_SERVICE = "vllm"

#: vLLM's startup tree as measured (docs/analysis.md), as (name, start_s, end_s, children) from
#: process start; ready at 66.25 s, 14.125 s outside every span.
VLLM_TREE = (
    (sc.SPAN_VLLM_OVERALL_LOADING, 6.0, 58.125, (
        (sc.SPAN_VLLM_ASYNC_MP_CLIENT_INIT, 8.0, 56.0, (
            (sc.SPAN_VLLM_ENGINE_CORE_PROC_INIT, 10.0, 54.25, (
                (sc.SPAN_VLLM_EXECUTOR_INIT, 10.5, 22.25, (
                    (sc.SPAN_VLLM_WORKER_INIT, 10.5, 12.0, ()),
                    (sc.SPAN_VLLM_LOADING_CPU, 12.0, 13.25, (
                        (sc.SPAN_VLLM_LOAD_MODEL, 12.0, 13.25, (
                            (sc.SPAN_VLLM_INITIALIZE_MODEL, 12.0, 12.5, ()),
                            (sc.SPAN_VLLM_LOAD_WEIGHTS, 12.5, 13.25, ()),
                        )),
                    )),
                )),
                (sc.SPAN_VLLM_PREPARE_MODEL, 22.25, 52.75, (
                    (sc.SPAN_VLLM_WARMUP_CPU, 22.5, 52.5, ()),
                )),
                (sc.SPAN_VLLM_ALLOCATE_KV_CACHE, 52.75, 54.25, ()),
            )),
        )),
    )),
)
VLLM_READY_S = 66.25
VLLM_SPANS = 12


def at(offset_s: float) -> int:
    return to_ns(T0) + round(offset_s * 1e9)


class Startups:
    """The gate's provider and one provider per engine process; ``store()`` writes them all."""

    def __init__(self) -> None:
        self.gate = build_tracer_provider(GATE_SERVICE, "memory")
        self.engines: dict[str, TracerProvider] = {}

    def engine(self, instance: str) -> TracerProvider:
        if instance not in self.engines:
            self.engines[instance] = build_tracer_provider(
                ENGINE_SERVICE, "memory", resource_attributes={sc.ATTR_SERVICE_INSTANCE_ID: instance})
        return self.engines[instance]

    @contextmanager
    def wake(self, start_s: float, end_s: float, *, wake_called_s: float | None, ready_s: float | None,
             observed_s: float | None = None, links: tuple[Link, ...] = ()) -> Iterator[Span]:
        """A ``modelclaim.wake`` span (a root, as the lifecycle writes it), ended on leaving."""
        tracer = self.gate.get_tracer("restorelens.tests")
        span = tracer.start_span(sc.SPAN_MODELCLAIM_WAKE, context=Context(), start_time=at(start_s), links=list(links),
                                 attributes={sc.ATTR_MODELCLAIM_WAKE_PATH: "cold-start",
                                             sc.ATTR_GEN_AI_REQUEST_MODEL: "tiny"})
        yield span
        for name, offset in ((sc.EVENT_ENGINE_WAKE_CALLED, wake_called_s), (sc.EVENT_ENGINE_READY, ready_s),
                             (sc.EVENT_READY_OBSERVED, observed_s)):
            if offset is not None:
                span.add_event(name, timestamp=at(offset))
        span.end(end_time=at(end_s))

    def spans(self, parent: Span, tree: tuple, *, instance: str = "engine-1", offset_s: float = 0.0,
              missing: tuple[str, ...] = (), kind: SpanKind = SpanKind.INTERNAL) -> dict[str, Span]:
        """``tree`` (name, start_s, end_s, children) under ``parent`` by engine process ``instance``,
        shifted by ``offset_s``; spans named in ``missing`` are started but never ended (not exported)."""
        tracer = self.engine(instance).get_tracer("vllm.tracing")
        made: dict[str, Span] = {}

        def emit(context: Context, nodes: tuple) -> None:
            for name, start_s, end_s, children in nodes:
                span = tracer.start_span(name, context=context, kind=kind, start_time=at(start_s + offset_s))
                made[name] = span
                emit(trace.set_span_in_context(span), children)
                if name not in missing:
                    span.end(end_time=at(end_s + offset_s))

        emit(trace.set_span_in_context(parent), tree)
        return made

    def inference(self, parent: Span, start_s: float, end_s: float, *, instance: str = "engine-1") -> Span:
        """An ``llm_request`` (SERVER) that arrived without a traceparent: vLLM parents it to the
        environment's trace, the wake's, under the wake span; with a span of its own under it."""
        tracer = self.engine(instance).get_tracer("vllm.tracing")
        request = tracer.start_span(sc.SPAN_LLM_REQUEST, context=trace.set_span_in_context(parent),
                                    kind=SpanKind.SERVER, start_time=at(start_s))
        inner = tracer.start_span(sc.SPAN_VLLM_WARMUP_CPU, context=trace.set_span_in_context(request),
                                  start_time=at(start_s))
        inner.end(end_time=at(end_s))
        request.end(end_time=at(end_s))
        return request

    def store(self, path: Path) -> Path:
        """Every finished span into a DuckDB store at ``path`` through the collector's path."""
        finished = [*self.gate.restorelens_exporter.get_finished_spans()]  # type: ignore[attr-defined]
        for provider in self.engines.values():
            finished += provider.restorelens_exporter.get_finished_spans()  # type: ignore[attr-defined]
        store = SpanStore(str(path))
        try:
            store_spans(store, finished)
        finally:
            store.close()
        for provider in (self.gate, *self.engines.values()):
            provider.shutdown()
        return path
