"""Simulator speed: live requests/s with tracing on, and CPU time of a virtual-time MoFlux arm.

Live: `restorelens sim` (tiny-cpu, spans to an OTLP JSON file through the batch processor) in its
own process, driven by a concurrent httpx client in this one; anchor: a trivial Starlette app
returning a fixed JSON body, served by the same uvicorn in its own process, same client, same run.
The simulator runs at --time-scale 100 so its modelled engine time (4 sequences per step) does not
cap the rate: the figure is the cost of the shell (parse, schedule, step, span, metrics, respond).

Virtual: one arm of the 105-s MoFlux long-context protocol (interactive 0.25 req/s for 0-25 s and
0.5 req/s for 60-85 s; batch 0.15 req/s of 7,100-character prompts from 25 to 85 s) on the
qwen2.5-1.5b-m1 preset, driven by a discrete-event loop with no clock, with and without span
emission; anchor: a bare loop over the same arrivals.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

LIVE_REQUESTS = int(os.environ.get("BENCH_SIM_REQUESTS", "3000"))
LIVE_CONCURRENCY = 32
WARMUP_REQUESTS = 300
VIRTUAL_REPEATS = 20
TARGET_LIVE_RPS = 500.0
TARGET_VIRTUAL_CPU_S = 1.0

_ANCHOR_APP = """
import sys
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from restorelens.serving import bind_socket
import uvicorn
BODY = {"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "tiny",
        "choices": [{"index": 0, "text": "the model", "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2}}
async def completions(request):
    await request.body()
    return JSONResponse(BODY)
sock = bind_socket("127.0.0.1", 0)
print(f"on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)
uvicorn.Server(uvicorn.Config(Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])]),
               log_level="warning", access_log=False)).run(sockets=[sock])
"""


def _start(argv: list[str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    line = process.stderr.readline()
    found = re.search(r"http://127\.0\.0\.1:\d+", line)
    if not found:
        process.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    url = found.group(0)
    for _ in range(100):
        try:
            httpx.get(url + "/health", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    return process, url


def _cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


async def _load(url: str, total: int) -> float:
    body = {"model": "tiny", "prompt": "hello there", "max_tokens": 2}
    limits = httpx.Limits(max_connections=LIVE_CONCURRENCY, max_keepalive_connections=LIVE_CONCURRENCY)
    # TCP_NODELAY: httpx writes headers and body separately; Nagle would hold the body back.
    transport = httpx.AsyncHTTPTransport(
        limits=limits, retries=1, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]
    )
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=60) as client:
        remaining = total

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                response = await client.post("/v1/completions", json=body)
                response.raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(LIVE_CONCURRENCY)))
        return total / (time.perf_counter() - start)


def _measure_live(argv: list[str]) -> tuple[float, float]:
    """(requests/s of wall time, requests per second of the server's own CPU time)."""
    process, url = _start(argv)
    try:
        asyncio.run(_load(url, WARMUP_REQUESTS))
        ticks_before = _cpu_ticks(process.pid)
        rps = asyncio.run(_load(url, LIVE_REQUESTS))
        server_cpu_s = (_cpu_ticks(process.pid) - ticks_before) / os.sysconf("SC_CLK_TCK")
        return rps, LIVE_REQUESTS / max(server_cpu_s, 1e-9)
    finally:
        process.terminate()
        process.wait(timeout=15)


def live() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace_file = Path(tmp) / "spans.jsonl"
        sim_rps, sim_per_cpu = _measure_live([
            sys.executable, "-m", "restorelens", "sim", "--preset", "tiny-cpu", "--port", "0",
            "--time-scale", "100", "--trace-file", str(trace_file),
        ])  # fmt: skip
        spans_written = trace_file.read_text().count('"name":"llm_request"') if trace_file.exists() else 0
    anchor_rps, anchor_per_cpu = _measure_live([sys.executable, "-c", _ANCHOR_APP])
    print(f"live: machine load average         {os.getloadavg()[0]:8.2f} on {os.cpu_count()} cores")
    print(f"live: simulator (tracing to file)  {sim_rps:8.0f} req/s wall   {sim_per_cpu:8.0f} req per server CPU-s"
          f"   target >= {TARGET_LIVE_RPS:.0f}")
    print(f"live: trivial Starlette anchor     {anchor_rps:8.0f} req/s wall   {anchor_per_cpu:8.0f} req per server CPU-s")
    print(f"live: simulator / anchor           {sim_rps / anchor_rps:8.2f} wall         {sim_per_cpu / anchor_per_cpu:8.2f} CPU")
    print(f"live: llm_request spans written    {spans_written:8d} (of {LIVE_REQUESTS + WARMUP_REQUESTS} requests)")


def moflux_long_context_arrivals(seed: int) -> list[tuple[float, str]]:
    """(arrival_s, traffic class) for one 105-s arm, Poisson per phase."""
    rng = random.Random(seed)
    phases = [("interactive", 0.0, 25.0, 0.25), ("batch", 25.0, 85.0, 0.15), ("interactive", 60.0, 85.0, 0.5)]
    arrivals = []
    for traffic_class, start_s, end_s, rate in phases:
        t = start_s + rng.expovariate(rate)
        while t < end_s:
            arrivals.append((t, traffic_class))
            t += rng.expovariate(rate)
    return sorted(arrivals)


def _run_arm(arrivals: list[tuple[float, str]], tracer: object | None) -> int:
    from restorelens.sim import EngineCore, FinishedEvent, SimRequest, emit_llm_request_span, get_preset

    config = get_preset("qwen2.5-1.5b-m1")
    core = EngineCore(config, seed=1)
    sizes = {"interactive": (config.estimate_prompt_tokens(400), 16), "batch": (config.estimate_prompt_tokens(7100), 64)}
    finished = 0
    index = 0
    while True:
        next_core = core.next_event_s()
        if index < len(arrivals) and (next_core is None or arrivals[index][0] <= next_core):
            t, traffic_class = arrivals[index]
            prompt_tokens, max_tokens = sizes[traffic_class]
            core.add_request(SimRequest(f"r{index}", prompt_tokens, max_tokens), t)
            index += 1
            continue
        if next_core is None:
            return finished
        for event in core.advance_to(next_core):
            if isinstance(event, FinishedEvent):
                finished += 1
                if tracer is not None:
                    emit_llm_request_span(tracer, event.record, model="qwen")  # type: ignore[arg-type]


def _bare_loop(arrivals: list[tuple[float, str]]) -> int:
    count = 0
    for _t, traffic_class in arrivals:
        count += traffic_class == "batch"
    return count


def _cpu_s(fn, repeats: int) -> float:  # type: ignore[no-untyped-def]
    start = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - start) / repeats


def virtual() -> None:
    from restorelens.telemetry import build_tracer_provider

    arrivals = moflux_long_context_arrivals(seed=7)
    provider = build_tracer_provider("bench-sim", "memory")
    tracer = provider.get_tracer("bench")
    completed = _run_arm(arrivals, None)
    core_s = _cpu_s(lambda: _run_arm(arrivals, None), VIRTUAL_REPEATS)
    spans_s = _cpu_s(lambda: _run_arm(arrivals, tracer), VIRTUAL_REPEATS)
    provider.shutdown()
    bare_s = _cpu_s(lambda: _bare_loop(arrivals), VIRTUAL_REPEATS * 50)
    print(f"virtual: MoFlux long-context arm, {len(arrivals)} arrivals, {completed} completed (qwen2.5-1.5b-m1)")
    print(f"virtual: core only                 {core_s * 1e3:8.2f} ms CPU   target well under {TARGET_VIRTUAL_CPU_S:.0f} s")
    print(f"virtual: core + llm_request spans  {spans_s * 1e3:8.2f} ms CPU")
    print(f"virtual: bare loop anchor          {bare_s * 1e3:8.4f} ms CPU   ratio core/anchor {core_s / bare_s:8.0f}")


def main() -> None:
    virtual()
    live()


if __name__ == "__main__":
    main()
