"""Lending episodes from hand-built gate traces: every metric exact, edge cases kept and marked."""

from __future__ import annotations

import polars as pl
from builders import Traces

from restorelens.analysis import Analysis


def returning_request(traces: Traces, *, t0: float, grant: float, engine_arrival: float, queue: float,
                      ttft: float, upstream: float | None = None, slot: str = "own") -> tuple[str, str]:
    """A protected request that reaches the gate at t0; returns (trace id, gate.request span id)."""
    trace = traces.new_trace()
    client = traces.client_request(trace, t0 - 0.0625, t0 + 20, first_chunk_s=engine_arrival + ttft + 0.125)
    attempt = traces.attempt(trace, client, t0 - 0.0625, t0 + 20, status=200)
    gate = traces.served_via_gate(trace, attempt, t0, t0 + 19, upstream_s=upstream if upstream is not None else grant,
                                  engine_arrival_s=engine_arrival, time_in_queue_s=queue, ttft_s=ttft,
                                  e2e_s=ttft + 2, grant_s=grant, slot=slot)
    return trace, gate


def one(frame: pl.DataFrame) -> dict:
    assert frame.height == 1, frame
    return frame.row(0, named=True)


def test_a_full_episode_separates_grant_drain_engine_and_first_token() -> None:
    traces = Traces()
    link = returning_request(traces, t0=60.0, grant=61.0, engine_arrival=61.125, queue=3.5, ttft=3.75)
    traces.gate_restore(60.0, 64.5, link=link, borrowed_at_return=2, grant_restored_s=61.0, drained_s=64.5)

    episode = one(Analysis(traces.store()).lending_episodes())

    assert episode["grant_restore_s"] == 1.0
    assert episode["drain_s"] == 4.5
    # engine scheduled at 61.125 + 3.5 = 64.625, grant restored at 61.0
    assert episode["engine_schedule_s"] == 3.625
    # first token at 61.125 + 3.75 = 64.875
    assert episode["ttft_s"] == 4.875
    assert episode["borrowed_at_return"] == 2
    assert episode["returning_span_id"] == link[1]
    assert episode["returning_trace_id"] == link[0]
    assert episode["policy"] == "lend"
    assert (episode["censored"], episode["served_before_grant"], episode["clock_skew"]) == (False, False, False)
    assert episode["negative_gaps"] == []


def test_no_borrowed_work_at_return_drains_at_t0() -> None:
    traces = Traces()
    link = returning_request(traces, t0=10.0, grant=10.25, engine_arrival=10.5, queue=0.25, ttft=0.5)
    traces.gate_restore(10.0, 10.25, link=link, borrowed_at_return=0, grant_restored_s=10.25)

    episode = one(Analysis(traces.store()).lending_episodes())

    assert episode["drain_s"] == 0.0
    assert episode["grant_restore_s"] == 0.25
    assert episode["engine_schedule_s"] == 0.5
    assert episode["censored"] is False


def test_a_request_served_before_its_grant_came_back_is_negative_and_marked_not_skew() -> None:
    traces = Traces()
    # admitted at once on the never-lent slot; the grant for protected demand came back later
    link = returning_request(traces, t0=30.0, grant=30.0, engine_arrival=30.125, queue=0.125, ttft=0.25)
    traces.gate_restore(30.0, 33.0, link=link, borrowed_at_return=1, grant_restored_s=32.0, drained_s=33.0)

    episode = one(Analysis(traces.store()).lending_episodes())

    # engine scheduled at 30.25, grant restored at 32.0
    assert episode["engine_schedule_s"] == -1.75
    assert episode["served_before_grant"] is True
    assert episode["clock_skew"] is False
    assert episode["negative_gaps"] == []


def test_an_episode_that_never_restores_is_kept_and_censored() -> None:
    traces = Traces()
    link = returning_request(traces, t0=5.0, grant=9.0, engine_arrival=9.0, queue=0.0, ttft=0.5)
    traces.gate_restore(5.0, 8.0, link=link, borrowed_at_return=3)
    traces.gate_restore(20.0, 21.0, link=None, borrowed_at_return=1, grant_restored_s=20.5)

    episodes = Analysis(traces.store()).lending_episodes()

    assert episodes.height == 2
    first, second = episodes.rows(named=True)
    assert first["censored"] is True
    assert first["censored_reason"] == "grant_not_restored"
    assert first["grant_restore_s"] is None and first["drain_s"] is None and first["engine_schedule_s"] is None
    assert first["ttft_s"] == 4.5
    assert second["censored_reason"] == "not_drained"
    assert second["grant_restore_s"] == 0.5
    assert second["returning_request_id"] is None and second["ttft_s"] is None


def test_an_engine_clock_behind_the_gate_is_flagged_not_hidden() -> None:
    traces = Traces()
    # the engine's clock runs 2 s behind: its span "arrives" before the gate's upstream call started
    link = returning_request(traces, t0=50.0, grant=50.5, upstream=50.5, engine_arrival=48.75, queue=0.5, ttft=1.0)
    traces.gate_restore(50.0, 51.0, link=link, borrowed_at_return=1, grant_restored_s=50.5, drained_s=51.0)

    episode = one(Analysis(traces.store()).lending_episodes())

    assert episode["engine_schedule_s"] == -1.25
    assert episode["ttft_s"] == -0.25
    assert episode["clock_skew"] is True
    assert episode["negative_gaps"] == ["engine_before_t0", "ttft_s"]
