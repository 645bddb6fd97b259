"""Real vLLM 0.32's cold start, as it exported it: data/vllm-0.32-cold-start.pb (how it was recorded,
and what it must hold: vllm_cold_start.py), loaded by the project's loader into a real store."""

from __future__ import annotations

from restorelens import spans

import json
from pathlib import Path

import pytest

from restorelens.analysis import Analysis
from restorelens.collector import load_paths

from .vllm_cold_start import (
    ENGINE_TRACE_ID, ENGINE_TRACEPARENT, FIXTURE, HEADED_TRACE_ID, HEADED_TRACEPARENT, NOTES, START_SPAN_NAMES,
    START_SPAN_PARENTS, assert_cold_start, start_up_spans,
)  # fmt: skip


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vllm-cold-start") / "spans.duckdb"
    summary = load_paths([FIXTURE], path)
    assert (summary.files, summary.loaded, summary.rejected, summary.malformed) == (1, len(START_SPAN_PARENTS) + 2, 0, 0)
    assert summary.inputs[0].formats == ("OTLP protobuf",)
    return path


@pytest.fixture(scope="module")
def notes() -> dict:
    return json.loads(NOTES.read_text(encoding="utf-8"))


def test_the_recording_holds_the_start_up_spans_in_the_environments_trace(store: Path) -> None:
    assert_cold_start(store)


def test_the_notes_name_the_trace_contexts_the_recording_was_made_with(notes: dict) -> None:
    assert notes["vllm_version"] == "0.32.0"
    assert notes["environment"]["TRACEPARENT"] == ENGINE_TRACEPARENT
    assert notes["headed_request_traceparent"] == HEADED_TRACEPARENT


def test_vllm_names_no_service_and_says_which_process_made_each_span(store: Path) -> None:
    found = start_up_spans(store)
    assert {s["service"] for s in found} == {"unknown_service:python"}
    assert {s["kind"] for s in found} == {"Internal"}
    kinds = {(s["name"], s["scope"]): s["resource"].get("vllm.process_kind") for s in found}
    assert kinds[(spans.SPAN_VLLM_OVERALL_LOADING, "vllm.v1.engine.core_client")] is None  # the API server
    assert kinds[(spans.SPAN_VLLM_PREPARE_MODEL, "vllm.v1.engine.core")] == "engine_core"
    assert kinds[(spans.SPAN_VLLM_WARMUP_CPU, "vllm.v1.worker.cpu_model_runner")] == "worker"


def _interval(found: list[dict], name: str) -> tuple[int, int]:
    (span,) = [s for s in found if s["name"] == name]
    return span["start_ns"], span["start_ns"] + span["duration_ns"]


def _within(inner: tuple[int, int], outer: tuple[int, int]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def test_warmup_and_kv_allocation_run_inside_prepare_model_though_linked_to_executor_init(store: Path) -> None:
    """Time says where a worker's later spans belong; their parent link does not."""
    found = start_up_spans(store)
    outer = (spans.SPAN_VLLM_OVERALL_LOADING, spans.SPAN_VLLM_ASYNC_MP_CLIENT_INIT, spans.SPAN_VLLM_ENGINE_CORE_PROC_INIT)
    for parent, child in zip(outer, outer[1:], strict=False):
        assert _within(_interval(found, child), _interval(found, parent)), child
    prepare, executor = _interval(found, spans.SPAN_VLLM_PREPARE_MODEL), _interval(found, spans.SPAN_VLLM_EXECUTOR_INIT)
    assert executor[1] <= prepare[0]  # the executor (and its workers) started before the model was prepared
    for name in (spans.SPAN_VLLM_WARMUP_CPU, spans.SPAN_VLLM_ALLOCATE_KV_CACHE):
        assert _within(_interval(found, name), prepare), name
        assert _interval(found, name)[0] >= executor[1], name


def test_health_answered_after_the_start_up_spans_ended(store: Path, notes: dict) -> None:
    found = start_up_spans(store)
    loading = _interval(found, spans.SPAN_VLLM_OVERALL_LOADING)
    assert notes["spawned_unix_ns"] < loading[0]
    assert max(s["start_ns"] + s["duration_ns"] for s in found) <= notes["first_health_200_unix_ns"]
    assert {s["name"] for s in found} == START_SPAN_NAMES


def test_the_engine_view_holds_both_requests_from_vllms_spans_alone(store: Path) -> None:
    """No client or gate span: each request is timed from vLLM's own arrival, and the engine is
    named by vLLM's service name (it sets none), as no gate says which model it forwarded."""
    with Analysis.open(store) as analysis:
        engine = analysis.engine_requests()
    assert sorted(engine["trace_id"].to_list()) == sorted([ENGINE_TRACE_ID, HEADED_TRACE_ID])
    assert set(engine["engine"].to_list()) == {"unknown_service:python"}
    assert set(engine["attempt_source"].to_list()) == {"engine arrival"}
    assert not engine["via_gate"].any()
    assert engine["model"].null_count() == engine.height
    assert set(engine["completion_tokens"].to_list()) == {8}
    assert (engine["queue_s"] > 0).all()
