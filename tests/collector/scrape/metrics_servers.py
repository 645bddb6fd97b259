"""Fake engines for the scrape tests: an app answering /metrics as told, a server that trickles
its head in, a sink keeping what a scraper hands it, a patient wait, and a restorelens command
started in its own process with the counts of a collector's GET /metrics."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import httpx
import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from restorelens.collector.writer import Overloaded
from restorelens.serving import bind_socket

#: Two of vLLM's pressure samples, as an engine's /metrics writes them.
METRICS = b'vllm:num_requests_running{engine="0",model_name="m"} 1\nvllm:num_requests_waiting{engine="0",model_name="m"} 2\n'

#: A bound for liveness only (a hung test fails instead of hanging); nothing is timed against it.
PATIENCE_S = 60.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def engine_app(answers: dict[str, Callable[[], Response]]) -> Starlette:
    async def handle(request: Request) -> Response:
        answer = answers[request.url.path]()
        return await answer if asyncio.iscoroutine(answer) else answer

    return Starlette(routes=[Route(path, handle) for path in answers])


class TricklingHead:
    """A raw-socket server sending its status line and headers one byte every ``gap_s`` (an answer
    taking ``total_s``), as no HTTP framework lets a handler do."""

    HEAD = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 40 + b"\r\nContent-Length: 0\r\n\r\n"

    def __init__(self, gap_s: float = 0.5) -> None:
        self.gap_s = gap_s
        self.total_s = gap_s * len(self.HEAD)
        self._sock = bind_socket()
        self._sock.listen(8)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/metrics"
        self._done = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._drip, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _drip(self, conn: Any) -> None:
        with conn:
            conn.recv(65536)
            for byte in self.HEAD:
                if self._done.wait(self.gap_s):
                    return
                try:
                    conn.send(bytes([byte]))
                except OSError:  # the scraper gave up and closed: what it should do
                    return

    def close(self) -> None:
        self._done.set()
        self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept(), which a close alone does not
        self._sock.close()
        for thread in self._threads:
            thread.join(PATIENCE_S)


class ListSink:
    """A sink that keeps every table (or refuses, as an overloaded writer does)."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []
        self.refuse = False

    def submit_engine_metrics(self, table: pa.Table) -> Future[int]:
        if self.refuse:
            raise Overloaded("full")
        self.tables.append(table)
        future: Future[int] = Future()
        future.set_result(table.num_rows)
        return future


def start_restorelens(command: list[str], pattern: str) -> tuple[subprocess.Popen[str], re.Match[str]]:
    """``restorelens COMMAND`` in its own process, once its first stderr line matches ``pattern``."""
    proc = subprocess.Popen([sys.executable, "-m", "restorelens", *command], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(pattern, line)
    if found is None:
        proc.kill()
        pytest.fail(f"unexpected start line: {line!r}")
    return proc, found


def collector_counts(url: str) -> dict[tuple[str, str], float]:
    """A collector's GET /metrics: value by (sample name, its labels as k=v,... sorted)."""
    counts = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics", timeout=PATIENCE_S).text):
        for s in family.samples:
            counts[(s.name, ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())))] = s.value
    return counts
