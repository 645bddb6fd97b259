"""Added latency of the gate over a direct call to the engine, next to nginx as a plain proxy_pass.

Setup (all on 127.0.0.1, each server in its own process so the load client does not share a GIL
with them): a minimal OpenAI-shaped engine (constant answer: the engine's own time cancels out),
the gate in front of it (policy fcfs without a cap, so admission never queues and we measure the
proxy path; once with tracing off and once with tracing on into a batch processor that drops the
spans), and Debian's nginx with ``proxy_pass`` and upstream keep-alive.

Open-loop load at 100 and 500 requests/s from a lean keep-alive HTTP/1.1 client; latency is from
sending the request to reading the whole answer. ``added pXX`` = target pXX - direct pXX from the
same run. Goals at 500 req/s: <= 0.5 ms p50 and <= 2 ms p99 added. Then closed-loop throughput of
the gate with tracing on vs off (goal: <= 10 % loss).
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
from pathlib import Path

RATES_PER_S = (100, 500)
DURATION_S = float(os.environ.get("BENCH_GATE_DURATION_S", "4"))
THROUGHPUT_S = float(os.environ.get("BENCH_GATE_THROUGHPUT_S", "3"))
THROUGHPUT_CONCURRENCY = 16
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
    import sys, uvicorn
    from restorelens.gate import GateSettings, create_gate_app
    from restorelens.telemetry import build_tracer_provider
    port, upstream, tracing = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "on"
    provider = build_tracer_provider("restorelens-gate", "none") if tracing else None
    settings = GateSettings(upstreams={"*": upstream}, policy="fcfs", tracing=tracing, port=port)
    app = create_gate_app(settings, tracer_provider=provider)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
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
    upstream engine {{ server 127.0.0.1:{engine_port}; keepalive 64; }}
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


class Client:
    """A lean keep-alive HTTP/1.1 client: the load generator must cost less than what it measures."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.request = (
            b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"x-traffic-class: interactive\r\nContent-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY
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


async def open_loop(port: int, rate_per_s: int, duration_s: float) -> list[float]:
    client = Client(port)
    for _ in range(20):  # warm connections and the servers' code paths
        await client.call()
    count = int(rate_per_s * duration_s)
    tasks: list[asyncio.Task[float]] = []
    begin = time.perf_counter()
    for i in range(count):
        delay = begin + i / rate_per_s - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(client.call()))
    latencies = await asyncio.gather(*tasks)
    client.close()
    return sorted(latencies)


async def closed_loop(port: int, concurrency: int, duration_s: float) -> float:
    client = Client(port)
    done = 0
    stop_at = time.perf_counter() + duration_s

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop_at:
            await client.call()
            done += 1

    begin = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    rate = done / (time.perf_counter() - begin)
    client.close()
    return rate


def percentile(sorted_values: list[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


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


def main() -> None:
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            engine_port = free_port()
            engine = start_python(ENGINE_SOURCE, str(engine_port))
            processes.append(engine)
            wait_listening(engine_port, engine)
            targets: dict[str, int] = {"direct": engine_port}
            for tracing in ("off", "on"):
                port = free_port()
                gate = start_python(GATE_SOURCE, str(port), f"http://127.0.0.1:{engine_port}", tracing)
                processes.append(gate)
                wait_listening(port, gate)
                targets[f"gate (tracing {tracing})"] = port
            nginx = start_nginx(tmp, engine_port)
            if nginx is not None:
                processes.append(nginx[0])
                targets["nginx proxy_pass"] = nginx[1]
            else:
                print("nginx not found (apt-get install -y nginx): its column is left out")
            run(targets)
        finally:
            for process in reversed(processes):
                stop(process)


def run(targets: dict[str, int]) -> None:
    print(f"open loop, {DURATION_S:.0f} s per rate and target; latency in ms (added = target - direct)")
    print(f"{'rate':>6} {'target':<20} {'p50':>7} {'p99':>7} {'added p50':>10} {'added p99':>10} {'errors':>7}")
    summary: dict[tuple[int, str], tuple[float, float]] = {}
    for rate in RATES_PER_S:
        results = {name: asyncio.run(open_loop(port, rate, DURATION_S)) for name, port in targets.items()}
        direct = results["direct"]
        base50, base99 = percentile(direct, 0.5), percentile(direct, 0.99)
        for name, latencies in results.items():
            p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
            added = (p50 - base50, p99 - base99)
            summary[(rate, name)] = added
            errors = sum(1 for x in latencies if x == float("inf"))
            print(f"{rate:>6} {name:<20} {p50 * 1e3:7.3f} {p99 * 1e3:7.3f} {added[0] * 1e3:10.3f} {added[1] * 1e3:10.3f} {errors:7d}")
    top = max(RATES_PER_S)
    for name in [n for n in targets if n.startswith("gate")]:
        a50, a99 = summary[(top, name)]
        verdict = "meets" if a50 <= 0.5e-3 and a99 <= 2e-3 else "misses"
        print(f"{name} at {top} req/s: added p50 {a50 * 1e3:.3f} ms (goal 0.5), p99 {a99 * 1e3:.3f} ms (goal 2): {verdict} the goal")
        if "nginx proxy_pass" in targets:
            n99 = summary[(top, "nginx proxy_pass")][1]
            ratio = a99 / n99 if n99 > 0 else float("inf")
            print(f"  ratio to nginx's added p99 ({n99 * 1e3:.3f} ms): {ratio:.1f}x")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (added latency is only meaningful on an idle machine)")
    rates = {name: asyncio.run(closed_loop(targets[name], THROUGHPUT_CONCURRENCY, THROUGHPUT_S))
             for name in ("gate (tracing off)", "gate (tracing on)")}
    off, on = rates["gate (tracing off)"], rates["gate (tracing on)"]
    loss = 1 - on / off
    print(f"closed loop, {THROUGHPUT_CONCURRENCY} connections: tracing off {off:.0f} req/s, on {on:.0f} req/s, "
          f"loss {loss * 100:.1f} % (goal <= 10 %)")


if __name__ == "__main__":
    main()
