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

SEEDS = range(1, 6)
ARMS = ("fcfs", "priority", "static", "lend")


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("fixed-burst")
    files = []
    for arm in ARMS:
        for seed in SEEDS:
            path = folder / f"{arm}-{seed}.jsonl"
            with RunTelemetry("file", path=str(path)) as telemetry:
                run_virtual(get_scenario("moflux-fixed-burst", arm), seed, telemetry.providers, f"{arm}-{seed}")
            files.append(str(path))
    load_paths(files, folder / "spans.duckdb")
    with Analysis.open(folder / "spans.duckdb") as analysis:
        return analysis.policy_summary()


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
