"""The recorded sample traces (real emitters: loadgen, gate, lifecycle, simulator) decompose fully.

Structural checks only, so that re-recording the samples does not break them: every episode is
found and complete, every number is present and causally ordered.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from restorelens.analysis import Analysis
from restorelens.collector import load_paths

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def test_every_recorded_episode_decomposes(tmp_path: Path) -> None:
    files = sorted(SAMPLES.glob("*.jsonl"))
    assert files, "sample_traces/ holds no recordings"
    load_paths(files, tmp_path / "samples.duckdb")

    with Analysis.open(tmp_path / "samples.duckdb", materialize=True) as analysis:
        lending = analysis.lending_episodes()
        wakes = analysis.wake_episodes()
        requests = analysis.requests()

    for frame in (lending, wakes):
        assert frame.height > 0
        assert not frame["censored"].any()
        assert not frame["clock_skew"].any()
    assert lending["returning_request_id"].null_count() == 0
    assert (lending["drain_s"] >= 0).all() and (lending["grant_restore_s"] >= 0).all()
    assert set(wakes["wake_path"]) <= {"in-place", "make-room", "move", "cold-start"}
    assert wakes.select(pl.col("ready_s") <= pl.col("observed_s")).to_series().all()
    assert wakes.select(pl.col("overshoot_s") >= 0).to_series().all()
    assert (wakes["first_status"] == 503).all() and (wakes["attempts"] >= 2).all()
    assert requests["reached_engine"].any()
