"""A replayed scenario to and from JSON: how a matrix hands one to a worker process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from restorelens.experiments.replay.workload import ReplayScenario
from restorelens.loadgen import Arrival, EngineShape, Phase, RequestShape, Workload

__all__ = ["scenario_from_json", "scenario_to_json"]


def scenario_to_json(scenario: ReplayScenario) -> dict[str, Any]:
    """A replayed scenario as JSON (without its arm and budget, which each cell sets)."""
    workload = scenario.replayed
    assert workload is not None
    return {
        "name": scenario.name,
        "engine_preset": scenario.engine_preset,
        "workload": {
            "name": workload.name,
            "duration_s": workload.duration_s,
            "model": workload.model,
            "phases": [[p.name, p.start_s, p.end_s] for p in workload.phases],
            "shapes": [[c, s.prompt_chars, s.max_tokens] for c, s in workload.shapes],
            "engine": [workload.engine.max_num_seqs, workload.engine.max_model_len, workload.engine.num_gpu_blocks,
                       workload.engine.block_size],
            "slo": [workload.slo.ttft_s, workload.slo.e2e_s],
            "arrivals": [[a.at_s, a.request_id, a.traffic_class, a.phase, a.prompt_chars, a.max_tokens]
                         for a in workload.arrivals],
        },
    }


def scenario_from_json(data: Mapping[str, Any]) -> ReplayScenario:
    from restorelens.loadgen import Slo

    w = data["workload"]
    workload = Workload(
        w["name"], 0, w["duration_s"], tuple(Phase(*p) for p in w["phases"]),
        tuple((c, RequestShape(chars, tokens)) for c, chars, tokens in w["shapes"]),
        tuple(Arrival(*a) for a in w["arrivals"]), w["model"], Slo(*w["slo"]), EngineShape(*w["engine"]),
    )
    return ReplayScenario(data["name"], data["name"], engine_preset=data["engine_preset"], replayed=workload)
