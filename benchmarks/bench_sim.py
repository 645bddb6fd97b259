"""Simulator speed: live requests/s and server CPU per request and per token, and CPU time of a
virtual-time MoFlux arm.

Live, shell cost: `restorelens sim` (tiny-cpu, spans to an OTLP JSON file through the batch
processor) in its own process at --time-scale 100 with max_tokens 2, so its modelled engine time
(4 sequences per step) hardly caps the rate: the figure is the cost of the shell (parse, schedule,
step, span, metrics, respond), not of any engine setting. Driven by 32 keep-alive connections of a
lean raw HTTP/1.1 client in this process (httpx cost more CPU per request than the simulator and
capped the rate). Anchor: a trivial Starlette app answering the same request with as many filler
words as max_tokens, served by the same uvicorn in its own process, same client, same run.
Server CPU per request comes from /proc: the comparable figure on a shared machine.

Live, engine settings: the same simulator at --time-scale 1 (modelled engine time in real time)
on the default preset (tiny-cpu) and on a production GPU's shape (llama-8b-h20), answering
128-token completions to a ~430-character prompt over min(max_num_seqs, 128) + 4 connections (the
batch full, a request waiting to take each freed slot), closed loop, the clients started over 3 s,
measured over a 10-s window after 4 s. Printed: achieved requests/s and tokens/s beside what the
engine model itself gives the same loop in virtual time (how well the shell keeps the modelled
clock), and server CPU per request and per token beside the anchor's at the same answer size.

Virtual: one arm of the 105-s MoFlux long-context protocol (interactive 0.25 req/s for 0-25 s and
0.5 req/s for 60-85 s; batch 0.15 req/s of 7,100-character prompts from 25 to 85 s) on the
qwen2.5-1.5b-m1 preset, driven by a discrete-event loop with no clock, with and without span
emission; anchor: a bare loop over the same arrivals.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from benchmarks.http_load import Client, closed_loop, cpu_seconds, event_loop_and_parser
from benchmarks.ratios import versus
from restorelens.spans import SPAN_LLM_REQUEST

LIVE_REQUESTS = int(os.environ.get("BENCH_SIM_REQUESTS", "3000"))
LIVE_CONCURRENCY = 32
WARMUP_REQUESTS = 300
VIRTUAL_REPEATS = 20
TARGET_LIVE_RPS = 500.0
TARGET_VIRTUAL_CPU_S = 1.0
SHELL_TIME_SCALE = 100
SHELL_MAX_TOKENS = 2

#: The engine-setting runs: modelled engine time in real time (--time-scale 1), answers of
#: REALISTIC_MAX_TOKENS tokens to a MoFlux-interactive-sized prompt, on the default preset and on
#: a production GPU's shape. Each runs WARMUP_S then is measured for REALISTIC_S (closed loop).
REALISTIC_PRESETS = ("tiny-cpu", "llama-8b-h20")
REALISTIC_MAX_TOKENS = 128
REALISTIC_PROMPT = "Summarise the capacity report for the on-call engineer, in plain words. " * 6  # ~430 chars
#: Connections beyond the batch: a finished sequence's slot is taken at once by a waiting request
#: instead of idling for a client round trip, so the engine never waits for work.
REALISTIC_EXTRA_CONNECTIONS = 4
#: The batch the connections fill, at most: on llama-8b-h20 (256 sequences) a full batch's first
#: wave of 27k prefill tokens takes longer than the warm-up, so the window measured the ramp
#: (25.6 req/s against 34.1 in steady state, engine model in virtual time); 128 reach steady state
#: within the warm-up at 31 req/s, and the engine steps without a pause either way.
REALISTIC_MAX_BATCH = 128
REALISTIC_S = float(os.environ.get("BENCH_SIM_REALISTIC_S", "10"))
#: Clients start one by one over RAMP_S (identical requests started together would finish together
#: and arrive again together, in waves the measured window would cut at random); the window opens
#: after WARMUP_S.
RAMP_S = 3.0
WARMUP_S = 4.0


def completion_body(max_tokens: int, prompt: str = "hello there") -> bytes:
    return json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens}).encode()


# The anchor answers with as many filler words as the request's max_tokens (one per token, as the
# simulator's text is), so both send bodies of about the same size.
_ANCHOR_APP = """
import json, sys
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from restorelens.serving import bind_socket
import uvicorn
async def completions(request):
    tokens = json.loads(await request.body())["max_tokens"]
    return JSONResponse({"id": "cmpl-1", "object": "text_completion", "created": 0, "model": "tiny",
        "choices": [{"index": 0, "text": " word" * tokens, "logprobs": None, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "total_tokens": 3 + tokens, "completion_tokens": tokens}})
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


def _stop(process: subprocess.Popen[str]) -> None:
    """End a server this benchmark started (its spans are flushed on SIGTERM) and close its pipe."""
    process.terminate()
    process.wait(timeout=15)
    if process.stderr is not None:
        process.stderr.close()


@dataclass
class Live:
    """One closed-loop measurement of one server process."""

    requests: int
    seconds: float
    server_cpu_s: float
    stack: str

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    @property
    def cpu_per_request(self) -> float:
        return self.server_cpu_s / self.requests


def _measure_live(argv: list[str], body: bytes) -> Live:
    """WARMUP_REQUESTS, then LIVE_REQUESTS over LIVE_CONCURRENCY keep-alive connections as fast as
    the server answers; server CPU (from /proc) counted over the measured part only."""
    process, url = _start(argv)
    port = int(url.rsplit(":", 1)[1])

    async def measure() -> tuple[int, float, float]:
        client = Client(port, body)
        await closed_loop(client, LIVE_CONCURRENCY, total=WARMUP_REQUESTS)
        before = cpu_seconds(process.pid)
        done, seconds = await closed_loop(client, LIVE_CONCURRENCY, total=LIVE_REQUESTS)
        spent = cpu_seconds(process.pid) - before
        client.close()
        return done, seconds, spent

    try:
        done, seconds, server_cpu_s = asyncio.run(measure())
        return Live(done, seconds, server_cpu_s, event_loop_and_parser(process.pid))
    finally:
        _stop(process)


def _sim_argv(preset: str, time_scale: float, trace_file: Path) -> list[str]:
    return [sys.executable, "-m", "restorelens", "sim", "--preset", preset, "--port", "0",
            "--time-scale", f"{time_scale:g}", "--trace-file", str(trace_file)]


def _spans_in(trace_file: Path) -> int:
    # the file holds compact OTLP JSON: one "name" field per span
    return trace_file.read_text().count(f'"name":"{SPAN_LLM_REQUEST}"') if trace_file.exists() else 0


def _anchor(max_tokens: int) -> Live:
    return _measure_live([sys.executable, "-c", _ANCHOR_APP], completion_body(max_tokens))


def live_shell_cost() -> None:
    """The simulator's shell cost: modelled engine time divided by 100 and 2-token answers, so the
    engine model hardly limits the rate and what is measured is parsing, scheduling, stepping,
    spans, metrics and the response."""
    with tempfile.TemporaryDirectory() as tmp:
        trace_file = Path(tmp) / "spans.jsonl"
        sim = _measure_live(_sim_argv("tiny-cpu", SHELL_TIME_SCALE, trace_file), completion_body(SHELL_MAX_TOKENS))
        spans_written = _spans_in(trace_file)
    anchor = _anchor(SHELL_MAX_TOKENS)
    print(f"live, shell cost: tiny-cpu at --time-scale {SHELL_TIME_SCALE} (modelled engine time / "
          f"{SHELL_TIME_SCALE}), max_tokens {SHELL_MAX_TOKENS}, {LIVE_CONCURRENCY} keep-alive connections, "
          f"{LIVE_REQUESTS} requests after {WARMUP_REQUESTS} of warm-up; not an engine setting anyone serves")
    print(f"live: servers run on                {sim.stack} (simulator), {anchor.stack} (anchor)")
    print(f"live: machine load average         {os.getloadavg()[0]:8.2f} on {os.cpu_count()} cores")
    print(f"live: simulator (tracing to file)  {sim.rps:8.0f} req/s wall   {sim.cpu_per_request * 1e6:6.0f} us server "
          f"CPU/req   {1 / sim.cpu_per_request:6.0f} req per server CPU-s   target >= {TARGET_LIVE_RPS:.0f} req/s")
    print(f"live: trivial Starlette anchor     {anchor.rps:8.0f} req/s wall   {anchor.cpu_per_request * 1e6:6.0f} us "
          f"server CPU/req   {1 / anchor.cpu_per_request:6.0f} req per server CPU-s")
    # a request's wall time is 1 / the closed loop's rate: the comparison is of times, as every bench words it
    print(f"live: simulator vs anchor          {versus(1 / anchor.rps, 1 / sim.rps)} wall, "
          f"{versus(anchor.cpu_per_request, sim.cpu_per_request, better='less', worse='more')} server CPU per request")
    verdict = "meets" if sim.rps >= TARGET_LIVE_RPS else "misses"
    print(f"live: {verdict} the target of {TARGET_LIVE_RPS:.0f} req/s with tracing on "
          f"(CPU-bound capacity on one core: {1 / sim.cpu_per_request:.0f} req/s)")
    print(f"live: {SPAN_LLM_REQUEST} spans written    {spans_written:8d} (of {LIVE_REQUESTS + WARMUP_REQUESTS} requests)")


async def staggered_closed_loop(client: Client, concurrency: int, pid: int) -> tuple[int, int, float]:
    """``concurrency`` clients, started evenly over RAMP_S, each sending its next request when its
    last is answered, until WARMUP_S + REALISTIC_S: (requests answered inside the window after
    WARMUP_S, requests answered in all, server CPU seconds inside the window)."""
    begin = time.perf_counter()
    window_start, window_end = begin + WARMUP_S, begin + WARMUP_S + REALISTIC_S
    answered_at: list[float] = []

    async def one_client(index: int) -> None:
        await asyncio.sleep(index * RAMP_S / concurrency)
        while time.perf_counter() < window_end:
            if await client.call() == float("inf"):
                raise RuntimeError("a request failed during the engine-setting run")
            answered_at.append(time.perf_counter())

    async def cpu_at(when: float) -> float:
        await asyncio.sleep(max(0.0, when - time.perf_counter()))
        return cpu_seconds(pid)

    cpu_start, cpu_end, *_ = await asyncio.gather(cpu_at(window_start), cpu_at(window_end),
                                                  *(one_client(index) for index in range(concurrency)))
    client.close()
    in_window = sum(window_start < at <= window_end for at in answered_at)
    return in_window, len(answered_at), cpu_end - cpu_start


def modelled_closed_loop(preset: str, concurrency: int, prompt_tokens: int, max_tokens: int) -> float:
    """Requests/s the engine model itself gives the same staggered closed loop, in virtual time
    with no HTTP between an answer and the next request, counted over the same window: what a live
    run at --time-scale 1 reaches if the shell keeps up with the modelled clock."""
    from restorelens.sim import EngineCore, FinishedEvent, SimRequest, get_preset

    core = EngineCore(get_preset(preset), seed=0)
    starts = [index * RAMP_S / concurrency for index in range(concurrency)]
    issued = in_window = 0
    end_s = WARMUP_S + REALISTIC_S

    def issue(now_s: float) -> None:
        nonlocal issued
        core.add_request(SimRequest(f"r{issued}", prompt_tokens, max_tokens), now_s)
        issued += 1

    while True:
        next_s = core.next_event_s()
        if starts and (next_s is None or starts[0] <= next_s):
            issue(starts.pop(0))
            continue
        if next_s is None or next_s > end_s:
            return in_window / REALISTIC_S
        for event in core.advance_to(next_s):
            if isinstance(event, FinishedEvent):
                in_window += event.at_s > WARMUP_S
                issue(event.at_s)


def live_engine_setting(preset: str, anchor: Live) -> None:
    """The simulator at an engine setting: modelled time in real time, realistic answers, enough
    connections to keep the batch full; beside the engine model's own rate and the anchor's CPU."""
    from restorelens.sim import get_preset

    config = get_preset(preset)
    batch = min(config.max_num_seqs, REALISTIC_MAX_BATCH)
    concurrency = batch + REALISTIC_EXTRA_CONNECTIONS
    with tempfile.TemporaryDirectory() as tmp:
        trace_file = Path(tmp) / "spans.jsonl"
        process, url = _start(_sim_argv(preset, 1, trace_file))
        try:
            client = Client(int(url.rsplit(":", 1)[1]), completion_body(REALISTIC_MAX_TOKENS, REALISTIC_PROMPT))
            answered, answered_in_all, server_cpu_s = asyncio.run(
                staggered_closed_loop(client, concurrency, process.pid))
        finally:
            _stop(process)
        spans_written = _spans_in(trace_file)
    prompt_tokens = config.estimate_prompt_tokens(len(REALISTIC_PROMPT))
    modelled_rps = modelled_closed_loop(preset, concurrency, prompt_tokens, REALISTIC_MAX_TOKENS)
    rps = answered / REALISTIC_S
    per_request = server_cpu_s / answered
    # every answer runs to max_tokens: a completion has no end-of-sequence in the simulator
    per_token = per_request / REALISTIC_MAX_TOKENS
    anchor_per_token = anchor.cpu_per_request / REALISTIC_MAX_TOKENS
    print(f"live, engine setting {preset}: --time-scale 1 (modelled engine time in real time), a batch of up to "
          f"{batch} of max_num_seqs {config.max_num_seqs}, {concurrency} keep-alive connections (closed loop, started "
          f"over {RAMP_S:.0f} s), "
          f"prompt {len(REALISTIC_PROMPT)} chars ({prompt_tokens} tokens), max_tokens {REALISTIC_MAX_TOKENS}, "
          f"not streamed, spans to a file; {REALISTIC_S:.0f} s window after {WARMUP_S:.0f} s")
    print(f"live: simulator                    {rps:8.1f} req/s   {rps * REALISTIC_MAX_TOKENS:8.0f} tokens/s   "
          f"{rps / modelled_rps:.2f} of the engine model's {modelled_rps:.1f} req/s "
          f"({modelled_rps * REALISTIC_MAX_TOKENS:.0f} tokens/s) for the same loop in virtual time")
    print(f"live: simulator server CPU         {per_request * 1e6:8.0f} us/req  {per_token * 1e6:8.2f} us/token   "
          f"{server_cpu_s / REALISTIC_S:.0%} of a core")
    print(f"live: trivial Starlette anchor     {anchor.cpu_per_request * 1e6:8.0f} us/req  {anchor_per_token * 1e6:8.2f} "
          f"us/token   (same body sizes, answered at once, {anchor.rps:.0f} req/s)")
    print(f"live: simulator vs anchor          {versus(anchor.cpu_per_request, per_request, better='less', worse='more')} "
          "server CPU per request and per token; "
          f"{SPAN_LLM_REQUEST} spans written {spans_written} (of {answered_in_all} requests answered)")


def live() -> None:
    live_shell_cost()
    anchor = _anchor(REALISTIC_MAX_TOKENS)
    for preset in REALISTIC_PRESETS:
        live_engine_setting(preset, anchor)


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
    print(f"virtual: core + {SPAN_LLM_REQUEST} spans  {spans_s * 1e3:8.2f} ms CPU")
    print(f"virtual: bare loop anchor          {bare_s * 1e3:8.4f} ms CPU   ratio core/anchor {core_s / bare_s:8.0f}")


def main() -> None:
    virtual()
    live()


if __name__ == "__main__":
    main()
