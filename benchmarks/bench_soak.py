"""Soak: a long run keeps memory flat, leaks no grant and loses no span.

1. **Virtual**: 1,000,000 lend -> return cycles (a batch request borrows a protected slot, protected
   demand returns, everything finishes) through the admission core and the gate's span emitter
   (real SDK spans into a processor that only counts). RSS is read at the start, after the first
   tenth and at the end. Side by side, in the same run: the same cycles with every record kept
   (``max_retained`` unbounded, as the gate did before the bound), for a fifth as many cycles.
2. **Live storm** (600 s by default): a real gate process (lend policy, traced, OTLP/HTTP to a real
   ``restorelens collect`` process) in front of a stand-in engine process, under mixed faults: the
   engine fails (500), stalls past the gate's timeout (504) and drops connections mid-stream;
   clients leave mid-stream and while queued, send oversize heads (431) and bodies (413), bad and
   deeply nested JSON (400). Interactive demand comes and goes in bursts, so lending periods and
   restoration episodes open and close all through. Reported: the gate's RSS at the start (after a
   warm-up) and at the end with its slope; grants in flight and queued once the load has stopped
   (must be 0); spans the gate ended against spans the collector stored (must be equal).

No speed target here, so no anchor: the unbounded run is the comparison for memory.

Options: ``--cycles N``, ``--live-s S`` (env ``BENCH_SOAK_CYCLES``, ``BENCH_SOAK_LIVE_S``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

CYCLES = int(os.environ.get("BENCH_SOAK_CYCLES", "1000000"))
LIVE_S = float(os.environ.get("BENCH_SOAK_LIVE_S", "600"))
WARMUP_S = 30.0
RATE_PER_S = 80.0
MIB = 1024 * 1024


def rss_bytes(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


# --- 1. virtual ----------------------------------------------------------------------------------


def _virtual_cycles(cycles: int, max_retained: int) -> dict[str, float]:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    from restorelens.gate.admission import Admission
    from restorelens.gate.grants import Grant
    from restorelens.gate.gate_spans import GateSpans
    from restorelens.gate.policies.floors import LendPolicy

    class Counting(SpanProcessor):
        ended = 0

        def on_end(self, span) -> None:  # noqa: ANN001 - the SDK's ReadableSpan
            Counting.ended += 1

    provider = TracerProvider()
    provider.add_span_processor(Counting())
    emitter = GateSpans(provider, policy_name="lend")
    admission = Admission(LendPolicy({"interactive": 3, "batch": 1}, lendable_slots=2), listeners=[emitter],
                          max_retained=max_retained)
    start_rss = rss_bytes()
    tenth_rss = start_rss
    started = time.perf_counter()
    t = 0.0
    for cycle in range(cycles):
        own = admission.request("b-own", "batch", t)
        borrowed = admission.request("b-borrowed", "batch", t + 0.1)
        back = admission.request("i", "interactive", t + 0.2)
        assert isinstance(own, Grant) and isinstance(borrowed, Grant) and isinstance(back, Grant)
        admission.release(own, t + 0.3)
        admission.release(borrowed, t + 0.4)
        admission.release(back, t + 0.5)
        t += 1.0
        if cycle + 1 == cycles // 10:
            tenth_rss = rss_bytes()
    elapsed_s = time.perf_counter() - started
    admission.close(t)
    emitter.flush(*admission.unfinished(), t)
    tracker = admission.tracker
    expected_spans = 2 * cycles  # gate.request spans are the proxy's: here one lend and one restore per cycle
    end_rss = rss_bytes()
    provider.shutdown()
    return {
        "cycles": cycles, "s": elapsed_s, "start_mib": start_rss / MIB, "tenth_mib": tenth_rss / MIB,
        "end_mib": end_rss / MIB, "leaked_grants": admission.in_flight + admission.queued,
        "spans_lost": expected_spans - Counting.ended, "periods": tracker.periods_started, "episodes": tracker.episodes_started,
    }


def virtual(cycles: int) -> None:
    # Each in its own interpreter: RSS of one must not include what the other left on the heap.
    code = "import json,sys; from benchmarks.bench_soak import _virtual_cycles; print(json.dumps(_virtual_cycles(int(sys.argv[1]), int(sys.argv[2]))))"
    root = Path(__file__).resolve().parent.parent
    runs = {}
    for label, n, retained in (("bounded (10,000 kept)", cycles, 10_000), ("unbounded (every record kept)", max(1, cycles // 5), 10**12)):
        out = subprocess.run([sys.executable, "-c", code, str(n), str(retained)], cwd=root, check=True, capture_output=True, text=True)
        runs[label] = json.loads(out.stdout)
    print(f"virtual lend -> return cycles ({cycles:,} bounded; {max(1, cycles // 5):,} unbounded)")
    for label, r in runs.items():
        growth = r["end_mib"] - r["tenth_mib"]
        per_cycle = growth * MIB / max(1, r["cycles"] - r["cycles"] // 10)
        print(f"  {label:31s} {r['cycles']:>9,} cycles in {r['s']:6.1f} s ({r['s'] / r['cycles'] * 1e6:5.1f} µs each); "
              f"RSS start {r['start_mib']:6.1f} MiB, after a tenth {r['tenth_mib']:6.1f}, end {r['end_mib']:6.1f} "
              f"({per_cycle:6.1f} bytes per cycle after the first tenth); leaked grants {r['leaked_grants']}, "
              f"spans lost {r['spans_lost']}")


# --- 2. live storm -------------------------------------------------------------------------------

ENGINE_SOURCE = textwrap.dedent('''
    import asyncio, sys
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route
    from restorelens.serving import bind_socket, serve
    async def completions(request):
        payload = await request.json()
        kind = payload.get("model")
        if kind == "fail":
            return JSONResponse({"error": {"message": "engine exploded"}}, 500)
        if kind == "hang":
            await asyncio.sleep(3)  # past the gate's upstream_timeout_s
        async def chunks():
            for i in range(int(payload.get("max_tokens", 4))):
                yield b"data: {}\\n\\n"
                if kind == "drop" and i == 1:
                    raise RuntimeError("dropped mid-stream")
                await asyncio.sleep(float(payload.get("token_s", 0.01)))
            yield b"data: [DONE]\\n\\n"
        return StreamingResponse(chunks(), media_type="text/event-stream")
    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    sock = bind_socket()
    print(sock.getsockname()[1], flush=True)
    serve(app, sock)
''')

GATE_SOURCE = textwrap.dedent('''
    import sys
    from opentelemetry.sdk.trace import SpanProcessor
    from restorelens.gate import GateSettings, create_gate_app
    from restorelens.serving import bind_socket, serve
    from restorelens.telemetry import build_tracer_provider
    class Counting(SpanProcessor):
        ended = 0
        def on_end(self, span):
            Counting.ended += 1
    upstream, traces_url = sys.argv[1], sys.argv[2]
    provider = build_tracer_provider("restorelens-gate", "otlp", endpoint=traces_url)
    provider.add_span_processor(Counting())
    settings = GateSettings(upstreams={"*": upstream}, policy="lend", floors={"interactive": 8, "batch": 4},
                            lendable_slots=4, queue_limit=16, wait_timeout_s=2.0, upstream_timeout_s=1.0,
                            admin_token="soak-admin-token", max_body_bytes=65536, max_header_bytes=16384)
    app = create_gate_app(settings, tracer_provider=provider)
    sock = bind_socket()
    print(sock.getsockname()[1], flush=True)
    serve(app, sock)
    provider.shutdown()
    print("spans_ended", Counting.ended, file=sys.stderr, flush=True)
''')

#: (weight, what the request does). Interactive demand is added in bursts on top (see _arrivals).
MIX = (
    (40, "batch-ok"), (6, "batch-long"), (5, "fail"), (3, "hang"), (3, "drop"), (5, "leave-mid-stream"),
    (4, "leave-queued"), (2, "oversize-head"), (2, "oversize-body"), (2, "bad-json"), (1, "deep-json"),
)


def _start(args: list[str], cwd: Path, log: Path) -> tuple[subprocess.Popen[str], str]:
    """A server process and the first line it prints (its port on stdout, or the collector's banner).

    Its stderr goes to ``log``, never to a pipe: nobody reads a pipe during the storm, and a server
    blocked writing its 64 KiB-th byte of log stops answering (the engine logs a traceback per drop).
    """
    with log.open("w") as err:
        process = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=err, text=True)
    assert process.stdout is not None
    if args[1] == "-c":
        line = process.stdout.readline().strip()
    else:
        line = ""
        for _ in range(600):
            if (line := log.read_text().partition("\n")[0].strip()) or process.poll() is not None:
                break
            time.sleep(0.05)
    if not line:
        process.kill()
        raise RuntimeError(f"{args[:3]} did not start: {log.read_text()[-2000:]}")
    return process, line


async def _one(client, kind: str, traffic_class: str, outcomes: dict[str, int]) -> None:  # noqa: ANN001 - httpx.AsyncClient
    headers = {"x-traffic-class": traffic_class}
    body: bytes | None = None
    payload: dict = {"model": "ok", "prompt": "soak", "max_tokens": 4, "stream": True}
    if kind == "batch-long":
        payload.update(max_tokens=10, token_s=0.05)
    elif kind in ("fail", "hang", "drop"):
        payload["model"] = kind
    elif kind == "oversize-head":
        headers["x-pad"] = "p" * 20_000
    elif kind == "oversize-body":
        payload["prompt"] = "p" * 100_000
    elif kind == "bad-json":
        body = b'{"model": "ok", "prompt": '
    elif kind == "deep-json":
        body = b"[" * 5000 + b"]" * 5000
    if body is None:
        body = json.dumps(payload).encode()
    leave_after_s = {"leave-queued": 0.05, "leave-mid-stream": 0.15}.get(kind)
    try:
        async with asyncio.timeout(leave_after_s):
            async with client.stream("POST", "/v1/completions", content=body, headers=headers) as response:
                async for _ in response.aiter_raw():
                    pass
        outcomes[str(response.status_code)] = outcomes.get(str(response.status_code), 0) + 1
    except TimeoutError:
        outcomes["client left"] = outcomes.get("client left", 0) + 1
    except Exception as exc:  # an engine drop ends the stream early: the client sees a broken read
        outcomes[type(exc).__name__] = outcomes.get(type(exc).__name__, 0) + 1


async def _storm(gate_url: str, duration_s: float, seed: int) -> dict[str, int]:
    import httpx

    rng = random.Random(seed)
    kinds = [kind for weight, kind in MIX for _ in range(weight)]
    outcomes: dict[str, int] = {}
    tasks: set[asyncio.Task[None]] = set()
    limits = httpx.Limits(max_connections=400, max_keepalive_connections=100)
    async with httpx.AsyncClient(base_url=gate_url, timeout=30, limits=limits) as client:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while (now := loop.time() - start) < duration_s:
            # Interactive demand: 3 s of bursts every 8 s, so loans are made while it is idle and
            # called back when it returns.
            interactive = (now % 8.0) < 3.0 and rng.random() < 0.5
            kind = "interactive-ok" if interactive else rng.choice(kinds)
            traffic_class = "interactive" if interactive else "batch"
            task = loop.create_task(_one(client, kind, traffic_class, outcomes))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            await asyncio.sleep(rng.expovariate(RATE_PER_S))
        await asyncio.gather(*tasks)
    return outcomes


def live(duration_s: float) -> None:
    import duckdb
    import httpx

    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="restorelens-soak-") as tmp:
        db = Path(tmp) / "soak.duckdb"
        logs = Path(tmp)
        collector, banner = _start([sys.executable, "-m", "restorelens", "collect", "--db", str(db), "--port", "0"], root,
                                   logs / "collector.log")
        traces_url = banner.split(" on ", 1)[1].split(" ", 1)[0]
        engine, engine_port = _start([sys.executable, "-c", ENGINE_SOURCE], root, logs / "engine.log")
        gate, gate_port = _start([sys.executable, "-c", GATE_SOURCE, f"http://127.0.0.1:{engine_port}", traces_url], root,
                                 logs / "gate.log")
        gate_url = f"http://127.0.0.1:{gate_port}"
        try:
            warm = asyncio.run(_storm(gate_url, min(WARMUP_S, duration_s / 10), seed=1))
            start_rss = rss_bytes(gate.pid)
            samples = [(0.0, start_rss)]
            started = time.monotonic()

            async def sample_rss(stop: asyncio.Event) -> None:
                while not stop.is_set():
                    await asyncio.sleep(10)
                    samples.append((time.monotonic() - started, rss_bytes(gate.pid)))

            async def run() -> dict[str, int]:
                stop = asyncio.Event()
                sampler = asyncio.get_running_loop().create_task(sample_rss(stop))
                try:
                    return await _storm(gate_url, duration_s, seed=2)
                finally:
                    stop.set()
                    sampler.cancel()

            outcomes = asyncio.run(run())
            end_rss = rss_bytes(gate.pid)
            time.sleep(1.5)  # stalled engine calls end at the gate's timeout
            state = httpx.get(gate_url + "/admin/state", headers={"authorization": "Bearer soak-admin-token"}).json()
        finally:
            for process, timeout_s, sig in ((gate, 60, signal.SIGTERM), (engine, 30, signal.SIGTERM), (collector, 120, signal.SIGINT)):
                process.send_signal(sig)
                process.communicate(timeout=timeout_s)
        gate_err = (logs / "gate.log").read_text()
        ended_lines = [line for line in gate_err.splitlines() if line.startswith("spans_ended")]
        if not ended_lines:
            raise RuntimeError(f"the gate did not report its spans: {gate_err[-2000:]}")
        ended = int(ended_lines[0].split()[1])
        with duckdb.connect(str(db), read_only=True) as con:
            stored = con.execute("select count(*) from otel_traces where \"ServiceName\" = ?", ["restorelens-gate"]).fetchone()[0]
            requests = con.execute(
                "select count(*) from otel_traces where \"ServiceName\" = ? and \"SpanName\" = ?",
                ["restorelens-gate", "gate.request"],
            ).fetchone()[0]
    # Slope of RSS over the storm, least squares, in MiB per minute.
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_r = sum(r for _, r in samples) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in samples) or 1.0
    slope = sum((t - mean_t) * (r - mean_r) for t, r in samples) / var_t * 60 / MIB
    leaked = sum(state["in_flight_own"].values()) + state["in_flight_borrowed"] + sum(state["queued"].values())
    sent = sum(outcomes.values()) + sum(warm.values())
    print(f"live storm {duration_s:.0f} s at ~{RATE_PER_S:.0f} req/s after {min(WARMUP_S, duration_s / 10):.0f} s of warm-up: "
          f"{sent:,} requests; outcomes {dict(sorted(outcomes.items()))}")
    print(f"  gate RSS start {start_rss / MIB:.1f} MiB, end {end_rss / MIB:.1f} MiB, max {max(r for _, r in samples) / MIB:.1f} MiB, "
          f"slope {slope:+.2f} MiB/min over {n} samples")
    print(f"  lending periods {state['lending_periods']:,}; grants in flight or queued after the storm: {leaked}")
    print(f"  spans ended by the gate {ended:,}, stored by the collector {stored:,} (lost {ended - stored}); "
          f"gate.request spans {requests:,}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=CYCLES, help=f"virtual lend -> return cycles (default {CYCLES:,})")
    parser.add_argument("--live-s", type=float, default=LIVE_S, help=f"seconds of live storm (default {LIVE_S:g}); 0 skips it")
    args = parser.parse_args(sys.argv[1:] if argv is None and __name__ == "__main__" else argv or [])
    virtual(args.cycles)
    if args.live_s > 0:
        live(args.live_s)


if __name__ == "__main__":
    main()
