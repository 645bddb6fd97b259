"""Shared fixtures: an in-memory span exporter and real uvicorn servers on free loopback ports."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from restorelens.serving import ServerThread
from restorelens.telemetry import build_tracer_provider


@pytest.fixture
def tracer_provider() -> Iterator[TracerProvider]:
    """A provider whose spans land synchronously in ``tracer_provider.restorelens_exporter``."""
    provider = build_tracer_provider("restorelens-test", "memory")
    yield provider
    provider.shutdown()


@pytest.fixture
def span_exporter(tracer_provider: TracerProvider) -> InMemorySpanExporter:
    exporter = tracer_provider.restorelens_exporter  # type: ignore[attr-defined]
    assert isinstance(exporter, InMemorySpanExporter)
    return exporter


@pytest.fixture
def serve_asgi() -> Iterator[Callable[..., ServerThread]]:
    """Factory: ``serve_asgi(app) -> ServerThread`` (started; ``.url``); all stopped at teardown."""
    servers: list[ServerThread] = []

    def start(app: Any, **options: Any) -> ServerThread:
        server = ServerThread(app, **options).start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        server.stop()


@pytest.fixture
def foreign_stores(tmp_path: Path) -> dict[Path, str]:
    """Files that are no span store, each with the reason every command gives for it: a SQLite file
    (it never reaches DuckDB, which would download its sqlite_scanner extension) and a DuckDB file
    whose otel_traces has other columns."""
    sqlite_file = tmp_path / "x.db"
    with sqlite3.connect(sqlite_file) as con:
        con.execute("create table otel_traces (a integer)")
    foreign = tmp_path / "foreign.duckdb"
    with duckdb.connect(str(foreign)) as con:
        con.execute("create table otel_traces (a integer, b varchar)")
    return {
        sqlite_file: "not a valid DuckDB database (it is a SQLite database)",
        foreign: "table otel_traces is not the restorelens schema: its columns are a, b (missing Timestamp, "
                 "TraceId, SpanId, ParentSpanId, TraceState and 17 more)",
    }


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--screenshots", metavar="DIR", default=None,
                     help="the browser tests write a screenshot of every dashboard page they visit to DIR "
                          "(the README's picture is regenerated with --screenshots docs/screenshots)")
