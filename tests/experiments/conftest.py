"""Fixtures of the experiments' live tests: how long one loopback HTTP hop takes right now."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from restorelens.serving import ServerThread


@pytest.fixture(scope="module")
def loopback_round_trip_s() -> Iterator[Callable[[], float]]:
    """Measures, when called, the median real seconds of a few small POSTs to a uvicorn server on
    loopback: how long one HTTP hop takes on this machine right now. Live tests scale their
    tolerances with it (times the time scale), so a busy machine widens them and an idle one
    keeps them tight."""
    async def echo(request: Request) -> Response:
        return JSONResponse({"n": len(await request.body())})

    server = ServerThread(Starlette(routes=[Route("/echo", echo, methods=["POST"])])).start()
    client = httpx.Client(base_url=server.url, timeout=10.0)

    def measure(samples: int = 7) -> float:
        client.post("/echo", content=b"warm-up")  # opens the connection: not a round trip to count
        times_s = []
        for _ in range(samples):
            started = time.perf_counter()
            client.post("/echo", content=b"x" * 400).raise_for_status()
            times_s.append(time.perf_counter() - started)
        return statistics.median(times_s)

    yield measure
    client.close()
    server.stop()
