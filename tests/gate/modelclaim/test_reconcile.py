"""The per-tick decisions: who goes first when room frees, and an idle sleep refused for host RAM."""

from __future__ import annotations

from restorelens.gate.modelclaim.actions import SleepEngine, StartEngine
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.virtual import VirtualLifecycle

GIB = 2**30
T0 = 2_000.0


def virtual(core: ModelClaimCore) -> VirtualLifecycle:
    life = VirtualLifecycle(core, InProcessBackend(lambda model, pod: FixedLatencyEngine(30.0, 4.0, 0.5)))
    life.start(T0)
    return life


def test_when_room_frees_the_oldest_wanted_wake_is_placed_before_claims_declared_earlier() -> None:
    claims = [ClaimSpec(m, 12 * GIB, 4 * GIB) for m in ("a", "b", "c")]  # one fits on the GPU at a time
    policy = PoolPolicy(sleep_after_s=60, no_wake_reserve_while_asleep=True, sleep_to_make_room_after_s=30)
    life = virtual(ModelClaimCore([Pod("p1", (24 * GIB,))], claims, policy))
    assert [a.model for _, a in life.performed] == ["a"]
    assert life.route("c", T0 + 40).reason == "NotPlaced"
    assert life.route("b", T0 + 50).reason == "NotPlaced"
    life.advance_to(T0 + 91)  # a idle-slept at 90, done at 90.5: its GPU memory is free
    assert life.performed[-2:] == [(T0 + 90, SleepEngine("a", 1, "p1", 1)), (T0 + 90.5, StartEngine("c", 2, "p1", (0,)))]
    assert (life.core.status("b").reason, life.core.status("c").reason) == ("NotPlaced", "EngineStarting")


def test_an_idle_sleep_refused_for_host_ram_is_not_retried_until_the_engine_is_used_again() -> None:
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=3 * GIB)],
                          PoolPolicy(sleep_after_s=60), host_ram_limit_bytes={"p1": 2 * GIB})
    life = virtual(core)
    life.advance_to(T0 + 500)
    assert (core.host_ram_refusals, core.status("m").phase) == (1, "Active")  # refused at 90, once
    assert core.next_deadline_s() is None
    life.request_started("m", T0 + 500)
    life.request_finished("m", T0 + 501)
    assert core.next_deadline_s() == T0 + 561
    life.advance_to(T0 + 561)
    assert core.host_ram_refusals == 2
    assert not any(isinstance(a, SleepEngine) for _, a in life.performed)
