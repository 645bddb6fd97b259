"""``restorelens calibrate --wakes``: a store's wake history becomes the file a gate starts from, so
the gate's first wake is hinted from the deployment's own wakes (issue #39, item 5)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from restorelens.cli import cli
from restorelens.experiments.calibrate import wake_history
from restorelens.gate.modelclaim.config import build_router

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
MODEL = "llama-3-8b"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ModelClaim samples (a cold start, a move, an in-place wake, a make-room wake) in a store."""
    db = tmp_path_factory.mktemp("calibrate") / "spans.duckdb"
    files = sorted(str(p) for p in SAMPLES.glob("modelclaim-*.jsonl"))
    result = CliRunner().invoke(cli, ["load", *files, "--db", str(db)])
    assert result.exit_code == 0, result.output
    return db


def calibrate(*args: str):
    return CliRunner().invoke(cli, ["calibrate", *args])


def episodes(*rows: tuple[str, str, float | None, float | None, int]) -> pl.DataFrame:
    t0 = datetime(2026, 1, 1)
    return pl.DataFrame(
        [{"model": m, "wake_path": p, "process_started_s": s, "observed_s": o, "t0": t0 + timedelta(seconds=at),
          "trace_id": f"{at:032x}", "span_id": f"{at:016x}"} for m, p, s, o, at in rows],
        schema={"model": pl.String, "wake_path": pl.String, "process_started_s": pl.Float64,
                "observed_s": pl.Float64, "t0": pl.Datetime("ns"), "trace_id": pl.String, "span_id": pl.String},
    )


def test_history_is_the_engine_call_to_routing_per_model_and_path_oldest_first() -> None:
    frame = episodes(
        ("a", "cold-start", 0.5, 40.5, 30),   # 40 s, the later one
        ("a", "cold-start", 0.0, 35.0, 10),   # 35 s, the earlier one
        ("a", "in-place", 0.0, 4.0, 20),
        ("a", "make-room", 0.4, 4.4, 40),     # its path began at the neighbour's sleep: not learnt
        ("a", "in-place", 0.0, None, 50),     # never became ready: no observation
        ("a", "move", 2.0, 1.0, 60),          # negative: clock skew, no observation
        ("b", "move", 1.0, 46.0, 70),
    )
    assert wake_history(frame, window=20) == {"a": {"cold-start": [35.0, 40.0], "in-place": [4.0]},
                                              "b": {"move": [45.0]}}


def test_history_keeps_the_last_window_wakes() -> None:
    frame = episodes(*[("a", "in-place", 0.0, float(i), i) for i in range(1, 6)])
    assert wake_history(frame, window=3) == {"a": {"in-place": [3.0, 4.0, 5.0]}}


def test_a_gate_started_on_the_file_hints_its_first_cold_start_from_the_store(store: Path, tmp_path: Path) -> None:
    wakes = tmp_path / "wakes.json"
    result = calibrate("--db", str(store), "--wakes", str(wakes))
    assert result.exit_code == 0, result.output
    assert f"{MODEL} cold-start: 1 wake(s); a gate predicts 45.000 s" in result.output
    assert set(json.loads(wakes.read_text())["wakes"][MODEL]) == {"cold-start", "in-place", "move"}

    router = build_router({
        "pods": [{"name": "pod-1", "gpus": ["24Gi"]}],
        "claims": [{"model": MODEL, "perGPU": {"maximumFootprint": "10Gi", "kvFloor": "4Gi"},
                    "engine_url": "http://127.0.0.1:9"}],
        "policy": {"sleepAfterSeconds": 60}, "retry_after_mode": "calibrated", "calibration_path": str(wakes),
    })
    try:
        estimate = router.core.hints.estimates(router.core.calibration).for_path(MODEL, "cold-start")
        assert estimate is not None and (estimate.duration_s, estimate.source) == (45.0, "calibrated")
        # Before the file, nothing was known of this model: the hint would have re-estimated as it went.
        assert router.core.hints.estimates(router.core.calibration).for_path("other", "cold-start") is None
    finally:
        asyncio.run(router.backend.close())


def test_the_file_is_merged_per_model_and_path_and_a_second_run_changes_nothing(store: Path, tmp_path: Path) -> None:
    wakes = tmp_path / "wakes.json"
    kept = {"other": {"in-place": [1.0]}, MODEL: {"make-room": [7.5], "cold-start": [99.0]}}
    wakes.write_text(json.dumps({"version": 1, "wakes": kept}))
    assert calibrate("--db", str(store), "--wakes", str(wakes)).exit_code == 0
    first = wakes.read_text()
    on_file = json.loads(first)["wakes"]
    assert on_file["other"] == {"in-place": [1.0]} and on_file[MODEL]["make-room"] == [7.5]
    assert on_file[MODEL]["cold-start"] == [45.0]  # the store's history replaces the file's for that path
    assert calibrate("--db", str(store), "--wakes", str(wakes)).exit_code == 0
    assert wakes.read_text() == first


def test_a_file_the_gate_could_not_load_is_refused_untouched(store: Path, tmp_path: Path) -> None:
    wakes = tmp_path / "wakes.json"
    wakes.write_text('{"version": 1,\n "wakes": oops}\n')
    result = calibrate("--db", str(store), "--wakes", str(wakes))
    assert result.exit_code == 1 and "wakes.json:2" in result.output and "Traceback" not in result.output
    assert wakes.read_text() == '{"version": 1,\n "wakes": oops}\n'


def test_a_window_without_a_ready_wake_writes_nothing(store: Path, tmp_path: Path) -> None:
    wakes = tmp_path / "wakes.json"
    result = calibrate("--db", str(store), "--wakes", str(wakes), "--since", "2030-01-01")
    assert result.exit_code == 1 and "nothing to calibrate from" in result.output and not wakes.exists()


def test_a_missing_folder_is_one_line(store: Path, tmp_path: Path) -> None:
    result = calibrate("--db", str(store), "--wakes", str(tmp_path / "no" / "wakes.json"))
    assert result.exit_code == 1 and "does not exist" in result.output and "Traceback" not in result.output


def test_the_history_is_as_long_as_a_gate_keeps() -> None:
    from restorelens.experiments.calibrate import HISTORY_WAKES
    from restorelens.gate.modelclaim.calibration import DEFAULT_WINDOW

    assert HISTORY_WAKES == DEFAULT_WINDOW
