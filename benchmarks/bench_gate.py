"""Added latency of the gate over a direct call to the engine, next to nginx as a plain proxy_pass.

Setup (all on 127.0.0.1, each server in its own process so the load client does not share a GIL
with them): a minimal OpenAI-shaped engine (constant answer: the engine's own time cancels out),
the gate in front of it (policy fcfs without a cap, so admission never queues and we measure the
proxy path; once with tracing off and once with tracing on into a batch processor that drops the
spans), and Debian's nginx with ``proxy_pass`` and upstream keep-alive.

Open-loop load at 100 and 500 requests/s from a lean keep-alive HTTP/1.1 client; latency is from
sending the request to reading the whole answer. ``added pXX`` = target pXX - direct pXX from the
same run, and the ratio to nginx's added pXX. Goals at 500 req/s: <= 0.5 ms p50 and <= 2 ms p99
added. Each row also gives the proxy process's CPU per request (from /proc): on a shared machine
wall-clock latency depends on who else runs, CPU per request much less. Then closed-loop
throughput of the gate with tracing on vs off, alternated and best-of, as a wall rate and as gate
CPU per request (goal: <= 10 % loss).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.http_load import Client, closed_loop, cpu_seconds, event_loop_and_parser, open_loop, percentile

RATES_PER_S = (100, 500)
DURATION_S = float(os.environ.get("BENCH_GATE_DURATION_S", "4"))
THROUGHPUT_S = float(os.environ.get("BENCH_GATE_THROUGHPUT_S", "3"))
THROUGHPUT_CONCURRENCY = 16
THROUGHPUT_REPEATS = 2
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
BODY = b'{"model":"tiny","prompt":"hello","max_tokens":4}'

ENGINE_SOURCE = textwrap.dedent('''
    import sys, uvicorn
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route
    ANSWER = b'{"id":"cmpl-1","object":"text_completion","model":"tiny","choices":[{"index":0,"text":" a b c d","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":4,"total_tokens":5}}'
    async def completions(request):
        await request.body()
        return Response(ANSWER, media_type="application/json")
    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
''')

GATE_SOURCE = textwrap.dedent('''
    import sys
    from restorelens.gate import GateSettings, create_gate_app
    from restorelens.serving import bind_socket, serve
    from restorelens.telemetry import build_tracer_provider
    port, upstream, tracing = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "on"
    provider = build_tracer_provider("restorelens-gate", "none") if tracing else None
    settings = GateSettings(upstreams={"*": upstream}, policy="fcfs", tracing=tracing, port=port)
    app = create_gate_app(settings, tracer_provider=provider)
    serve(app, bind_socket("127.0.0.1", port))  # the server `restorelens gate` runs: bounded heads included
''')

NGINX_CONF = """
worker_processes 1;
daemon off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    # nginx closes a keep-alive connection after 1000 requests by default (both sides); the
    # other targets never do, and the load client does not reconnect mid-run
    keepalive_requests 1000000;
    upstream engine {{ server 127.0.0.1:{engine_port}; keepalive 64; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server for port {port} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on port {port} after {timeout_s} s")


def new_client(port: int) -> Client:
    return Client(port, BODY, extra_headers=b"x-traffic-class: interactive\r\n")


def start_python(source: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", source, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def start_nginx(tmp: Path, engine_port: int) -> tuple[subprocess.Popen, int] | None:
    if NGINX is None:
        return None
    port = free_port()
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (tmp / sub).mkdir(exist_ok=True)
    conf = tmp / "nginx.conf"
    conf.write_text(NGINX_CONF.format(tmp=tmp, engine_port=engine_port, port=port))
    process = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(tmp)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_listening(port, process)
    return process, port


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Target:
    name: str
    port: int
    process: subprocess.Popen  # whose CPU is charged to this target (the proxy; the engine for direct)


def main() -> None:
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            engine_port = free_port()
            engine = start_python(ENGINE_SOURCE, str(engine_port))
            processes.append(engine)
            wait_listening(engine_port, engine)
            targets = [Target("direct", engine_port, engine)]
            for tracing in ("off", "on"):
                port = free_port()
                gate = start_python(GATE_SOURCE, str(port), f"http://127.0.0.1:{engine_port}", tracing)
                processes.append(gate)
                wait_listening(port, gate)
                targets.append(Target(f"gate (tracing {tracing})", port, gate))
            nginx = start_nginx(tmp, engine_port)
            if nginx is not None:
                processes.append(nginx[0])
                targets.append(Target("nginx proxy_pass", nginx[1], nginx[0]))
            else:
                print("nginx not found (apt-get install -y nginx): its column is left out")
            print(f"servers: engine and gates on {event_loop_and_parser(engine.pid)} (uvicorn loop/http 'auto')")
            run(targets, engine)
        finally:
            for process in reversed(processes):
                stop(process)


async def _timed_open_loop(target: Target, rate: int) -> tuple[list[float], float]:
    """Latencies, and the target process's CPU seconds per request during the run."""
    client = new_client(target.port)
    for _ in range(20):  # warm connections and the servers' code paths
        await client.call()
    before = cpu_seconds(target.process.pid)
    latencies = await open_loop(client, rate, DURATION_S, warmup=0)
    spent = cpu_seconds(target.process.pid) - before
    client.close()
    return latencies, spent / len(latencies)


async def _timed_closed_loop(target: Target) -> tuple[float, float]:
    """(requests/s, the target's CPU seconds per request)."""
    client = new_client(target.port)
    await closed_loop(client, THROUGHPUT_CONCURRENCY, total=200)
    before = cpu_seconds(target.process.pid)
    done, seconds = await closed_loop(client, THROUGHPUT_CONCURRENCY, duration_s=THROUGHPUT_S)
    spent = cpu_seconds(target.process.pid) - before
    client.close()
    return done / seconds, spent / done


def run(targets: list[Target], engine: subprocess.Popen) -> None:
    print(f"open loop, {DURATION_S:.0f} s per rate and target; latency in ms (added = target - direct); "
          "CPU = the proxy process's CPU per request (direct: the engine's)")
    print(f"{'rate':>6} {'target':<20} {'p50':>7} {'p99':>7} {'added p50':>10} {'added p99':>10} {'CPU us/req':>11} {'errors':>7}")
    summary: dict[tuple[int, str], tuple[float, float]] = {}
    for rate in RATES_PER_S:
        direct50 = direct99 = 0.0
        for target in targets:
            latencies, cpu_per_request = asyncio.run(_timed_open_loop(target, rate))
            p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
            if target.name == "direct":
                direct50, direct99 = p50, p99
            added = (p50 - direct50, p99 - direct99)
            summary[(rate, target.name)] = added
            errors = sum(1 for x in latencies if x == float("inf"))
            print(f"{rate:>6} {target.name:<20} {p50 * 1e3:7.3f} {p99 * 1e3:7.3f} {added[0] * 1e3:10.3f} "
                  f"{added[1] * 1e3:10.3f} {cpu_per_request * 1e6:11.0f} {errors:7d}")
    names = [t.name for t in targets]
    for rate in RATES_PER_S:
        for name in [n for n in names if n.startswith("gate")]:
            a50, a99 = summary[(rate, name)]
            line = f"{name} at {rate} req/s: added p50 {a50 * 1e3:.3f} ms, p99 {a99 * 1e3:.3f} ms"
            if rate == max(RATES_PER_S):
                verdict = "meets" if a50 <= 0.5e-3 and a99 <= 2e-3 else "misses"
                line += f" (goal 0.5 / 2): {verdict} the goal"
            if "nginx proxy_pass" in names:
                n50, n99 = summary[(rate, "nginx proxy_pass")]
                line += (f"; nginx adds {n50 * 1e3:.3f} / {n99 * 1e3:.3f} ms, ratio p50 {_ratio(a50, n50)}, "
                         f"p99 {_ratio(a99, n99)}")
            print(line)
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
          "(latency needs an idle machine; CPU per request is the comparable figure on a shared one)")
    gates = {t.name: t for t in targets if t.name.startswith("gate")}
    best: dict[str, tuple[float, float]] = {}
    for _ in range(THROUGHPUT_REPEATS):  # alternate off/on so a load spike hits both; keep each best
        for name, target in gates.items():
            rate, cpu = asyncio.run(_timed_closed_loop(target))
            old = best.get(name)
            best[name] = (max(rate, old[0]), min(cpu, old[1])) if old else (rate, cpu)
    (off_rate, off_cpu), (on_rate, on_cpu) = best["gate (tracing off)"], best["gate (tracing on)"]
    print(f"closed loop, {THROUGHPUT_CONCURRENCY} connections, best of {THROUGHPUT_REPEATS}: "
          f"tracing off {off_rate:.0f} req/s ({off_cpu * 1e6:.0f} us gate CPU/req), "
          f"on {on_rate:.0f} req/s ({on_cpu * 1e6:.0f} us gate CPU/req)")
    print(f"tracing throughput loss: {(1 - on_rate / off_rate) * 100:.1f} % wall, "
          f"{(1 - off_cpu / on_cpu) * 100:.1f} % by gate CPU per request (goal <= 10 %)")


def _ratio(value: float, reference: float) -> str:
    return f"{value / reference:.1f}x" if reference > 0 else "n/a (nginx adds nothing measurable)"


if __name__ == "__main__":
    main()
