"""The dashboard's data layer on the realistic store: events, occupancy, limits, overview."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from dashboard_stores import MOFLUX_RUNS, WAKES

from restorelens.analysis import Analysis
from restorelens.dashboard import data
from restorelens.errors import SettingError


@pytest.fixture(scope="module")
def analysis(store_path: Path) -> Analysis:
    opened = Analysis.open(store_path)
    yield opened
    opened.close()


def test_overview_counts_every_episode_and_request(analysis: Analysis) -> None:
    result = data.overview(analysis, include_requests=True)
    counts = {row["what"]: row["count"] for row in result.counts.iter_rows(named=True)}
    assert counts["wake episodes"] == len(WAKES)
    assert counts["lending episodes"] == analysis.lending_episodes().height > 0
    assert counts["requests"] == analysis.requests().height
    assert set(result.lending_stats["metric"]) == set(data.LENDING_METRICS)
    assert set(result.wake_stats["wake_path"]) == {path for _, path, *_ in WAKES}
    assert set(result.request_stats["traffic_class"]) == {"interactive", "batch"}


def test_overview_reads_requests_only_when_asked_or_limited(analysis: Analysis) -> None:
    assert "requests" not in set(data.overview(analysis).counts["what"])
    limited = data.overview(analysis, ["requests.ttft_s.max=0.001"])
    assert "requests" in set(limited.counts["what"])
    assert set(limited.breaches["view"]) == {"requests"} and limited.breaches.height > 0


def test_limits_list_the_violation_and_every_breaching_episode(analysis: Analysis) -> None:
    # overshoots are 6.0625, 7.75 and 0.5 s: a 1 s limit is broken by two episodes
    result = data.overview(analysis, ["wake.overshoot_s.p95=1"])
    assert len(result.violations) == 1 and result.violations[0].startswith("wake.overshoot_s.p95 =")
    assert sorted(result.breaches["value"].to_list()) == [6.0625, 7.75]
    assert set(result.breaches["view"]) == {"wake"}


def test_a_bad_limit_names_itself(analysis: Analysis) -> None:
    with pytest.raises(SettingError, match="nonsense"):
        data.overview(analysis, ["nonsense.p95=1"])


def test_lending_events_are_offsets_from_demand_return(analysis: Analysis) -> None:
    episode = analysis.lending_episodes().row(0, named=True)
    events = data.lending_events(episode)
    offsets = dict(events.select("event", "offset_s").rows())
    assert set(offsets) == set(data.LENDING_EVENTS)
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
    steps = data.occupancy_steps(gates, t0, -1.5, 4.0)
    assert steps.rows() == [(-1.5, 0, 1), (-1.0, 1, 1), (0.5, 2, 1), (1.0, 2, 0), (2.0, 1, 0), (3.0, 0, 0),
                            (4.0, 0, 0)]


def test_lending_detail_uses_the_episodes_own_run(analysis: Analysis) -> None:
    episode = analysis.lending_episodes().row(0, named=True)
    detail = data.lending_detail(episode, analysis.view("gate_requests"))
    assert detail.occupancy["offset_s"][0] == -5.0
    assert detail.occupancy["borrowed"].max() >= 1  # the episode starts with capacity lent


def test_wake_events_show_every_retry_with_its_status(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    cold = wakes.filter(pl.col("wake_path") == "cold-start").row(0, named=True)
    typed = analysis.view("typed_model_wakes").filter(pl.col("span_id") == cold["span_id"]).row(0, named=True)
    attempts = analysis.attempts().filter(pl.col("trace_id") == cold["request_trace_id"])
    detail = data.wake_detail(cold, typed, attempts)
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


def test_policy_data_has_one_row_per_run(analysis: Analysis) -> None:
    policies = data.policy_data(analysis)
    moflux = policies.summary.filter(pl.col("workload") == "balanced")
    assert sorted(moflux.select("policy", "seed").rows()) == sorted(MOFLUX_RUNS)
    assert {"lend", "static"} <= set(policies.paired["policy"])
