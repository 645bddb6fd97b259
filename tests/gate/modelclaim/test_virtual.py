"""The virtual-time driver: the simulator's own EngineCore as the in-process engine, and an operator's control calls."""

from __future__ import annotations

import pytest

from restorelens.gate.modelclaim.actions import SleepEngine, StartEngine, WakeEngine
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import RESTART_BACKOFF_S, ClaimControlError, ModelClaimCore
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.virtual import VirtualLifecycle
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


def fixed_latency_lifecycle(*, restart_backoff_s: tuple[float, ...] = RESTART_BACKOFF_S) -> VirtualLifecycle:
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB)],
                          PoolPolicy(sleep_after_s=600), restart_backoff_s=restart_backoff_s)
    life = VirtualLifecycle(core, InProcessBackend(lambda model, pod: FixedLatencyEngine(30.0, 4.0, 0.5)))
    life.start(T0)
    return life


def test_operator_sleeps_and_wakes_a_model_through_the_public_control_calls() -> None:
    life = fixed_latency_lifecycle()
    life.sleep("m", T0 + 40)  # the engine was ready at T0+30: an operator sleeps it long before the idle timer
    assert life.performed[-1] == (T0 + 40, SleepEngine("m", 1, "p1", 1))
    assert (life.core.status("m").phase, life.core.ledger.host_bytes("p1")) == ("Sleeping", GIB)
    life.wake("m", T0 + 50)  # the sleep finished at T0+40.5 on the way
    assert life.performed[-1] == (T0 + 50, WakeEngine("m", 1, "p1"))
    assert isinstance(life.route("m", T0 + 53.9), NotReady)
    assert life.route("m", T0 + 54) == Routed("inproc://m@p1")


def test_a_refused_control_call_performs_nothing() -> None:
    life = fixed_latency_lifecycle()
    life.advance_to(T0 + 30)
    life.request_started("m", T0 + 31)
    performed = list(life.performed)
    with pytest.raises(ClaimControlError, match="1 requests in flight"):
        life.sleep("m", T0 + 32)
    with pytest.raises(ClaimControlError, match="not Failed"):
        life.restart("m", T0 + 32)
    assert life.performed == performed
    assert life.core.status("m").phase == "Active"


def test_operator_restarts_a_failed_model() -> None:
    life = fixed_latency_lifecycle(restart_backoff_s=())  # no automatic restart: the first crash is final
    life.advance_to(T0 + 30)
    life.fail("m", T0 + 40)
    assert (life.core.status("m").phase, life.core.status("m").reason) == ("Failed", "EngineFailed")
    life.restart("m", T0 + 50)
    assert life.performed[-1] == (T0 + 50, StartEngine("m", 2, "p1", (0,)))
    life.advance_to(T0 + 80)
    assert life.core.status("m").phase == "Active"
