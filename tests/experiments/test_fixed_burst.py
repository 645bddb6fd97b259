"""The fixed-burst protocol in virtual time, all four study arms, 5 seeds, scored from the spans.

The MoFlux benchmark's published fixed-burst (v3) batch borrow goodput is 4/35 req/s in the fcfs,
priority and MoFlux arms and 2/35 in static, in every seed: the borrow window holds one prime and
three pressure requests, static's one batch slot runs one at a time, and a request over its
class's limit is answered 429 at once and not retried. That follows here from the same rules,
not from a tuned constant.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from restorelens.analysis import Analysis
from restorelens.collector import load_paths
from restorelens.experiments import RunTelemetry, get_scenario, run_virtual
from restorelens.loadgen.workloads import FIXED_BURST, moflux_workload

SEEDS = range(1, 6)
ARMS = ("fcfs", "priority", "static", "lend")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fixed-burst")
    files = []
    for arm in ARMS:
        for seed in SEEDS:
            path = folder / f"{arm}-{seed}.jsonl"
            with RunTelemetry("file", path=str(path)) as telemetry:
                run_virtual(get_scenario("moflux-fixed-burst", arm), seed, telemetry.providers, f"{arm}-{seed}")
            files.append(str(path))
    load_paths(files, folder / "spans.duckdb")
    return folder / "spans.duckdb"


@pytest.fixture(scope="module")
def summary(store: Path):
    with Analysis.open(store) as analysis:
        return analysis.policy_summary()


@pytest.fixture(scope="module")
def returning(store: Path):
    """The lend arm's lending episode of the request that returns at exactly 60 s, one per seed."""
    selected = {first_return_id(seed) for seed in SEEDS}
    with Analysis.open(store) as analysis:
        episodes = analysis.lending_episodes()
    return episodes.filter(episodes["returning_request_id"].is_in(selected))


def first_return_id(seed: int) -> str:
    workload = moflux_workload(FIXED_BURST, seed)
    return next(a.request_id for a in workload.arrivals if a.traffic_class == "interactive" and a.at_s == 60.0)


def test_every_arm_and_seed_is_summarised_over_the_studys_windows(summary) -> None:
    assert sorted(set(summary["policy"].to_list())) == sorted(ARMS)  # fcfs and priority kept apart
    assert summary.height == len(ARMS) * len(SEEDS)
    assert set(summary["contention_window_s"].to_list()) == {25.0}
    assert set(summary["borrow_window_s"].to_list()) == {35.0}
    assert set(summary["batch_borrow_arrivals"].to_list()) == {4}


def test_batch_borrow_goodput_is_the_published_one_in_every_arm_and_seed(summary) -> None:
    for row in summary.iter_rows(named=True):
        completed = 2 if row["policy"] == "static" else 4
        assert row["batch_borrow_completed"] == completed, row
        assert row["batch_borrow_goodput_rps"] == pytest.approx(completed / 35)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]  # 5 seeds: the middle one, as the study takes it


def test_the_engine_schedules_the_returning_request_seconds_after_the_grant_in_every_seed(returning) -> None:
    # The study's headline (its v3 bounds: 3.55-4.00 s): three pressure requests hold 315 of 320
    # KV blocks when demand returns, so the request granted at once waits in the engine for blocks.
    assert sorted(returning["seed"].to_list()) == list(SEEDS)
    for row in returning.iter_rows(named=True):
        assert row["borrowed_at_return"] >= 1, row
        # the floor comes back when the lend policy's controller revision takes effect: issued at
        # the first 250-ms tick after 60 s, in effect one period later (the study: 0.26-0.52 s)
        assert row["grant_restore_s"] == pytest.approx(0.5), row
        assert 3.0 <= row["engine_schedule_s"] <= 5.0, row


def test_the_studys_directions_hold_over_five_seeds(summary) -> None:
    goodput = {arm: summary.filter(summary["policy"] == arm) for arm in ARMS}
    interactive = {arm: _median(frame["interactive_slo_goodput_rps"].to_list()) for arm, frame in goodput.items()}
    borrow = {arm: _median(frame["batch_borrow_goodput_rps"].to_list()) for arm, frame in goodput.items()}
    assert borrow["lend"] > borrow["static"]  # lending completes more of the borrow window's batch work
    assert interactive["static"] >= interactive["lend"] and interactive["priority"] >= interactive["lend"]
    assert interactive["priority"] >= interactive["fcfs"]  # the study's H1


def test_the_fcfs_and_priority_arms_go_straight_to_the_engine(tmp_path: Path) -> None:
    import json as _json

    from restorelens.spans import SPAN_CLIENT_REQUEST, SPAN_GATE_REQUEST, SPAN_HTTP_POST, SPAN_LLM_REQUEST

    priority = get_scenario("moflux-fixed-burst", "priority")
    assert priority.direct and (priority.client_priority("interactive"), priority.client_priority("batch")) == (0, 10)
    assert get_scenario("moflux-fixed-burst", "fcfs").direct and get_scenario("moflux-fixed-burst", "fcfs").client_priority("batch") is None
    assert not get_scenario("moflux-fixed-burst", "lend").direct and not get_scenario("moflux-fixed-burst", "static").direct

    path = tmp_path / "priority.jsonl"
    with RunTelemetry("file", path=str(path)) as telemetry:
        run_virtual(priority, 1, telemetry.providers, "direct")
    spans = [span for line in path.read_text().splitlines()
             for resource in _json.loads(line)["resourceSpans"] for scope in resource["scopeSpans"]
             for span in scope["spans"]]
    by_id = {span["spanId"]: span for span in spans}
    assert not [s for s in spans if s["name"] == SPAN_GATE_REQUEST]
    engine = [s for s in spans if s["name"] == SPAN_LLM_REQUEST]
    assert engine and all(by_id[s["parentSpanId"]]["name"] == SPAN_HTTP_POST for s in engine)
    assert all(by_id[by_id[s["parentSpanId"]]["parentSpanId"]]["name"] == SPAN_CLIENT_REQUEST for s in engine)
