"""The engine's phases of a real vLLM cold start: the recorded fixture (vLLM 0.32's own spans, as
exported under the TRACEPARENT it was started with) inside the wake span the lifecycle writes for
that identity, decomposed by the analysis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from opentelemetry.trace import SpanContext, TraceFlags

from restorelens import spans as sc
from restorelens.analysis import Analysis
from restorelens.collector import SpanStore, load_paths, store_spans
from restorelens.gate.modelclaim.actions import WakeRecord
from restorelens.gate.modelclaim.spans import ModelClaimSpans
from restorelens.telemetry import build_tracer_provider

from .vllm_cold_start import ENGINE_PARENT_SPAN_ID, ENGINE_TRACE_ID, FIXTURE, NOTES

#: The lifecycle observes readiness on its poll after the first /health 200.
OBSERVED_AFTER_S = 0.02


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    notes = json.loads(NOTES.read_text())
    spawned_s, ready_s = notes["spawned_unix_ns"] / 1e9, notes["first_health_200_unix_ns"] / 1e9
    provider = build_tracer_provider("restorelens-gate", "memory")
    identity = SpanContext(int(ENGINE_TRACE_ID, 16), int(ENGINE_PARENT_SPAN_ID, 16), is_remote=False,
                           trace_flags=TraceFlags(TraceFlags.SAMPLED))
    ModelClaimSpans(provider).on_wake_finished(WakeRecord(
        model="tiny", path="cold-start", pod="pod-1", requested_s=spawned_s - 0.001, end_s=ready_s + OBSERVED_AFTER_S,
        outcome="ready", room_found_s=spawned_s, wake_called_s=spawned_s, path_started_s=spawned_s,
        ready_s=ready_s, observed_s=ready_s + OBSERVED_AFTER_S, context=identity))
    db = tmp_path_factory.mktemp("vllm") / "spans.duckdb"
    store = SpanStore(str(db))
    try:
        store_spans(store, provider.restorelens_exporter.get_finished_spans())  # type: ignore[attr-defined]
    finally:
        store.close()
    provider.shutdown()
    load_paths([FIXTURE], db)
    with Analysis.open(db) as opened:
        yield opened, ready_s - spawned_s


def test_the_wake_span_takes_the_identity_the_engine_was_started_with(analysis) -> None:  # noqa: ANN001
    opened, _ = analysis
    wakes = opened.wake_phases()
    assert set(wakes["trace_id"]) == {ENGINE_TRACE_ID}


def test_vllms_start_splits_into_its_phases_and_the_time_outside_them(analysis) -> None:  # noqa: ANN001
    opened, ready_s = analysis
    phases = opened.wake_phases()
    names = sorted(phases["name"])
    # Every startup span vLLM exported, its inner Worker init included; its header-less request
    # (llm_request, in the same trace under the wake span) is not a phase.
    assert names.count(sc.SPAN_VLLM_WORKER_INIT) == 2 and sc.SPAN_LLM_REQUEST not in names
    assert len(names) == 13
    top = phases.filter(phases["depth"] == 0)
    assert list(top["name"]) == [sc.SPAN_VLLM_OVERALL_LOADING]
    episode = opened.wake_episodes().row(0, named=True)
    assert episode["engine_spans_s"] + episode["outside_engine_spans_s"] == pytest.approx(ready_s, abs=1e-6)
    assert episode["engine_spans_s"] == pytest.approx(top["duration_s"][0], abs=1e-6)
    # 14.3 s of interpreter and imports before vLLM's first span, 0.75 s of API bring-up after.
    assert episode["outside_engine_spans_s"] == pytest.approx(15.02, abs=0.01)
    assert (episode["engine_starts"], episode["engine_spans"]) == (1, 13)  # three processes, one start
    assert not episode["clock_skew"]
