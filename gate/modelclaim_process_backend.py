"""Start and stop real engine processes (vLLM or ``restorelens sim``): the cold-start path.

Each claim has an ``EngineCommand``: an argv whose items may hold ``{host}``, ``{port}`` and
``{model}``; the backend picks a free loopback port per instance, appends the claim's
``engine_args`` as ``--flag value`` (an empty value is a bare flag), and starts the process in its
own session so that stopping it also stops the workers it spawned. Readiness is polled on
``GET /health``; the ready time is that first 200 answer. Sleep and wake go through vLLM's HTTP
sleep API on the instance's URL (``VllmSleepBackend``). Every process it started is stopped by
``stop``/``close``: SIGTERM to its process group, then SIGKILL after ``stop_timeout_s``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO

from restorelens.clock import Clock
from restorelens.gate.modelclaim_actions import StartEngine, StopEngine
from restorelens.gate.modelclaim_backends import EngineAnswer
from restorelens.gate.modelclaim_vllm_backend import (
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_START_TIMEOUT_S,
    EngineOperationError,
    VllmSleepBackend,
    poll_health,
)
from restorelens.serving import bind_socket

__all__ = ["EngineCommand", "ProcessBackend"]

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class EngineCommand:
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    engine_args: Mapping[str, str] = field(default_factory=dict)

    def render(self, *, host: str, port: int, model: str) -> list[str]:
        argv = [arg.format(host=host, port=port, model=model) for arg in self.argv]
        for flag, value in self.engine_args.items():
            argv.append(f"--{flag}")
            if value != "":
                argv.append(value)
        return argv


@dataclass(slots=True)
class _Process:
    proc: asyncio.subprocess.Process
    stderr: IO[bytes]


def _free_port() -> int:
    # The socket closes before the engine binds: a small race, accepted for loopback test ports.
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
    ) -> None:
        super().__init__({}, clock=clock, poll_interval_s=poll_interval_s, start_timeout_s=start_timeout_s)
        self.commands = dict(commands)
        self.stop_timeout_s = stop_timeout_s
        self._processes: dict[tuple[str, int], _Process] = {}

    def pid(self, model: str, instance_id: int) -> int | None:
        process = self._processes.get((model, instance_id))
        return process.proc.pid if process else None

    async def start(self, action: StartEngine, now_s: float) -> EngineAnswer:
        command = self.commands.get(action.model)
        if command is None:
            raise EngineOperationError(f"no engine command for model {action.model}")
        port = _free_port()
        url = f"http://{LOOPBACK}:{port}"
        argv = command.render(host=LOOPBACK, port=port, model=action.model)
        stderr = tempfile.TemporaryFile()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                env={**os.environ, **command.env},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        except OSError as exc:
            stderr.close()
            raise EngineOperationError(f"cannot start {argv[0]!r} for {action.model}: {exc.strerror or exc}") from None
        key = (action.model, action.instance_id)
        self._processes[key] = _Process(proc, stderr)
        self._instances[key] = url
        try:
            ready_at_s = await poll_health(
                self.client, url, self.clock, interval_s=self.poll_interval_s, timeout_s=self.start_timeout_s,
                still_running=lambda: proc.returncode is None,
            )
        except EngineOperationError as exc:
            raise EngineOperationError(f"{exc}{self._stderr_tail(key)}") from None
        return EngineAnswer(ready_at_s, url)

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

    async def _terminate(self, key: tuple[str, int]) -> None:
        process = self._processes.pop(key, None)
        if process is None:
            return
        proc = process.proc
        try:
            if proc.returncode is None:
                self._signal_group(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), self.stop_timeout_s)
                except TimeoutError:
                    self._signal_group(proc.pid, signal.SIGKILL)
                    await proc.wait()
        finally:
            process.stderr.close()

    @staticmethod
    def _signal_group(pid: int, sig: signal.Signals) -> None:
        # The process leads its own session (start_new_session), so its group id is its pid.
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass

    def _stderr_tail(self, key: tuple[str, int]) -> str:
        process = self._processes.get(key)
        if process is None:
            return ""
        process.stderr.seek(0)
        tail = process.stderr.read()[-400:].decode("utf-8", "replace").strip()
        return f"; its stderr ends: {tail}" if tail else ""
