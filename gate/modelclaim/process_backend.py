"""Start and stop real engine processes (vLLM or ``restorelens sim``): the cold-start path.

Each claim has an ``EngineCommand``: an argv whose items may hold ``{host}``, ``{port}`` and
``{model}``; the backend picks a free loopback port per instance, appends the claim's
``engine_args`` as ``--flag value`` (an empty value is a bare flag), and starts the process in its
own session so that stopping it also stops the workers it spawned. Readiness is polled on
``GET /health``; the ready time is that first 200 answer, unless the claim's readiness check is
``completion`` or a JSON check: then the check is repeated after it and the ready time is its first
yes. (``auto`` needs no more than ``/health`` here: an engine this backend just started cannot be
asleep.) The start is a cold start, never an attach. Sleep and wake go through vLLM's HTTP sleep
API on the instance's URL (``VllmSleepBackend``), judged by the claim's check. Every process it
started is stopped by ``stop``/``close``: SIGTERM to its process group, then SIGKILL after
``stop_timeout_s``; so is one whose start failed or timed out. An engine's stderr is drained from a
pipe into a ring that keeps only its last ``stderr_tail_bytes`` (engines log for their whole life;
only the end explains a failure). The port is picked by binding and closing a socket, so another
program can take it before the engine binds: a start whose engine exits saying the address is in
use is retried once on a new port. Each engine is started in the trace of the wake that wanted it
(``engine_tracing``: its ``TRACEPARENT`` and where to export), so its own startup spans join the
wake's trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from restorelens.clock import Clock
from restorelens.gate.modelclaim.actions import StartEngine, StopEngine
from restorelens.gate.modelclaim.backends import EngineAnswer
from restorelens.gate.modelclaim.engine_tracing import AUTO, EngineTracing
from restorelens.gate.modelclaim.vllm_backend import (
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_START_TIMEOUT_S,
    EngineOperationError,
    VllmSleepBackend,
    poll_health,
)
from restorelens.readiness import AUTO, HEALTH, ReadinessCheck
from restorelens.serving import bind_socket

__all__ = ["EngineCommand", "ProcessBackend", "StderrTail"]

LOOPBACK = "127.0.0.1"
DEFAULT_STDERR_TAIL_BYTES = 64 * 1024
_READ_CHUNK_BYTES = 4096
_TAIL_SHOWN_CHARS = 400
#: A Python exception's last line ("ValueError: Available memory ..."): vLLM's reason for refusing
#: to start, which its shutdown chatter usually pushes out of the last few hundred characters.
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception): .+$", re.MULTILINE)
#: What vLLM (uvicorn), ``restorelens sim`` and most servers print when the port was taken.
_BIND_FAILURE = "address already in use"


@dataclass(frozen=True, slots=True)
class EngineCommand:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    engine_args: Mapping[str, str] = field(default_factory=dict)
    #: The claim's ``engine_tracing`` mode (``engine_tracing.ENGINE_TRACING_MODES``).
    tracing: str = AUTO

    def render(self, *, host: str, port: int, model: str) -> list[str]:
        argv = [arg.format(host=host, port=port, model=model) for arg in self.argv]
        for flag, value in self.engine_args.items():
            argv.append(f"--{flag}")
            if value != "":
                argv.append(value)
        return argv


class StderrTail:
    """The last ``max_bytes`` of a stream: older chunks are dropped as new ones arrive."""

    def __init__(self, max_bytes: int = DEFAULT_STDERR_TAIL_BYTES) -> None:
        self.max_bytes = max_bytes
        self._chunks: deque[bytes] = deque()
        self._size = 0

    def append(self, chunk: bytes) -> None:
        if len(chunk) >= self.max_bytes:
            self._chunks.clear()
            chunk = chunk[-self.max_bytes:]
            self._size = 0
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size > self.max_bytes:
            excess = self._size - self.max_bytes
            first = self._chunks[0]
            if len(first) <= excess:
                self._chunks.popleft()
                self._size -= len(first)
            else:
                self._chunks[0] = first[excess:]
                self._size -= excess

    def __len__(self) -> int:
        return self._size

    def bytes(self) -> bytes:
        return b"".join(self._chunks)

    def text(self) -> str:
        return self.bytes().decode("utf-8", "replace")

    async def drain(self, stream: asyncio.StreamReader) -> None:
        """Read ``stream`` to its end (the pipe must be read, or the engine blocks once it is full)."""
        while chunk := await stream.read(_READ_CHUNK_BYTES):
            self.append(chunk)


@dataclass(slots=True)
class _Process:
    proc: asyncio.subprocess.Process
    stderr: StderrTail
    drain: asyncio.Task[None]


def _exit_status(returncode: int | None) -> str:
    """How the process ended: an engine killed by a signal (the kernel's OOM killer sends SIGKILL)
    often writes nothing, so the signal is the only account of it."""
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _failure_message(error: str, stderr: str) -> str:
    """``error`` with the engine's first exception line and the end of its stderr."""
    shown = stderr[-_TAIL_SHOWN_CHARS:].strip()
    if not shown:
        return error
    raised = [m.group(0).strip() for m in _EXCEPTION_LINE.finditer(stderr)]
    # The first exception is the cause; later ones are the workers' and the server's reactions to it.
    cause = f"; it raised {raised[0][:_TAIL_SHOWN_CHARS]}" if raised and raised[0] not in shown else ""
    return f"{error}{cause}; its stderr ends: {shown}"


def _free_port() -> int:
    # The socket closes before the engine binds: a small race; start() retries once when it is lost.
    with bind_socket(LOOPBACK, 0) as sock:
        return sock.getsockname()[1]


class ProcessBackend(VllmSleepBackend):
    """Engines as child processes, one per instance, from ``commands[model]``."""

    def __init__(
        self,
        commands: Mapping[str, EngineCommand],
        *,
        clock: Clock | None = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        stop_timeout_s: float = 10.0,
        stderr_tail_bytes: int = DEFAULT_STDERR_TAIL_BYTES,
        readiness: ReadinessCheck | None = None,
        otlp_traces_endpoint: str | None = None,
    ) -> None:
        super().__init__({}, clock=clock, poll_interval_s=poll_interval_s, start_timeout_s=start_timeout_s,
                         readiness=readiness)
        self.commands = dict(commands)
        #: Where the gate exports its spans (OTLP/HTTP, ``…/v1/traces``): the engines it starts export there too.
        self.otlp_traces_endpoint = otlp_traces_endpoint
        self.stop_timeout_s = stop_timeout_s
        self.stderr_tail_bytes = stderr_tail_bytes
        self._processes: dict[tuple[str, int], _Process] = {}

    def pid(self, model: str, instance_id: int) -> int | None:
        process = self._processes.get((model, instance_id))
        return process.proc.pid if process else None

    def stderr_tail(self, model: str, instance_id: int) -> bytes:
        """What the running instance's stderr ring holds (at most ``stderr_tail_bytes``)."""
        process = self._processes.get((model, instance_id))
        return process.stderr.bytes() if process else b""

    async def start(self, action: StartEngine, now_s: float) -> EngineAnswer:
        command = self.commands.get(action.model)
        if command is None:
            raise EngineOperationError(f"no engine command for model {action.model}")
        key = (action.model, action.instance_id)
        for attempt in (1, 2):
            port = _free_port()
            url = f"http://{LOOPBACK}:{port}"
            tracing = EngineTracing(command.tracing, self.otlp_traces_endpoint)
            argv, trace_env = tracing.apply(command.render(host=LOOPBACK, port=port, model=action.model),
                                            command.env, action.trace)
            proc = await self._spawn(key, argv, {**command.env, **trace_env})
            self._instances[key] = url
            try:
                ready_at_s = await self._started(url, action.model, proc)
            except EngineOperationError as exc:
                # A start that failed or timed out must not leave its engine running until shutdown.
                exited = proc.returncode is not None
                tail = await self._terminate(key)
                self._instances.pop(key, None)
                if attempt == 1 and exited and _BIND_FAILURE in tail.lower():
                    continue  # the free port was taken before the engine bound it: once more, new port
                error = f"{exc} ({_exit_status(proc.returncode)})" if exited else str(exc)
                raise EngineOperationError(_failure_message(error, tail)) from None
            return EngineAnswer(ready_at_s, url)
        raise AssertionError("unreachable: the second attempt returns or raises")

    async def _started(self, url: str, model: str, proc: asyncio.subprocess.Process) -> float:
        """The ready time of the engine just spawned at ``url``: its first ``/health`` 200, or the
        first yes of a readiness check that asks more than ``/health`` can say. Polled finely
        around the start time the lifecycle expects (``polls``), coarsely before it."""
        deadline_s = self.clock.now_s() + self.start_timeout_s
        running = lambda: proc.returncode is None  # noqa: E731
        polls = self.start_polls(model)
        ready_at_s = await poll_health(self.client, url, self.clock, interval_s=self.poll_interval_s,
                                       timeout_s=self.start_timeout_s, still_running=running, polls=polls)
        if self.readiness.kind in (AUTO, HEALTH):
            return ready_at_s
        ready_at_s, _ = await self.await_ready(url, model, deadline_s=deadline_s, timeout_s=self.start_timeout_s,
                                               when="after the start", still_running=running, polls=polls)
        return ready_at_s

    async def _spawn(self, key: tuple[str, int], argv: list[str], env: Mapping[str, str]) -> asyncio.subprocess.Process:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env={**os.environ, **env},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise EngineOperationError(f"cannot start {argv[0]!r} for {key[0]}: {exc.strerror or exc}") from None
        tail = StderrTail(self.stderr_tail_bytes)
        assert proc.stderr is not None
        drain = asyncio.get_running_loop().create_task(tail.drain(proc.stderr), name=f"stderr:{key[0]}:{key[1]}")
        self._processes[key] = _Process(proc, tail, drain)
        return proc

    async def alive(self, model: str, instance_id: int) -> bool:
        process = self._processes.get((model, instance_id))
        if process is None or process.proc.returncode is not None:
            return False
        return await super().alive(model, instance_id)

    async def stop(self, action: StopEngine, now_s: float) -> None:
        await self._terminate((action.model, action.instance_id))
        await super().stop(action, now_s)

    async def close(self) -> None:
        for key in list(self._processes):
            await self._terminate(key)
        await super().close()

    async def _terminate(self, key: tuple[str, int]) -> str:
        """Stop the instance's process group; return the end of its stderr."""
        process = self._processes.pop(key, None)
        if process is None:
            return ""
        proc = process.proc
        try:
            if proc.returncode is None:
                self._signal_group(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), self.stop_timeout_s)
                except TimeoutError:
                    self._signal_group(proc.pid, signal.SIGKILL)
                    await proc.wait()
            # The group is gone, so the pipe is at its end; a stray holder of it must not hang us.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(process.drain), self.stop_timeout_s)
        finally:
            process.drain.cancel()
        return process.stderr.text()

    @staticmethod
    def _signal_group(pid: int, sig: signal.Signals) -> None:
        # The process leads its own session (start_new_session), so its group id is its pid.
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
