"""One episode in detail on the realistic store: its events as offsets from t0, the slots held
around it, and the window its charts span."""

from __future__ import annotations

import polars as pl
import pytest

from restorelens.analysis import Analysis
from restorelens.dashboard.episodes import (LENDING_EVENTS, episode_window, lending_detail, lending_events,
                                            occupancy_steps, wake_detail)


def test_lending_events_are_offsets_from_demand_return(analysis: Analysis) -> None:
    episode = analysis.lending_episodes().row(0, named=True)
    events = lending_events(episode)
    offsets = dict(events.select("event", "offset_s").rows())
    assert set(offsets) == set(LENDING_EVENTS)
    assert offsets["demand returned"] == 0.0
    assert offsets["borrowed drained"] == pytest.approx(episode["drain_s"])
    assert offsets["engine scheduled"] == pytest.approx(episode["grant_restore_s"] + episode["engine_schedule_s"])
    assert offsets["first token"] == pytest.approx(episode["ttft_s"])


def test_occupancy_steps_count_slots_held_between_grant_and_end() -> None:
    t0 = 1_000_000_000_000
    gates = pl.DataFrame({
        "grant_ns": [t0 - 2_000_000_000, t0 - 1_000_000_000, t0 + 500_000_000, None],
        "end_ns": [t0 + 1_000_000_000, t0 + 3_000_000_000, t0 + 2_000_000_000, t0],
        "slot": ["borrowed", "own", "own", None],
    })
    steps = occupancy_steps(gates, t0, -1.5, 4.0)
    assert steps.rows() == [(-1.5, 0, 1), (-1.0, 1, 1), (0.5, 2, 1), (1.0, 2, 0), (2.0, 1, 0), (3.0, 0, 0),
                            (4.0, 0, 0)]


def test_lending_detail_uses_the_episodes_own_run(analysis: Analysis) -> None:
    episode = analysis.lending_episodes().row(0, named=True)
    detail = lending_detail(episode, analysis.view("gate_requests"))
    assert detail.occupancy["offset_s"][0] == -5.0
    assert detail.occupancy["borrowed"].max() >= 1  # the episode starts with capacity lent


def test_wake_events_show_every_retry_with_its_status(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    cold = wakes.filter(pl.col("wake_path") == "cold-start").row(0, named=True)
    typed = analysis.view("typed_model_wakes").filter(pl.col("span_id") == cold["span_id"]).row(0, named=True)
    attempts = analysis.attempts().filter(pl.col("trace_id") == cold["request_trace_id"])
    detail = wake_detail(cold, typed, attempts)
    offsets = dict(detail.events.select("event", "offset_s").rows())
    assert offsets["first 503"] == 0.0
    assert offsets["Retry-After elapses"] == 10.0
    assert offsets["wake start"] == 0.0625
    assert offsets["engine ready"] == 31.25
    assert offsets["readiness observed"] == 31.5
    assert offsets["retry 1 → 503"] == 10.25
    assert offsets["retry 2 → 503"] == 20.5
    assert offsets["success 200"] == 31.75
    assert offsets["first token"] == cold["total_s"]
    assert detail.overshoot == (31.25, 31.75)


def test_the_episode_window_runs_from_before_t0_to_after_the_last_event(analysis: Analysis) -> None:
    episode = analysis.lending_episodes().row(0, named=True)
    events = lending_events(episode)
    assert episode_window(events) == (-5.0, float(events["offset_s"].max()) + 5.0)
