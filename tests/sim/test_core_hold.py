"""Requests that arrive while the engine sleeps wait, and are scheduled after the wake, as vLLM's are."""

from __future__ import annotations

import pytest

from restorelens.errors import SettingError
from restorelens.sim import EngineConfig, EngineCore, EngineNotReadyError, EngineStateEvent, FinishedEvent, SimRequest

CONFIG = EngineConfig(
    weight_bytes=2_000_000_000,
    host_to_device_bytes_per_s=1e9,
    wake_fixed_s=0.5,
    level2_reload_s=7.0,
    kv_cache_realloc_s=0.25,
    cold_start_s=30.0,
)


def drain(core: EngineCore) -> list[object]:
    events: list[object] = []
    for _ in range(10_000):
        t = core.next_event_s()
        if t is None:
            return events
        events.extend(core.advance_to(t))
    raise AssertionError("the core did not become idle")


def records(events: list[object]) -> dict[str, object]:
    return {e.record.request_id: e.record for e in events if isinstance(e, FinishedEvent)}


def asleep_core(config: EngineConfig = CONFIG, level: int = 1) -> EngineCore:
    core = EngineCore(config)
    core.sleep(level, 0.0)
    drain(core)
    assert core.state == "asleep"
    return core


def test_a_request_arriving_asleep_waits_and_is_scheduled_when_the_wake_ends() -> None:
    core = asleep_core()
    core.add_request(SimRequest("held", 10, 2), 5.0)
    assert core.num_waiting == 1 and core.num_running == 0
    assert core.next_event_s() is None  # nothing to do until someone wakes the engine
    ready_at = core.wake_up(20.0)
    assert ready_at == pytest.approx(20.0 + 0.5 + 2.0 + 0.25)  # fixed + 2 GB at 1 GB/s + KV
    assert core.num_waiting == 1
    record = records(drain(core))["held"]
    assert record.arrival_s == 5.0 and record.finish_reason == "length"
    assert record.scheduled_s == pytest.approx(ready_at)
    assert record.queue_time_s == pytest.approx(ready_at - 5.0)


def test_level_2_wake_takes_the_disk_reload_before_held_requests_run() -> None:
    core = asleep_core(level=2)
    core.add_request(SimRequest("held", 10, 2), 1.0)
    ready_at = core.wake_up(2.0)
    assert ready_at == pytest.approx(2.0 + 0.5 + 7.0 + 0.25)
    assert records(drain(core))["held"].scheduled_s == pytest.approx(ready_at)


def test_a_partial_wake_keeps_holding_until_every_tag_is_restored() -> None:
    core = asleep_core()
    core.wake_up(1.0, tags=["weights"])
    core.add_request(SimRequest("during-wake", 10, 2), 1.5)
    drain(core)
    assert core.is_sleeping and core.num_waiting == 1 and core.num_running == 0
    kv_at = core.wake_up(10.0, tags=["kv_cache"])
    assert records(drain(core))["during-wake"].scheduled_s == pytest.approx(kv_at)


def test_held_requests_are_scheduled_in_priority_order_after_the_wake() -> None:
    config = CONFIG.replace(scheduling_policy="priority", max_num_seqs=1)
    core = asleep_core(config)
    core.add_request(SimRequest("low-first", 10, 2, priority=5), 1.0)
    core.add_request(SimRequest("high-later", 10, 2, priority=0), 2.0)
    core.add_request(SimRequest("low-later", 10, 2, priority=5), 3.0)
    core.wake_up(4.0)
    done = records(drain(core))
    order = sorted(done, key=lambda rid: done[rid].scheduled_s)
    assert order == ["high-later", "low-first", "low-later"]


def test_fcfs_after_the_wake_keeps_arrival_order() -> None:
    core = asleep_core(CONFIG.replace(max_num_seqs=1))
    for index, t in enumerate((1.0, 2.0, 3.0)):
        core.add_request(SimRequest(f"r{index}", 10, 2), t)
    core.wake_up(4.0)
    done = records(drain(core))
    assert sorted(done, key=lambda rid: done[rid].scheduled_s) == ["r0", "r1", "r2"]


def test_sleep_abort_aborts_what_is_in_flight_and_holds_what_arrives_after() -> None:
    core = EngineCore(CONFIG)
    core.add_request(SimRequest("running", 10, 50), 0.0)
    core.advance_to(0.0)
    core.sleep(1, 0.01, mode="abort")
    core.add_request(SimRequest("after", 10, 2), 0.02)  # falling asleep: held
    aborted = records(core.advance_to(0.02))
    assert aborted["running"].finish_reason == "abort" and "after" not in aborted
    drain(core)
    assert core.state == "asleep" and core.num_waiting == 1
    ready_at = core.wake_up(5.0)
    assert records(drain(core))["after"].scheduled_s == pytest.approx(ready_at)


def test_a_second_abort_sleep_aborts_held_requests_too() -> None:
    core = asleep_core()
    core.add_request(SimRequest("held", 10, 2), 1.0)
    core.sleep(2, 2.0, mode="abort")
    assert records(core.advance_to(2.0))["held"].finish_reason == "abort"
    assert core.num_waiting == 0


def test_requests_arriving_while_draining_wait_until_after_the_wake() -> None:
    core = EngineCore(CONFIG)
    core.add_request(SimRequest("in-flight", 10, 5), 0.0)
    assert core.sleep(1, 0.001, mode="wait") is None
    core.add_request(SimRequest("late", 10, 5), 0.002)
    events = drain(core)
    done = records(events)
    assert set(done) == {"in-flight"}  # the drain finishes what it had, not what came after
    assert events[-1] == EngineStateEvent("asleep", pytest.approx(done["in-flight"].finished_s + 2.0))
    assert core.num_waiting == 1
    ready_at = core.wake_up(10.0)
    assert records(drain(core))["late"].scheduled_s == pytest.approx(ready_at)


def test_a_client_abort_of_a_held_request_removes_it() -> None:
    core = asleep_core()
    core.add_request(SimRequest("held", 10, 2), 1.0)
    finished = core.abort("held", 2.0)
    assert finished is not None and finished.record.finish_reason == "abort" and finished.record.scheduled_s is None
    assert core.num_waiting == 0
    core.wake_up(3.0)
    assert records(drain(core)) == {}


def test_a_cold_start_still_refuses_and_aborts_held_requests() -> None:
    core = asleep_core()
    core.add_request(SimRequest("held", 10, 2), 1.0)
    core.cold_start(2.0)
    assert records(core.advance_to(2.0))["held"].finish_reason == "abort"
    with pytest.raises(EngineNotReadyError, match="loading"):
        core.add_request(SimRequest("loading", 10, 2), 3.0)


def test_an_unknown_asleep_requests_mode_names_the_setting() -> None:
    with pytest.raises(SettingError, match="asleep_requests"):
        CONFIG.replace(asleep_requests="queue")
