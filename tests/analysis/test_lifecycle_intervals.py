"""Lifecycle state intervals per run, model and pod, with the memory each state held."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from builders import Traces

from restorelens import spans as sc
from restorelens.analysis import Analysis
from restorelens.collector import load_paths
from restorelens.experiments.record import sample_scenario
from restorelens.experiments.run_telemetry import RunTelemetry
from restorelens.experiments.runner import run_virtual

GIB = 2**30


def state(traces: Traces, start_s: float, end_s: float, *, phase: str, model: str = "tiny", pod: str | None = "pod-a",
          run_id: str | None = None, resource_run_id: str | None = None, gpu: object = None,
          host: object = None, extra: dict[str, str] | None = None) -> str:
    """A `modelclaim.state` span with the run id on the span, on its resource, or neither."""
    attributes = {sc.ATTR_GEN_AI_REQUEST_MODEL: model, sc.ATTR_MODELCLAIM_PHASE: phase,
                  sc.ATTR_MODELCLAIM_REASON: "EngineReady", sc.ATTR_MODELCLAIM_POD: pod, sc.ATTR_RUN_ID: run_id,
                  sc.ATTR_MODELCLAIM_GPU_BYTES: gpu, sc.ATTR_MODELCLAIM_HOST_RAM_BYTES: host, **(extra or {})}
    resource = {sc.ATTR_RUN_ID: resource_run_id}
    return traces.span(traces.new_trace(), sc.SPAN_MODELCLAIM_STATE, start_s, end_s, service="gate",
                       attributes=attributes, resource=resource)


def test_intervals_are_ordered_per_model_with_durations() -> None:
    traces = Traces()
    traces.model_state(4.0, 4.5, phase="Active", reason="EngineReady", model="a")
    traces.model_state(0.0, 4.0, phase="Activating", reason="EngineWaking", model="a")
    traces.model_state(1.0, 31.0, phase="Scheduling", reason="WaitingForRoom", model="b", pod="pod-b")

    intervals = Analysis(traces.store()).lifecycle_intervals()

    assert intervals.select("model", "interval_index", "phase", "reason", "duration_s").rows() == [
        ("a", 1, "Activating", "EngineWaking", 4.0),
        ("a", 2, "Active", "EngineReady", 0.5),
        ("b", 1, "Scheduling", "WaitingForRoom", 30.0),
    ]
    assert intervals["pod"].to_list() == ["pod-a", "pod-a", "pod-b"]
    assert intervals["run_id"].to_list() == [None, None, None]  # a deployed gate's states belong to no run


def test_the_run_is_the_spans_own_attribute_else_its_resources() -> None:
    traces = Traces()
    state(traces, 0.0, 1.0, phase="Active", run_id="span-run", resource_run_id="resource-run")
    state(traces, 1.0, 2.0, phase="Sleeping", resource_run_id="resource-run")
    state(traces, 2.0, 3.0, phase="Activating")

    intervals = Analysis(traces.store()).lifecycle_intervals().sort("start")

    assert intervals["run_id"].to_list() == ["span-run", "resource-run", None]


def test_a_mapped_run_label_comes_before_the_runs_own() -> None:
    traces = Traces()
    state(traces, 0.0, 1.0, phase="Active", resource_run_id="resource-run", extra={"app.run": "mine"})
    state(traces, 1.0, 2.0, phase="Sleeping", resource_run_id="resource-run")

    intervals = Analysis(traces.store(), labels={"run_id": "app.run"}).lifecycle_intervals().sort("start")

    assert intervals["run_id"].to_list() == ["mine", "resource-run"]


def test_memory_figures_are_bytes_as_the_span_carries_them() -> None:
    traces = Traces()
    state(traces, 0.0, 1.0, phase="Sleeping", gpu=GIB, host=15 * GIB)
    state(traces, 1.0, 2.0, phase="Active", gpu=20 * GIB, host=0)
    state(traces, 2.0, 3.0, phase="Pending", pod=None)  # a gate without the core accounts nothing
    state(traces, 3.0, 4.0, phase="Active", gpu="lots", host="n/a")  # not numbers: unknown, not an error

    intervals = Analysis(traces.store()).lifecycle_intervals().sort("start")

    assert intervals.schema["gpu_bytes"] == intervals.schema["host_ram_bytes"] == pl.Int64
    assert intervals.select("gpu_bytes", "host_ram_bytes").rows() == [
        (GIB, 15 * GIB), (20 * GIB, 0), (None, None), (None, None)]


def test_intervals_are_numbered_per_run_model_and_pod() -> None:
    traces = Traces()
    for run in ("run-1", "run-2"):
        state(traces, 0.0, 1.0, phase="Sleeping", resource_run_id=run)
        state(traces, 1.0, 2.0, phase="Activating", resource_run_id=run)
        state(traces, 1.5, 2.5, phase="Loading", pod="pod-b", resource_run_id=run)
    state(traces, 5.0, 6.0, phase="Active", model="other", resource_run_id="run-1")

    intervals = Analysis(traces.store()).lifecycle_intervals()

    numbered = sorted(intervals.select("run_id", "model", "pod", "phase", "interval_index").rows())
    assert numbered == [
        ("run-1", "other", "pod-a", "Active", 1),
        ("run-1", "tiny", "pod-a", "Activating", 2),
        ("run-1", "tiny", "pod-a", "Sleeping", 1),
        ("run-1", "tiny", "pod-b", "Loading", 1),
        ("run-2", "tiny", "pod-a", "Activating", 2),
        ("run-2", "tiny", "pod-a", "Sleeping", 1),
        ("run-2", "tiny", "pod-b", "Loading", 1),
    ]


def record(folder: Path, name: str, run_id: str | None) -> Path:
    """A virtual wake run's spans in a file, through the experiments' telemetry."""
    path = folder / f"{name}-{run_id}.jsonl"
    scenario = sample_scenario(name, None)
    with RunTelemetry("file", path=path, batch=False, run_id=run_id, scenario=scenario.name) as telemetry:
        run_virtual(scenario, 0, telemetry.providers, run_id=run_id)
    telemetry.raise_if_spans_dropped()
    return path


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A collector store (derived tables kept) of two virtual runs of one wake scenario."""
    folder = tmp_path_factory.mktemp("lifecycle")
    db = folder / "spans.duckdb"
    load_paths([record(folder, "modelclaim-in-place", "run-a"), record(folder, "modelclaim-in-place", "run-b")], db)
    return db


def test_every_span_of_an_experiment_run_names_its_run_and_scenario(two_runs: Path) -> None:
    with Analysis.open(two_runs) as analysis:
        rows = analysis.con.execute(
            f"""select "ServiceName", "ResourceAttributes"['{sc.ATTR_RUN_ID}'],
                       "ResourceAttributes"['{sc.ATTR_SCENARIO}'], count(*)
                from otel_traces group by all order by all"""
        ).fetchall()
    assert {service for service, *_ in rows} == {"restorelens-loadgen", "restorelens-gate", "restorelens-sim"}
    assert {(run, scenario) for _, run, scenario, _ in rows} == {
        ("run-a", "modelclaim-in-place"), ("run-b", "modelclaim-in-place")}


def test_two_runs_of_one_scenario_are_apart_with_their_memory(two_runs: Path) -> None:
    with Analysis.open(two_runs) as analysis:
        intervals = analysis.lifecycle_intervals()
        stored = analysis.con.execute(
            f"""select count(*) from otel_traces
                where "SpanName" = '{sc.SPAN_MODELCLAIM_STATE}'
                  and "SpanAttributes"['{sc.ATTR_MODELCLAIM_GPU_BYTES}'] is not null"""
        ).fetchall()[0][0]

    per_run = {run: part for (run,), part in intervals.group_by("run_id")}
    assert set(per_run) == {"run-a", "run-b"}
    # the same virtual run twice: the same states, each run numbered from 1 on its own
    columns = ("model", "pod", "phase", "reason", "interval_index", "gpu_bytes", "host_ram_bytes")
    first, second = (per_run[run].sort("model", "pod", "interval_index").select(columns).rows()
                     for run in ("run-a", "run-b"))
    assert first == second and min(row[4] for row in first) == 1
    assert intervals["gpu_bytes"].is_not_null().sum() == stored > 0
    # an in-place wake: asleep at level 1 the weights sit in host RAM, awake they are on the GPU
    by_phase = {phase: (gpu, host) for _, _, phase, _, _, gpu, host in first}
    assert by_phase["Sleeping"][1] > 0 and by_phase["Active"][1] == 0 and by_phase["Active"][0] > 0


def test_a_telemetry_without_a_run_adds_no_run_to_the_resource() -> None:
    with RunTelemetry("memory", batch=False) as telemetry:
        assert sc.ATTR_RUN_ID not in telemetry.providers.gate.resource.attributes
    with RunTelemetry("memory", batch=False, run_id="r", scenario="s") as telemetry:
        for provider in (telemetry.providers.client, telemetry.providers.gate, telemetry.providers.engine):
            assert provider.resource.attributes[sc.ATTR_RUN_ID] == "r"
            assert provider.resource.attributes[sc.ATTR_SCENARIO] == "s"


def test_a_sped_up_live_runs_own_providers_keep_the_run() -> None:
    from restorelens.experiments.protocol_time import ProtocolTimeline

    with RunTelemetry("memory", batch=False, run_id="r", scenario="s") as telemetry:
        with ProtocolTimeline(telemetry.providers, time_scale=10) as timeline:
            assert timeline.providers.gate is not telemetry.providers.gate  # its own, on the protocol timeline
            for provider in (timeline.providers.client, timeline.providers.gate, timeline.providers.engine):
                assert provider.resource.attributes[sc.ATTR_RUN_ID] == "r"
                assert provider.resource.attributes[sc.ATTR_SCENARIO] == "s"
