"""Fixtures for the dashboard tests: a realistic span store (built once per session), an empty one,
and an ``Analysis`` open on the realistic one (per test module)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from restorelens.analysis import Analysis

# dashboard_stores.py sits next to the tests; --import-mode=importlib does not put this folder on sys.path.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dashboard_stores import (  # noqa: E402
    armless_store,
    build_store,
    empty_store,
    engine_store,
    gateless_store,
    hostile_store,
)


@pytest.fixture(scope="session")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("dashboard-store")
    return build_store(work / "spans.duckdb", work)


@pytest.fixture(scope="module")
def analysis(store_path: Path) -> Analysis:
    opened = Analysis.open(store_path)
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def empty_store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return empty_store(tmp_path_factory.mktemp("dashboard-empty") / "empty.duckdb")


@pytest.fixture(scope="session")
def hostile_store_path(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The realistic store with markup in its span, service and model names and attribute values."""
    return hostile_store(tmp_path_factory.mktemp("dashboard-hostile") / "hostile.duckdb", store_path)


@pytest.fixture(scope="session")
def gateless_store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Only a user's own app calling vLLM directly: no gate, no restorelens client, no episode."""
    return gateless_store(tmp_path_factory.mktemp("dashboard-gateless") / "gateless.duckdb")


@pytest.fixture(scope="session")
def engine_store_path(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The realistic store with gateless requests and engines' scrapes (engine_metrics) added."""
    return engine_store(tmp_path_factory.mktemp("dashboard-engine") / "engine.duckdb", store_path)


@pytest.fixture(scope="session")
def armless_store_path(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The realistic store with the ARMLESS requests: a no-gate arm, one of them with no workload or seed."""
    return armless_store(tmp_path_factory.mktemp("dashboard-armless") / "armless.duckdb", store_path)
