"""An experiment store for the dashboard tests: what ``restorelens experiment`` leaves behind.

A small MoFlux matrix (one scenario, the study's four arms, two seeds) played in virtual time in
this process and loaded into a DuckDB store, as the experiment command does; well under a second.
``build_experiment_store`` is a plain function so browser tests can build the same store; the
``experiment_store_path`` fixture builds it once per session (import it into a test module).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from restorelens.collector import load_paths
from restorelens.experiments.matrix import Matrix, play

#: The matrix of the experiment store: its scenario, arms and seeds.
EXPERIMENT_SCENARIO = "moflux-fixed-burst"
EXPERIMENT_ARMS = ("fcfs", "priority", "static", "lend")
EXPERIMENT_SEEDS = (1, 2)


def experiment_matrix() -> Matrix:
    return Matrix((EXPERIMENT_SCENARIO,), EXPERIMENT_ARMS, EXPERIMENT_SEEDS)


def build_experiment_store(folder: Path) -> Path:
    """Play ``experiment_matrix`` into ``folder``/runs and load it into ``folder``/spans.duckdb (returned)."""
    files = play(experiment_matrix(), folder / "runs", workers=1)  # in this process: faster than workers
    db = folder / "spans.duckdb"
    loaded = load_paths(files, db)
    assert not loaded.errors, loaded.errors
    return db


@pytest.fixture(scope="session")
def experiment_store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_experiment_store(tmp_path_factory.mktemp("experiment-store"))
