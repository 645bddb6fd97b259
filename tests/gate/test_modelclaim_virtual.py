"""The virtual-time driver with the simulator's own EngineCore as the in-process engine."""

from __future__ import annotations

from restorelens.gate.modelclaim_backends import InProcessBackend
from restorelens.gate.modelclaim_core import ModelClaimCore
from restorelens.gate.modelclaim_placement import ClaimSpec, Pod
from restorelens.gate.modelclaim_policy import PoolPolicy
from restorelens.gate.modelclaim_virtual import VirtualLifecycle
from restorelens.gate.routing import NotReady, Routed
from restorelens.sim import EngineCore, get_preset

GIB = 2**30
T0 = 10_000.0


def test_sim_engine_core_cold_starts_sleeps_and_wakes_in_virtual_time() -> None:
    config = get_preset("tiny-cpu")
    engines: list[EngineCore] = []

    def factory(model: str, pod: str) -> EngineCore:
        engines.append(EngineCore(config, now_s=T0))
        return engines[-1]

    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB)],
                          PoolPolicy(sleep_after_s=60))
    life = VirtualLifecycle(core, InProcessBackend(factory))
    life.start(T0)
    ready_s = T0 + config.cold_start_s
    assert isinstance(life.route("m", ready_s - 0.001), NotReady)
    assert isinstance(life.route("m", ready_s), Routed)
    life.advance_to(ready_s + 61)
    assert core.status("m").phase == "Sleeping"
    engines[0].advance_to(ready_s + 61)
    assert engines[0].is_sleeping
    answer = life.route("m", ready_s + 100)
    assert (answer.reason, answer.retry_after_s) == ("EngineSleeping", 10)
    assert isinstance(life.route("m", ready_s + 101), Routed)  # level-1 wake of the tiny model: well under 1 s
    assert engines[0].is_ready(ready_s + 101)
    life.advance_to(ready_s + 170)  # idle again for sleepAfterSeconds after the wake: asleep again
    assert core.status("m").phase == "Sleeping"
