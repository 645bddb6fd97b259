"""Lifecycle state intervals per model."""

from __future__ import annotations

from builders import Traces

from restorelens.analysis import Analysis


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
