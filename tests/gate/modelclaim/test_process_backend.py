"""ProcessBackend with real child processes: bounded stderr, no engine left behind, a lost port retried.

The engines are STAND-INS (a few lines of Python run as real processes): they must misbehave on
demand (log a lot, never become healthy, lose their port once), which no real engine does.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from opentelemetry.trace import SpanContext, TraceFlags

from restorelens.gate.modelclaim.actions import StartEngine
from restorelens.gate.modelclaim.process_backend import EngineCommand, ProcessBackend, StderrTail
from restorelens.gate.modelclaim.vllm_backend import EngineOperationError
from restorelens.readiness import ReadinessCheck

ENGINE = r"""
import http.server, json, os, sys, time
from pathlib import Path

port, mode, state = int(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
(state / "pid").write_text(str(os.getpid()))
told = {k: v for k, v in os.environ.items() if k.startswith(("TRACE", "OTEL_"))}
(state / "told.json").write_text(json.dumps({"argv": sys.argv[4:], "env": told}))
starts = int((state / "starts").read_text()) + 1 if (state / "starts").exists() else 1
(state / "starts").write_text(str(starts))
if mode == "chatty":
    for _ in range(256):
        sys.stderr.write("x" * 1023 + "\n")
    sys.stderr.write("END-OF-LOG\n")
    sys.stderr.flush()
if mode == "hang":
    time.sleep(600)
if mode == "refuses":
    # vLLM's shape: the engine core's exception, then pages of the server's reaction to it.
    sys.stderr.write("Traceback (most recent call last):\n  File \"x.py\", line 1\n")
    sys.stderr.write("ValueError: Available memory on node 0 is less than requested memory for kv\n")
    for _ in range(40):
        sys.stderr.write("(APIServer) shutting down the engine core after its failure\n")
    sys.stderr.write("RuntimeError: Engine core initialization failed. See root cause above.\n")
    sys.exit(1)
if mode == "killed":
    sys.stderr.write("Loading safetensors checkpoint shards: 100% Completed\n")
    sys.stderr.flush()
    os.kill(os.getpid(), 9)
if mode == "port-taken-once" and starts == 1:
    sys.stderr.write("OSError: [Errno 98] Address already in use\n")
    sys.exit(1)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""


def _backend(tmp_path: Path, mode: str, *, tracing: str = "auto", env: dict[str, str] | None = None,
             **options: Any) -> ProcessBackend:
    script = tmp_path / "engine.py"
    script.write_text(ENGINE)
    command = EngineCommand((sys.executable, "-u", str(script), "{port}", mode, str(tmp_path)), env or {},
                            tracing=tracing)
    return ProcessBackend({"m": command}, poll_interval_s=0.05, **options)


def _start(instance_id: int = 1) -> StartEngine:
    return StartEngine(model="m", instance_id=instance_id, pod="pod-1", gpus=(0,))


def test_stderr_tail_keeps_only_the_last_bytes() -> None:
    tail = StderrTail(max_bytes=10)
    for chunk in (b"abcdef", b"ghij", b"klm", b"", b"n"):
        tail.append(chunk)
    assert tail.bytes() == b"efghijklmn" and len(tail) == 10
    tail.append(b"0123456789ABCDEF")
    assert tail.bytes() == b"6789ABCDEF"


def test_a_chatty_engine_keeps_a_bounded_stderr(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = _backend(tmp_path, "chatty", start_timeout_s=120, stderr_tail_bytes=4096)
        try:
            await backend.start(_start(), 0.0)
            for _ in range(500):  # the drain may still be reading what was written before /health
                if backend.stderr_tail("m", 1).endswith(b"END-OF-LOG\n"):
                    break
                await asyncio.sleep(0.01)
            kept = backend.stderr_tail("m", 1)
            assert kept.endswith(b"END-OF-LOG\n") and len(kept) == 4096  # 256 KiB written
        finally:
            await backend.close()

    asyncio.run(scenario())


def test_an_engine_that_never_gets_healthy_is_stopped(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = _backend(tmp_path, "hang", start_timeout_s=0.5, stop_timeout_s=5)
        try:
            with pytest.raises(EngineOperationError, match="not healthy within 0.5 s"):
                await backend.start(_start(), 0.0)
            pid = int((tmp_path / "pid").read_text())
            assert backend.pid("m", 1) is None
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)  # terminated and reaped at once, not at gate shutdown
        finally:
            await backend.close()

    asyncio.run(scenario())


def test_an_engine_that_exits_fails_its_start_at_once_naming_its_first_exception(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = _backend(tmp_path, "refuses", start_timeout_s=600)
        try:
            with pytest.raises(EngineOperationError) as raised:
                await backend.start(_start(), 0.0)
            message = str(raised.value)
            assert "the engine process exited before it was healthy (exit code 1)" in message  # not the timeout
            assert "raised ValueError: Available memory on node 0" in message
            assert message.endswith("RuntimeError: Engine core initialization failed. See root cause above.")
            assert (tmp_path / "starts").read_text() == "1"  # an engine's own refusal is not retried
        finally:
            await backend.close()

    asyncio.run(scenario())


def test_an_engine_killed_by_a_signal_says_so(tmp_path: Path) -> None:
    """An engine the kernel kills (the OOM killer's SIGKILL) writes no exception: the signal is
    the only account of why it ended, so the failure names it."""
    async def scenario() -> None:
        backend = _backend(tmp_path, "killed", start_timeout_s=600)
        try:
            with pytest.raises(EngineOperationError) as raised:
                await backend.start(_start(), 0.0)
            message = str(raised.value)
            assert "exited before it was healthy (killed by SIGKILL)" in message
            assert message.endswith("Loading safetensors checkpoint shards: 100% Completed")
        finally:
            await backend.close()

    asyncio.run(scenario())


def test_a_start_that_lost_its_port_is_retried_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = _backend(tmp_path, "port-taken-once", start_timeout_s=120)
        try:
            answer = await backend.start(_start(), 0.0)
            assert answer.url == backend.instance_url("m", 1)
            assert (tmp_path / "starts").read_text() == "2"
            assert await backend.alive("m", 1)
        finally:
            await backend.close()

    asyncio.run(scenario())


def test_a_started_engine_is_a_cold_start_not_an_attach(tmp_path: Path) -> None:
    async def scenario() -> None:
        backend = _backend(tmp_path, "ok", start_timeout_s=120)
        try:
            answer = await backend.start(_start(), 0.0)
            # An attach nobody waited for is no wake; a process this backend started is one.
            assert (answer.attached, answer.asleep) == (False, False)
        finally:
            await backend.close()

    asyncio.run(scenario())


def test_a_started_engine_must_also_pass_the_claims_check(tmp_path: Path) -> None:
    """The stand-in answers /health 200 but no completion (501): with a completion check it is not
    ready, and its start fails and stops it as one that never got healthy."""
    async def scenario() -> None:
        backend = _backend(tmp_path, "ok", start_timeout_s=0.5, stop_timeout_s=5, readiness=ReadinessCheck("completion"))
        try:
            with pytest.raises(EngineOperationError) as raised:
                await backend.start(_start(), 0.0)
            assert "not ready after the start within 0.5 s by its readiness check (a one-token completion -> 2xx); " \
                   "last: POST /v1/completions answered 501" in str(raised.value)
            with pytest.raises(ProcessLookupError):
                os.kill(int((tmp_path / "pid").read_text()), 0)
        finally:
            await backend.close()

    asyncio.run(scenario())


WAKE = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=False,
                   trace_flags=TraceFlags(TraceFlags.SAMPLED))


@pytest.mark.parametrize("tracing", ["auto", "env", "off"])
def test_a_started_engine_is_told_the_trace_of_its_wake(tmp_path: Path, tracing: str) -> None:
    """The engine process's own environment holds the wake's TRACEPARENT and the gate's endpoint
    (not vLLM or the simulator, so ``auto`` adds no flag); a claim's own env value is kept."""
    endpoint = "http://127.0.0.1:4318/v1/traces"

    async def scenario() -> dict[str, Any]:
        backend = _backend(tmp_path, "ok", tracing=tracing, env={"OTEL_SERVICE_NAME": "engine-m"},
                           start_timeout_s=120, otlp_traces_endpoint=endpoint)
        try:
            await backend.start(StartEngine("m", 1, "pod-1", (0,), trace=WAKE), 0.0)
        finally:
            await backend.close()
        return json.loads((tmp_path / "told.json").read_text())

    told = asyncio.run(scenario())
    expected = {"OTEL_SERVICE_NAME": "engine-m"}
    if tracing != "off":
        expected |= {"TRACEPARENT": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                     "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint}
    inherited = {k for k in os.environ if k.startswith(("TRACE", "OTEL_"))}
    assert {k: v for k, v in told["env"].items() if k not in inherited or k in expected} == expected
    assert told["argv"] == []
