"""Shared fixtures: an in-memory span exporter and real uvicorn servers on free loopback ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

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
