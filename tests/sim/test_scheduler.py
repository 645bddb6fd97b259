"""Scheduling behaviour of the engine core, with every expected time computed from the latency model."""

from __future__ import annotations

import pytest

from restorelens.sim import EngineConfig, EngineCore, FinishedEvent, FirstTokenEvent, RequestRecord, SimRequest

# Round numbers so expected times are easy to follow; no per-context decode cost unless a test sets it.
BASE = EngineConfig(
    max_num_seqs=2,
    num_blocks=64,
    block_size=4,
    max_model_len=64,
    max_num_batched_tokens=256,
    step_overhead_s=0.010,
    prefill_s_per_token=0.001,
    decode_s_per_seq=0.002,
    decode_s_per_kv_token=0.0,
)


def run(core: EngineCore, arrivals: list[tuple[float, SimRequest]]) -> dict[str, RequestRecord]:
    """Drive the core like a discrete-event loop: arrivals in time order, then steps until idle."""
    records: dict[str, RequestRecord] = {}
    pending = sorted(arrivals, key=lambda a: a[0])
    for _ in range(10_000):
        next_core = core.next_event_s()
        if pending and (next_core is None or pending[0][0] <= next_core):
            t, request = pending.pop(0)
            core.add_request(request, t)
            continue
        if next_core is None:
            break
        for event in core.advance_to(next_core):
            if isinstance(event, FinishedEvent):
                records[event.record.request_id] = event.record
    else:
        raise AssertionError("the core did not become idle")
    return records


def step(config: EngineConfig, *, prefill: int = 0, decode: int = 0, context: int = 0) -> float:
    return config.step_time_s(prefill_tokens=prefill, decode_seqs=decode, decode_context_tokens=context)


def test_no_queue_time_while_seats_and_blocks_are_free() -> None:
    records = run(EngineCore(BASE), [(0.0, SimRequest("a", 10, 3)), (0.0, SimRequest("b", 10, 3))])
    for record in records.values():
        assert record.queue_time_s == 0.0
        assert record.ttft_s == pytest.approx(step(BASE, prefill=20))
        assert record.e2e_s == pytest.approx(step(BASE, prefill=20) + 2 * step(BASE, decode=2))
        assert record.completion_tokens == 3 and record.finish_reason == "length"


def test_queue_time_appears_exactly_when_max_num_seqs_is_reached() -> None:
    arrivals = [(0.0, SimRequest(name, 10, 3)) for name in "abc"]
    records = run(EngineCore(BASE), arrivals)
    first_two_done = step(BASE, prefill=20) + 2 * step(BASE, decode=2)
    assert records["a"].queue_time_s == records["b"].queue_time_s == 0.0
    assert records["c"].queue_time_s == pytest.approx(first_two_done)
    assert records["c"].scheduled_s == pytest.approx(records["a"].finished_s)
    # One more seat and nobody waits.
    roomy = run(EngineCore(BASE.replace(max_num_seqs=3)), arrivals)
    assert [r.queue_time_s for r in roomy.values()] == [0.0, 0.0, 0.0]


def test_queue_time_appears_exactly_when_kv_blocks_run_out() -> None:
    # 7-token prompts need 2 blocks of 4 and never grow past 8 tokens with max_tokens=2.
    config = BASE.replace(max_num_seqs=8, num_blocks=16, max_model_len=16)
    arrivals = [(0.0, SimRequest(name, 7, 2)) for name in "abc"]
    starved = run(EngineCore(config.replace(num_blocks=5)), arrivals)
    assert starved["a"].queue_time_s == starved["b"].queue_time_s == 0.0
    assert starved["c"].queue_time_s == pytest.approx(step(config, prefill=14) + step(config, decode=2, context=14))
    enough = run(EngineCore(config.replace(num_blocks=6)), arrivals)
    assert [r.queue_time_s for r in enough.values()] == [0.0, 0.0, 0.0]


def test_a_long_context_prompt_blocks_short_ones_behind_it() -> None:
    config = BASE.replace(max_num_seqs=4, num_blocks=12, max_model_len=48)
    arrivals = [
        (0.0, SimRequest("resident", 24, 4)),  # holds 6-7 blocks while it decodes
        (0.001, SimRequest("long", 30, 2)),  # needs 8 blocks: must wait for "resident"
        (0.002, SimRequest("short", 4, 2)),  # needs 1 block, which is free, but queues behind "long"
    ]
    records = run(EngineCore(config), arrivals)
    assert records["long"].scheduled_s == pytest.approx(records["resident"].finished_s)
    assert records["short"].scheduled_s == pytest.approx(records["resident"].finished_s)
    assert records["short"].queue_time_s > 0.05
    # Without the long prompt ahead of it the short one starts at the next step boundary.
    alone = run(EngineCore(config), [arrivals[0], arrivals[2]])
    assert alone["short"].scheduled_s == pytest.approx(alone["resident"].first_token_s)


def test_priority_policy_serves_lower_priority_values_first() -> None:
    config = BASE.replace(max_num_seqs=1, scheduling_policy="priority")
    arrivals = [
        (0.0, SimRequest("running", 10, 2, priority=5)),
        (0.001, SimRequest("batch", 10, 2, priority=10)),
        (0.002, SimRequest("interactive", 10, 2, priority=0)),
    ]
    records = run(EngineCore(config), arrivals)
    assert records["interactive"].scheduled_s == pytest.approx(records["running"].finished_s)
    assert records["batch"].scheduled_s == pytest.approx(records["interactive"].finished_s)
    fcfs = run(EngineCore(config.replace(scheduling_policy="fcfs")), [(t, SimRequest(r.request_id, 10, 2)) for t, r in arrivals])
    assert fcfs["batch"].scheduled_s < fcfs["interactive"].scheduled_s


def test_running_requests_are_preempted_and_recomputed_when_blocks_run_out() -> None:
    # Two 8-token prompts fill 4 of 5 blocks; both need a 3rd block at their first decode.
    config = BASE.replace(max_num_seqs=4, num_blocks=5, max_model_len=20)
    core = EngineCore(config)
    records = run(core, [(0.0, SimRequest("a", 8, 3)), (0.0, SimRequest("b", 8, 3))])
    assert records["a"].num_preemptions == 0
    assert records["b"].num_preemptions == 1  # FCFS preempts the last running request
    assert core.num_preemptions_total == 1
    assert records["b"].completion_tokens == 3
    # b's first token came from the first prefill; it then finished after a's three tokens.
    assert records["b"].first_token_s == records["a"].first_token_s
    assert records["b"].finished_s > records["a"].finished_s
    assert core.num_free_blocks == config.num_blocks


def test_priority_preempts_the_lowest_priority_running_request_even_one_this_step_already_planned() -> None:
    # 5 blocks of 4. Batch b (8 tokens, 2 blocks) runs first; interactive i (8 tokens) joins it a
    # step later, after b in the running list. b's first decode takes the 3rd block it needs; i's
    # first decode then finds none free. vLLM preempts the lowest-priority running request, b,
    # though the step had planned it already (it is taken out of the step), not i itself.
    config = BASE.replace(max_num_seqs=4, num_blocks=5, max_model_len=20, scheduling_policy="priority")
    records = run(EngineCore(config), [(0.0, SimRequest("b", 8, 3, priority=10)),
                                       (0.001, SimRequest("i", 8, 3, priority=0))])
    assert records["i"].num_preemptions == 0
    assert records["b"].num_preemptions == 1
    assert records["i"].finished_s < records["b"].finished_s


def test_long_prefills_are_chunked_by_the_token_budget() -> None:
    config = BASE.replace(max_num_batched_tokens=16, max_num_seqs=1)
    records = run(EngineCore(config), [(0.0, SimRequest("long", 40, 1))])
    # 40 prompt tokens in chunks of 16, 16, 8: three steps before the first token.
    expected = step(config, prefill=16) * 2 + step(config, prefill=8)
    assert records["long"].ttft_s == pytest.approx(expected)


def test_first_token_events_come_before_finish() -> None:
    core = EngineCore(BASE)
    core.add_request(SimRequest("a", 10, 2), 0.0)
    events = []
    while (t := core.next_event_s()) is not None:
        events.extend(core.advance_to(t))
    assert [type(e) for e in events] == [FirstTokenEvent, FinishedEvent]
    assert events[0].at_s == pytest.approx(step(BASE, prefill=10))


def test_gauges_follow_the_queue_and_the_kv_cache() -> None:
    core = EngineCore(BASE.replace(max_num_seqs=1))
    core.add_request(SimRequest("a", 8, 2), 0.0)
    core.add_request(SimRequest("b", 8, 2), 0.0)
    core.advance_to(0.0)
    assert (core.num_running, core.num_waiting) == (1, 1)
    assert core.kv_cache_usage == pytest.approx(2 / 64)
