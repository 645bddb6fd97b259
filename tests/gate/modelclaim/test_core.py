"""Lifecycle scenarios in virtual time: the core + in-process engines under the discrete-event loop."""

from __future__ import annotations

from restorelens.gate.modelclaim.actions import SleepEngine, StartEngine, StopEngine, WakeEngine, WakeRecord
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.placement import ClaimSpec, GpuSlot, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.virtual import VirtualLifecycle
from restorelens.gate.routing import NotReady, Routed, UnknownModel

GIB = 2**30
T0 = 1_000.0


class Recorder:
    def __init__(self) -> None:
        self.wakes: list[WakeRecord] = []
        self.intervals: list = []

    def on_state_interval(self, interval) -> None:  # noqa: ANN001
        self.intervals.append(interval)

    def on_wake_finished(self, record: WakeRecord) -> None:
        self.wakes.append(record)


def claim(model: str, *, total_gib: int = 16, weight_gib: int = 8, pods: tuple[str, ...] | None = None) -> ClaimSpec:
    return ClaimSpec(model, (total_gib - 4) * GIB, 4 * GIB, weight_bytes=weight_gib * GIB, pods=pods)


def lifecycle(pods, claims, policy, *, poll_interval_s=None, **core_options):  # noqa: ANN001, ANN003, ANN201
    recorder = Recorder()
    core = ModelClaimCore(pods, claims, policy, listeners=[recorder], **core_options)
    backend = InProcessBackend(lambda model, pod: FixedLatencyEngine(cold_start_s=30.0, wake_s=4.0, sleep_s=0.5))
    life = VirtualLifecycle(core, backend, poll_interval_s=poll_interval_s)
    life.start(T0)
    return life, recorder


def actions_of(life: VirtualLifecycle, kind: type, model: str) -> list[tuple[float, object]]:
    return [(t, a) for t, a in life.performed if isinstance(a, kind) and a.model == model]


def test_sleeping_model_with_reserve_wakes_in_place_once_with_retry_after_10() -> None:
    life, rec = lifecycle([Pod("p1", (24 * GIB,))], [claim("a")], PoolPolicy(sleep_after_s=60))
    assert life.route("a", T0 + 1) == NotReady("Loading", "EngineStarting", 10, message=life.core.answers.answer(
        "a", "Loading", "EngineStarting").message, hint_source="fixed", hint_mode="fixed")
    assert life.route("a", T0 + 30) == Routed("inproc://a@p1")
    life.advance_to(T0 + 89)
    assert life.core.status("a").phase == "Active"
    life.advance_to(T0 + 91)
    assert life.core.status("a").phase == "Sleeping"
    assert actions_of(life, SleepEngine, "a") == [(T0 + 90, SleepEngine("a", 1, "p1", 1))]
    # The reserve stays charged while asleep: nothing else could take the GPU.
    assert life.core.ledger.charged_bytes(GpuSlot("p1", 0)) == 16 * GIB
    answers = [life.route("a", T0 + 100 + i) for i in range(3)]
    assert {(x.phase, x.reason, x.retry_after_s) for x in answers} == {("Activating", "EngineSleeping", 10)}
    assert actions_of(life, WakeEngine, "a") == [(T0 + 100, WakeEngine("a", 1, "p1"))]  # deduplicated
    assert life.route("a", T0 + 104) == Routed("inproc://a@p1")
    wake = rec.wakes[-1]
    assert (wake.path, wake.requested_s, wake.wake_called_s, wake.ready_s, wake.observed_s) == (
        "in-place", T0 + 100, T0 + 100, T0 + 104, T0 + 104)


def test_a_start_is_observed_at_the_next_poll_and_a_wake_at_its_ready_time() -> None:
    # As the live sleep-API backend sees them: a loading engine by polling (every 7 s here, from
    # the start call at T0), a wake by the answer of its own /wake_up call.
    life, rec = lifecycle([Pod("p1", (24 * GIB,))], [claim("a")], PoolPolicy(sleep_after_s=60), poll_interval_s=7.0)
    assert isinstance(life.route("a", T0 + 34.9), NotReady)  # ready at 30, not yet observed
    assert isinstance(life.route("a", T0 + 35), Routed)
    life.advance_to(T0 + 200)  # idle-slept at 95
    life.route("a", T0 + 200)
    assert isinstance(life.route("a", T0 + 203.9), NotReady)
    assert isinstance(life.route("a", T0 + 204), Routed)
    assert [(w.path, w.ready_s, w.observed_s) for w in rec.wakes] == [
        ("cold-start", T0 + 30, T0 + 35), ("in-place", T0 + 204, T0 + 204)]


def two_models_one_gpu(*pods: Pod, a_pods: tuple[str, ...] = ("p1",)) -> tuple[VirtualLifecycle, Recorder]:
    policy = PoolPolicy(sleep_after_s=60, no_wake_reserve_while_asleep=True, sleep_to_make_room_after_s=30)
    life, rec = lifecycle(list(pods), [claim("a", pods=a_pods), claim("b", pods=("p1",))], policy)
    # a starts; b cannot fit beside it and waits to be placed.
    assert (life.route("b", T0 + 1).reason, life.route("b", T0 + 1).retry_after_s) == ("NotPlaced", 10)
    life.advance_to(T0 + 125)  # a ready at 30, idle-slept at 90 (done 90.5): b placed, ready at 120.5
    assert (life.core.status("a").phase, life.core.status("b").phase) == ("Sleeping", "Active")
    assert life.core.status("b").pod == "p1"
    assert life.core.ledger.charges(GpuSlot("p1", 0)) == {"a": 0, "b": 16 * GIB}
    return life, rec


def test_without_reserve_a_wake_sleeps_the_idle_neighbour_then_goes_active_retry_after_20() -> None:
    life, rec = two_models_one_gpu(Pod("p1", (24 * GIB,)))
    answer = life.route("a", T0 + 160)  # b idle since 120.5: 39.5 s >= 30 s
    assert (answer.phase, answer.reason, answer.retry_after_s) == ("Sleeping", "WaitingForRoom", 20)
    assert actions_of(life, SleepEngine, "b") == [(T0 + 160, SleepEngine("b", 2, "p1", 1))]
    life.advance_to(T0 + 160.5)
    assert actions_of(life, WakeEngine, "a") == [(T0 + 160.5, WakeEngine("a", 1, "p1"))]
    assert life.route("a", T0 + 164.5) == Routed("inproc://a@p1")
    assert life.core.status("b").phase == "Sleeping"
    wake = rec.wakes[-1]
    assert (wake.path, wake.neighbour, wake.requested_s, wake.ready_s) == ("make-room", "b", T0 + 160, T0 + 164.5)


def test_neighbour_not_idle_long_enough_makes_the_wake_wait_then_proceed() -> None:
    life, rec = two_models_one_gpu(Pod("p1", (24 * GIB,)))
    answer = life.route("a", T0 + 130)  # b idle only 9.5 s
    assert (answer.reason, answer.retry_after_s) == ("WaitingForRoom", 20)
    assert life.core.next_deadline_s() == T0 + 150.5  # b reaches 30 s idle
    life.advance_to(T0 + 151)
    assert actions_of(life, SleepEngine, "b") == [(T0 + 150.5, SleepEngine("b", 2, "p1", 1))]
    assert actions_of(life, WakeEngine, "a") == [(T0 + 151, WakeEngine("a", 1, "p1"))]


def test_wake_without_room_gives_up_after_five_minutes() -> None:
    life, rec = two_models_one_gpu(Pod("p1", (24 * GIB,)))
    life.request_started("b", T0 + 125)
    assert life.route("a", T0 + 130).reason == "WaitingForRoom"
    life.advance_to(T0 + 430)
    assert (life.core.status("a").phase, life.core.status("a").reason) == ("Sleeping", "EngineSleeping")
    assert rec.wakes[-1].outcome == "timed_out"
    assert actions_of(life, WakeEngine, "a") == []


def test_no_room_on_the_pod_moves_the_model_to_another_pod_retry_after_30() -> None:
    life, rec = two_models_one_gpu(Pod("p1", (24 * GIB,)), Pod("p2", (24 * GIB,)), a_pods=("p1", "p2"))
    life.request_started("b", T0 + 125)  # b busy: not a neighbour to sleep
    answer = life.route("a", T0 + 130)
    assert (answer.phase, answer.reason, answer.retry_after_s) == ("Loading", "Moving", 30)
    assert actions_of(life, StopEngine, "a") == [(T0 + 130, StopEngine("a", 1, "p1"))]
    assert actions_of(life, StartEngine, "a")[-1] == (T0 + 130, StartEngine("a", 3, "p2", (0,)))
    assert life.route("a", T0 + 159).reason == "Moving"
    assert life.route("a", T0 + 160) == Routed("inproc://a@p2")
    assert life.core.ledger.host_bytes("p1") == 0  # the old instance's weights left host RAM
    wake = rec.wakes[-1]
    assert (wake.path, wake.pod, wake.from_pod, wake.ready_s) == ("move", "p2", "p1", T0 + 160)


def test_idle_sleep_waits_for_requests_in_flight() -> None:
    life, _ = lifecycle([Pod("p1", (24 * GIB,))], [claim("a")], PoolPolicy(sleep_after_s=60))
    life.advance_to(T0 + 30)
    life.request_started("a", T0 + 40)
    life.advance_to(T0 + 200)
    assert life.core.status("a").phase == "Active"
    life.request_finished("a", T0 + 200)
    assert life.core.next_deadline_s() == T0 + 260
    life.advance_to(T0 + 260)
    assert life.core.status("a").phase == "Sleeping"


def test_host_ram_adds_up_per_node_and_a_limit_refuses_level_1_sleep() -> None:
    pods = [Pod("p1", (24 * GIB,), node="n1"), Pod("p2", (24 * GIB,), node="n1"), Pod("p3", (24 * GIB,), node="n2")]
    claims = [claim("a", weight_gib=8, pods=("p1",)), claim("b", weight_gib=6, pods=("p2",)),
              claim("c", weight_gib=5, pods=("p3",))]
    life, _ = lifecycle(pods, claims, PoolPolicy(sleep_after_s=60))
    life.advance_to(T0 + 100)
    ledger = life.core.ledger
    assert (ledger.host_bytes("n1"), ledger.host_bytes("n2")) == (14 * GIB, 5 * GIB)
    life.route("b", T0 + 100)
    life.advance_to(T0 + 104)
    assert (ledger.host_bytes("n1"), ledger.host_bytes("n2")) == (8 * GIB, 5 * GIB)

    limited, _ = lifecycle(pods, claims, PoolPolicy(sleep_after_s=60), host_ram_limit_bytes={"n1": 10 * GIB})
    limited.advance_to(T0 + 100)
    phases = {m: limited.core.status(m).phase for m in "abc"}
    assert phases == {"a": "Sleeping", "b": "Active", "c": "Sleeping"}
    assert limited.core.ledger.host_bytes("n1") == 8 * GIB
    assert limited.core.host_ram_refusals == 1


def test_crashes_restart_with_backoff_2_4_8_16_32_then_failed() -> None:
    life, _ = lifecycle([Pod("p1", (24 * GIB,))], [claim("a")], PoolPolicy(sleep_after_s=600))
    life.advance_to(T0 + 30)
    t = T0 + 40
    for backoff_s in (2, 4, 8, 16, 32):
        life.fail("a", t)
        assert life.core.status("a").reason == "EngineFailed"
        assert life.core.next_deadline_s() == t + backoff_s
        life.advance_to(t + backoff_s)
        t += backoff_s
        assert actions_of(life, StartEngine, "a")[-1][0] == t  # restarted exactly after the backoff
    life.fail("a", t, "exited with status 1: CUDA out of memory")
    assert len(actions_of(life, StartEngine, "a")) == 6  # the first start and five restarts
    answer = life.route("a", t + 1)
    # Failed is not retried by the lifecycle (AIBrix's controller would move it): no Retry-After,
    # and the answer says why and what would help, instead of "retry shortly".
    assert (answer.phase, answer.reason, answer.retry_after_s) == ("Failed", "EngineFailed", None)
    assert "CUDA out of memory" in answer.message and "POST /modelclaim/models/a/restart" in answer.message
    assert "retry shortly" not in answer.message
    assert life.core.ledger.charged_bytes(GpuSlot("p1", 0)) == 0
    life.restart("a", t + 2)
    assert "CUDA out of memory" not in life.route("a", t + 3).message  # a new budget, the old failure forgotten


def test_a_request_during_backoff_is_linked_to_the_restart() -> None:
    life, rec = lifecycle([Pod("p1", (24 * GIB,))], [claim("a")], PoolPolicy(sleep_after_s=600))
    life.advance_to(T0 + 30)
    life.fail("a", T0 + 40, "engine not alive")
    answer = life.route("a", T0 + 41)
    # The lifecycle restarts it by itself: retrying shortly is right, and the failure is said.
    assert (answer.phase, answer.reason, answer.retry_after_s) == ("Loading", "EngineFailed", 10)
    assert "engine not alive" in answer.message and "retry shortly" in answer.message
    life.advance_to(T0 + 72)
    assert rec.wakes[-1].path == "cold-start" and rec.wakes[-1].requested_s == T0 + 41
    assert isinstance(life.route("a", T0 + 72), Routed)


def test_held_back_claims_answer_without_retry_after_and_unknown_models_are_unknown() -> None:
    claims = [
        ClaimSpec("bad-args", 8 * GIB, 2 * GIB, engine_args={"port": "9000"}),
        ClaimSpec("bad-pergpu", 0, 2 * GIB),
        ClaimSpec("huge", 40 * GIB, 2 * GIB),
    ]
    life, _ = lifecycle([Pod("p1", (24 * GIB,))], claims, PoolPolicy(sleep_after_s=60))
    got = {m: (life.route(m, T0).phase, life.route(m, T0).reason, life.route(m, T0).retry_after_s)
           for m in life.core.models()}
    assert got == {
        "bad-args": ("Pending", "InvalidEngineConfig", None),
        "bad-pergpu": ("Pending", "InvalidPerGPU", None),
        "huge": ("Pending", "TooLargeForAnyCard", None),
    }
    assert life.route("nope", T0) == UnknownModel("nope")
    assert life.performed == []
