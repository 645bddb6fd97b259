"""The engine core's lifecycle (cold start, sleep, wake-up), rejections, aborts and determinism."""

from __future__ import annotations

import pytest

from restorelens.sim import (
    EngineConfig,
    EngineCore,
    EngineNotReadyError,
    EngineStateEvent,
    FinishedEvent,
    RequestRejectedError,
    SimRequest,
)

CONFIG = EngineConfig(
    weight_bytes=2_000_000_000,
    host_to_device_bytes_per_s=1e9,
    wake_fixed_s=0.5,
    level2_reload_s=7.0,
    kv_cache_realloc_s=0.25,
    cold_start_s=30.0,
)
#: The option for gateways that want to see the sleep; holding requests is tested in test_core_hold.py.
REFUSE = CONFIG.replace(asleep_requests="refuse")


def drain(core: EngineCore, until_s: float | None = None) -> list[object]:
    events: list[object] = []
    for _ in range(10_000):
        t = core.next_event_s()
        if t is None or (until_s is not None and t > until_s):
            return events
        events.extend(core.advance_to(t))
    raise AssertionError("the core did not become idle")


def test_refuse_option_refuses_requests_until_the_modelled_wake_time() -> None:
    core = EngineCore(REFUSE)
    asleep_at = core.sleep(1, 10.0)
    assert asleep_at == pytest.approx(10.0 + 2.0)  # 2 GB offloaded at 1 GB/s
    assert core.is_sleeping and core.host_ram_bytes == 2_000_000_000 and core.device_weight_bytes == 0
    assert [e for e in drain(core) if isinstance(e, EngineStateEvent)] == [EngineStateEvent("asleep", 12.0)]
    with pytest.raises(EngineNotReadyError) as caught:
        core.add_request(SimRequest("early", 10, 2), 13.0)
    assert caught.value.state == "asleep" and "wake_up" in str(caught.value)

    ready_at = core.wake_up(20.0)
    assert ready_at == pytest.approx(20.0 + 0.5 + 2.0 + 0.25)  # fixed + 2 GB at 1 GB/s + KV
    assert not core.is_ready(ready_at - 0.01) and core.is_ready(ready_at)
    with pytest.raises(EngineNotReadyError):
        core.add_request(SimRequest("during-wake", 10, 2), ready_at - 0.01)
    core.add_request(SimRequest("served", 10, 2), ready_at)
    events = drain(core)
    assert events[0] == EngineStateEvent("ready", ready_at)
    record = next(e.record for e in events if isinstance(e, FinishedEvent))
    assert record.scheduled_s == pytest.approx(ready_at) and record.queue_time_s == 0.0
    assert not core.is_sleeping and core.host_ram_bytes == 0


def test_level_2_discards_weights_and_reloads_them_from_disk() -> None:
    core = EngineCore(CONFIG)
    assert core.sleep(2, 0.0) == 0.0
    drain(core)
    assert core.host_ram_bytes == 0 and core.weights_state == "discarded"
    assert core.wake_up(1.0) == pytest.approx(1.0 + 0.5 + 7.0 + 0.25)


def test_wake_up_by_tags_stays_asleep_until_every_tag_is_restored() -> None:
    core = EngineCore(CONFIG)
    core.sleep(1, 0.0)
    drain(core)
    weights_at = core.wake_up(5.0, tags=["weights"])
    assert weights_at == pytest.approx(5.0 + 2.5)
    assert core.ready_at_s() is None
    drain(core)
    assert core.is_sleeping and core.weights_state == "resident" and core.kv_cache_state == "discarded"
    kv_at = core.wake_up(10.0, tags=["kv_cache"])
    assert kv_at == pytest.approx(10.25)
    assert [e for e in drain(core) if isinstance(e, EngineStateEvent)] == [EngineStateEvent("ready", kv_at)]
    with pytest.raises(ValueError, match="tag"):
        core.wake_up(11.0, tags=["everything"])


def test_sleep_abort_ends_in_flight_requests() -> None:
    core = EngineCore(CONFIG)
    core.add_request(SimRequest("a", 10, 50), 0.0)
    core.add_request(SimRequest("b", 10, 50), 0.0)
    drain(core, until_s=0.02)
    core.sleep(1, 0.02, mode="abort")
    finished = [e.record for e in core.advance_to(0.02) if isinstance(e, FinishedEvent)]
    assert sorted(r.finish_reason for r in finished) == ["abort", "abort"]
    assert core.num_running == core.num_waiting == 0 and core.kv_cache_usage == 0.0


def test_sleep_wait_drains_then_sleeps() -> None:
    core = EngineCore(REFUSE)
    core.add_request(SimRequest("a", 10, 5), 0.0)
    assert core.sleep(1, 0.001, mode="wait") is None
    assert core.state == "draining" and not core.is_sleeping
    with pytest.raises(EngineNotReadyError):
        core.add_request(SimRequest("late", 10, 5), 0.002)
    events = drain(core)
    record = next(e.record for e in events if isinstance(e, FinishedEvent))
    assert record.finish_reason == "length"
    assert events[-1] == EngineStateEvent("asleep", pytest.approx(record.finished_s + 2.0))


def test_cold_start_is_not_ready_until_its_load_time() -> None:
    core = EngineCore(CONFIG)
    ready_at = core.cold_start(100.0)
    assert ready_at == 130.0 and core.state == "loading" and not core.is_ready(129.9)
    with pytest.raises(EngineNotReadyError, match="loading"):
        core.add_request(SimRequest("a", 10, 2), 129.0)
    assert core.advance_to(130.0) == [EngineStateEvent("ready", 130.0)]
    core.add_request(SimRequest("a", 10, 2), 130.0)


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        (SimRequest("a", 1000, 100), "max_tokens"),
        (SimRequest("a", 0, 1), "prompt"),
        (SimRequest("a", 10, 0), "max_tokens"),
        (SimRequest("a", 10, 1, priority=3), "priority"),
    ],
)
def test_requests_that_can_never_be_served_are_rejected(request_: SimRequest, param: str) -> None:
    with pytest.raises(RequestRejectedError) as caught:
        EngineCore(CONFIG).add_request(request_, 0.0)
    assert caught.value.param == param


def test_too_long_names_max_model_len() -> None:
    with pytest.raises(RequestRejectedError, match="maximum context length is 1024 tokens"):
        EngineCore(CONFIG).add_request(SimRequest("a", 1000, 100), 0.0)


def test_abort_returns_the_record_and_frees_blocks() -> None:
    core = EngineCore(CONFIG)
    core.add_request(SimRequest("a", 100, 50), 0.0)
    core.advance_to(0.0)
    assert core.kv_cache_usage > 0
    event = core.abort("a", 0.001)
    assert event is not None and event.record.finish_reason == "abort"
    assert core.abort("a", 0.002) is None
    assert core.kv_cache_usage == 0.0 and not core.is_in_flight("a")


def test_the_same_seed_gives_the_same_events_and_jitter_depends_on_it() -> None:
    config = CONFIG.replace(step_jitter_frac=0.2)

    def finish_times(seed: int) -> list[float]:
        core = EngineCore(config, seed=seed)
        for i in range(6):
            core.add_request(SimRequest(f"r{i}", 50 + i, 8), i * 0.003)
        return [e.at_s for e in drain(core) if isinstance(e, FinishedEvent)]

    assert finish_times(1) == finish_times(1)
    assert finish_times(1) != finish_times(2)


def test_time_never_runs_backwards() -> None:
    core = EngineCore(CONFIG)
    core.add_request(SimRequest("a", 10, 2), 5.0)
    core.advance_to(4.0)  # a late clock reading is clamped, not replayed
    assert core.now_s == 5.0
