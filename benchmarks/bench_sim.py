"""Simulator speed: live requests/s with tracing on, and CPU time of a virtual-time MoFlux arm.

Live: `restorelens sim` (tiny-cpu, spans to an OTLP JSON file through the batch processor) in its
own process, driven by 32 keep-alive connections of a lean raw HTTP/1.1 client in this one (httpx
cost more CPU per request than the simulator and capped the rate); anchor: a trivial Starlette app
returning a fixed JSON body, served by the same uvicorn in its own process, same client, same run.
Server CPU per request comes from /proc: the comparable figure on a shared machine.
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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.http_load import Client, closed_loop, cpu_seconds, event_loop_and_parser

LIVE_REQUESTS = int(os.environ.get("BENCH_SIM_REQUESTS", "3000"))
LIVE_CONCURRENCY = 32
WARMUP_REQUESTS = 300
VIRTUAL_REPEATS = 20
TARGET_LIVE_RPS = 500.0
TARGET_VIRTUAL_CPU_S = 1.0
BODY = b'{"model":"tiny","prompt":"hello there","max_tokens":2}'

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


def _measure_live(argv: list[str]) -> tuple[float, float, str]:
    """(requests/s of wall time, server CPU seconds per request, event loop + parser) for one server."""
    process, url = _start(argv)
    port = int(url.rsplit(":", 1)[1])

    async def measure() -> tuple[int, float, float]:
        client = Client(port, BODY)
        await closed_loop(client, LIVE_CONCURRENCY, total=WARMUP_REQUESTS)
        before = cpu_seconds(process.pid)
        done, seconds = await closed_loop(client, LIVE_CONCURRENCY, total=LIVE_REQUESTS)
        spent = cpu_seconds(process.pid) - before
        client.close()
        return done, seconds, spent

    try:
        done, seconds, server_cpu_s = asyncio.run(measure())
        return done / seconds, server_cpu_s / done, event_loop_and_parser(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=15)


def live() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace_file = Path(tmp) / "spans.jsonl"
        sim_rps, sim_cpu, stack = _measure_live([
            sys.executable, "-m", "restorelens", "sim", "--preset", "tiny-cpu", "--port", "0",
            "--time-scale", "100", "--trace-file", str(trace_file),
        ])  # fmt: skip
        spans_written = trace_file.read_text().count('"name":"llm_request"') if trace_file.exists() else 0
    anchor_rps, anchor_cpu, anchor_stack = _measure_live([sys.executable, "-c", _ANCHOR_APP])
    print(f"live: servers run on                {stack} (simulator), {anchor_stack} (anchor)")
    print(f"live: machine load average         {os.getloadavg()[0]:8.2f} on {os.cpu_count()} cores")
    print(f"live: simulator (tracing to file)  {sim_rps:8.0f} req/s wall   {sim_cpu * 1e6:6.0f} us server CPU/req"
          f"   {1 / sim_cpu:6.0f} req per server CPU-s   target >= {TARGET_LIVE_RPS:.0f} req/s")
    print(f"live: trivial Starlette anchor     {anchor_rps:8.0f} req/s wall   {anchor_cpu * 1e6:6.0f} us server CPU/req"
          f"   {1 / anchor_cpu:6.0f} req per server CPU-s")
    print(f"live: simulator / anchor           {sim_rps / anchor_rps:8.2f} wall         "
          f"{anchor_cpu / sim_cpu:6.2f} of the anchor's requests per CPU-s")
    verdict = "meets" if sim_rps >= TARGET_LIVE_RPS else "misses"
    print(f"live: {verdict} the target of {TARGET_LIVE_RPS:.0f} req/s with tracing on "
          f"(CPU-bound capacity on one core: {1 / sim_cpu:.0f} req/s)")
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
