"""One claim's state: what its transitions report to listeners, and the predicates the core decides on."""

from __future__ import annotations

from opentelemetry.trace import SpanContext, TraceFlags

from restorelens.gate.modelclaim.actions import StateInterval, WakeRecord
from restorelens.gate.modelclaim.claim import OP_WAKING, ClaimState, EngineInstance
from restorelens.gate.modelclaim.placement import ClaimSpec, GpuSlot

GIB = 2**30


class Recorder:
    def __init__(self) -> None:
        self.intervals: list[StateInterval] = []
        self.wakes: list[WakeRecord] = []

    def on_state_interval(self, interval: StateInterval) -> None:
        self.intervals.append(interval)

    def on_wake_finished(self, record: WakeRecord) -> None:
        self.wakes.append(record)


def context(span_id: int) -> SpanContext:
    return SpanContext(trace_id=1, span_id=span_id, is_remote=True, trace_flags=TraceFlags(1))


def placed_claim() -> ClaimState:
    claim = ClaimState(ClaimSpec("m", 10 * GIB, 4 * GIB), held_back=None)
    claim.instance = EngineInstance(7, "p1", (GpuSlot("p1", 0), GpuSlot("p1", 1)), url="http://e")
    return claim


def test_a_change_of_state_closes_the_interval_and_a_repeat_or_an_empty_one_reports_nothing() -> None:
    claim, rec = placed_claim(), Recorder()
    claim.set_state("Loading", "EngineStarting", 10.0, [rec])  # from the initial Scheduling at 0
    claim.set_state("Loading", "EngineStarting", 20.0, [rec])  # same (phase, reason, pod): still one interval
    claim.set_state("Active", "ModelClaimActive", 40.0, [rec])
    claim.set_state("Sleeping", "EngineSleeping", 40.0, [rec], pod=None)  # [40, 40) is empty
    assert rec.intervals == [
        StateInterval("m", "Scheduling", "NotPlaced", None, 0.0, 10.0),
        StateInterval("m", "Loading", "EngineStarting", "p1", 10.0, 40.0),
    ]
    assert (claim.phase, claim.pod, claim.since_s) == ("Sleeping", None, 40.0)


def test_a_wake_is_wanted_once_linked_to_its_first_trigger_and_finishes_as_one_record() -> None:
    claim, rec = placed_claim(), Recorder()
    claim.pod = "p1"
    claim.want_wake(100.0, context(1))
    claim.want_wake(101.0, context(2))
    assert claim.wake is not None and claim.wake.requested_s == 100.0
    claim.wake.neighbours += ["a", "b"]
    claim.wake.room_found_s = claim.wake.wake_called_s = 102.0
    claim.finish_wake(106.0, "ready", [rec], ready_s=105.5)
    claim.finish_wake(107.0, "failed", [rec])  # no wake in progress any more: nothing to report
    assert rec.wakes == [WakeRecord(
        model="m", path="cold-start", pod="p1", requested_s=100.0, end_s=106.0, outcome="ready",
        room_found_s=102.0, wake_called_s=102.0, ready_s=105.5, observed_s=106.0, neighbour="a,b",
        triggers=(context(1),),
    )]
    claim.want_wake(110.0, None)
    claim.finish_wake(111.0, "timed_out", [rec], error="no room")
    assert (rec.wakes[-1].observed_s, rec.wakes[-1].neighbour, rec.wakes[-1].error) == (None, None, "no room")


def test_routable_only_when_awake_alive_and_idle_of_engine_operations() -> None:
    claim = placed_claim()
    assert claim.routable
    claim.op = OP_WAKING
    assert not claim.routable
    claim.op = None
    assert claim.instance is not None
    claim.instance.crashed = True
    assert not claim.routable
    assert not ClaimState(ClaimSpec("x", GIB, GIB), held_back=None).routable


def test_out_of_service_when_held_back_or_failed() -> None:
    assert ClaimState(ClaimSpec("x", 0, GIB), held_back="InvalidPerGPU").out_of_service
    claim = placed_claim()
    assert not claim.out_of_service
    claim.phase = "Failed"
    assert claim.out_of_service


def test_reports_about_another_instance_are_stale() -> None:
    claim = placed_claim()
    assert claim.current_instance(7) is claim.instance
    assert claim.current_instance(6) is None
    claim.instance = None
    assert claim.current_instance(7) is None


def test_idle_sleep_is_due_after_the_idle_time_unless_busy_waking_or_switched_off() -> None:
    claim = placed_claim()
    claim.idle_since_s = 50.0
    assert claim.idle_sleep_at_s(60.0) == 110.0
    assert claim.idle_sleep_at_s(None) is None
    claim.inflight = 1
    assert claim.idle_sleep_at_s(60.0) is None
    claim.inflight = 0
    claim.want_wake(55.0, None)
    assert claim.idle_sleep_at_s(60.0) is None


def test_status_shows_gpu_indexes_url_and_the_wake_path_once_room_is_found() -> None:
    claim = placed_claim()
    claim.want_wake(1.0, None)
    assert claim.status().wake_path is None
    assert claim.wake is not None
    claim.wake.room_found_s = 2.0
    status = claim.status()
    assert (status.model, status.gpus, status.upstream_url, status.wake_path) == ("m", (0, 1), "http://e", "cold-start")
