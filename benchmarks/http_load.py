"""Load-generation helpers shared by bench_gate and bench_sim.

The client is a raw keep-alive HTTP/1.1 client on asyncio streams: on a 2-core machine the load
generator shares the CPU with what it measures, so it must cost less than the servers (httpx's
pool costs more per request than the simulator itself). Server CPU is read from /proc, so a figure
per request is available even when the machine is shared and wall-clock rates are not comparable.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

__all__ = ["Client", "closed_loop", "cpu_seconds", "event_loop_and_parser", "open_loop", "percentile"]


class Client:
    """Keep-alive HTTP/1.1 POSTs of one fixed body; connections are reused LIFO."""

    def __init__(self, port: int, body: bytes, path: str = "/v1/completions", extra_headers: bytes = b"") -> None:
        self.port = port
        self.request = (
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + extra_headers + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def call(self) -> float:
        """Seconds for one request; ``inf`` when the answer was not 200 (counted as an error)."""
        connection = self.idle.pop() if self.idle else await asyncio.open_connection("127.0.0.1", self.port)
        reader, writer = connection
        start = time.perf_counter()
        writer.write(self.request)
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        ok = b" 200 " in lines[0]
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:] if line)}
        if b"content-length" in headers:
            await reader.readexactly(int(headers[b"content-length"]))
        else:  # chunked
            while True:
                size = int((await reader.readline()).strip(), 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        elapsed = time.perf_counter() - start
        self.idle.append(connection)
        return elapsed if ok else float("inf")

    def close(self) -> None:
        for _, writer in self.idle:
            writer.close()
        self.idle.clear()


async def open_loop(client: Client, rate_per_s: float, duration_s: float, warmup: int = 20) -> list[float]:
    """Send at a fixed rate whatever the answers do (so queueing shows); sorted latencies."""
    for _ in range(warmup):  # warm connections and the servers' code paths
        await client.call()
    count = int(rate_per_s * duration_s)
    tasks: list[asyncio.Task[float]] = []
    begin = time.perf_counter()
    for i in range(count):
        delay = begin + i / rate_per_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(client.call()))
    return sorted(await asyncio.gather(*tasks))


async def closed_loop(client: Client, concurrency: int, *, duration_s: float | None = None, total: int | None = None) -> tuple[int, float]:
    """``concurrency`` workers back to back, for a duration or a request count: (requests, seconds)."""
    done = 0
    errors = 0
    issued = 0
    stop_at = time.perf_counter() + duration_s if duration_s is not None else None

    def more() -> bool:
        if stop_at is not None:
            return time.perf_counter() < stop_at
        return issued < (total or 0)

    async def worker() -> None:
        nonlocal done, errors, issued
        while more():
            issued += 1
            if await client.call() == float("inf"):
                errors += 1
            else:
                done += 1

    begin = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    if errors:
        raise RuntimeError(f"{errors} requests failed during a closed-loop run")
    return done, time.perf_counter() - begin


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its children (nginx's worker), from Linux /proc."""
    ticks = 0
    for one in [pid, *_children(pid)]:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def event_loop_and_parser(pid: int) -> str:
    """Which event loop and HTTP parser a uvicorn server process loaded (read from its memory map)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return "unknown"
    loop = "uvloop" if "/uvloop/" in maps else "asyncio"
    parser = "httptools" if "/httptools/" in maps else "h11"
    return f"{loop} + {parser}"
