"""Engine control behind one interface, and the in-process backend for virtual time.

``EngineBackend`` is what the live router drives: start an instance (process start or attach),
wake it, sleep it, stop it, check it is alive. ``start``/``wake`` answer with ``EngineAnswer``:
when the engine is (or will be) ready, by the backend's own account, and its URL. The router
records that as the ready time and its own clock at the moment it takes the answer in as the
observed time.

Implementations: ``InProcessBackend`` (here: engines are plain objects with ``cold_start(now_s)``,
``wake_up(now_s)``, ``sleep(level, now_s)``, ``is_ready(now_s)`` — ``restorelens.sim.EngineCore``'s
shape — used in virtual time and for demos), ``modelclaim.vllm_backend.VllmSleepBackend`` (vLLM's
HTTP sleep API against running engines) and ``modelclaim.process_backend.ProcessBackend`` (start
and stop engine processes, poll ``/health``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from restorelens.gate.modelclaim.actions import SleepEngine, StartEngine, StopEngine, WakeEngine

__all__ = ["BackendByModel", "EngineAnswer", "EngineBackend", "FixedLatencyEngine", "InProcessBackend", "InProcessEngine"]


@dataclass(frozen=True, slots=True)
class EngineAnswer:
    """The backend's account of an engine it started or woke: ready at ``ready_at_s``, at ``url``.

    ``attached``: the backend found an engine already running rather than loading one (an attach
    is no wake: no request waited for it unless one arrived meanwhile). ``asleep``: that engine was
    found asleep (vLLM answers ``/health`` 200 while asleep, so only its sleep state says so); the
    lifecycle then marks it Sleeping and a request wakes it as any other sleeping engine.
    """

    ready_at_s: float
    url: str | None = None
    attached: bool = False
    asleep: bool = False


class EngineBackend(Protocol):
    async def start(self, action: StartEngine, now_s: float) -> EngineAnswer:
        """Start (or attach to) the instance; return once ready (or when it will be, in virtual time)."""

    async def wake(self, action: WakeEngine, now_s: float) -> EngineAnswer:
        """Wake the instance; return once it is awake."""

    async def sleep(self, action: SleepEngine, now_s: float) -> float:
        """Sleep the instance; return the time the sleep completed."""

    async def stop(self, action: StopEngine, now_s: float) -> None:
        """Stop the instance; a no-op for engines the backend did not start."""

    async def alive(self, model: str, instance_id: int) -> bool:
        """Whether the instance still runs (crash detection)."""

    async def asleep(self, model: str, instance_id: int) -> bool:
        """Whether the running instance says it sleeps (put to sleep by someone other than the lifecycle)."""

    async def close(self) -> None:
        """Release everything (processes, HTTP clients)."""


class InProcessEngine(Protocol):
    def cold_start(self, now_s: float) -> float: ...

    def wake_up(self, now_s: float) -> float: ...

    def sleep(self, level: int, now_s: float) -> Any: ...

    def is_ready(self, now_s: float) -> bool: ...


class FixedLatencyEngine:
    """A stand-in engine with fixed cold-start, wake and sleep durations (seconds)."""

    def __init__(self, cold_start_s: float = 30.0, wake_s: float = 4.0, sleep_s: float = 0.5) -> None:
        self.cold_start_s, self.wake_s, self.sleep_s = cold_start_s, wake_s, sleep_s
        self.ready_at_s: float | None = None
        self.asleep = False
        self.calls: list[tuple[str, float]] = []

    def cold_start(self, now_s: float) -> float:
        self.calls.append(("cold_start", now_s))
        self.ready_at_s, self.asleep = now_s + self.cold_start_s, False
        return self.ready_at_s

    def wake_up(self, now_s: float) -> float:
        self.calls.append(("wake_up", now_s))
        self.ready_at_s, self.asleep = now_s + self.wake_s, False
        return self.ready_at_s

    def sleep(self, level: int, now_s: float) -> float:
        self.calls.append((f"sleep{level}", now_s))
        self.asleep = True
        return now_s + self.sleep_s

    def is_ready(self, now_s: float) -> bool:
        return not self.asleep and self.ready_at_s is not None and now_s >= self.ready_at_s


class InProcessBackend:
    """Engines as in-process objects made by ``engine_factory(model, pod)``; no I/O, no waiting.

    ``perform_*`` are the synchronous calls a discrete-event loop uses; the async ``EngineBackend``
    methods wrap them so the live router can drive in-process engines too (e.g. in a demo).
    ``on_started(action, engine, now_s)``, when given, is told of every start as it is made (a
    virtual run emits the engine's own startup spans there, in the trace the action carries).
    """

    def __init__(
        self,
        engine_factory: Callable[[str, str], InProcessEngine] | None = None,
        url_template: str = "inproc://{model}@{pod}",
        *,
        on_started: Callable[[StartEngine, InProcessEngine, float], None] | None = None,
    ) -> None:
        self.engine_factory = engine_factory or (lambda model, pod: FixedLatencyEngine())
        self.url_template = url_template
        self.on_started = on_started
        self.engines: dict[tuple[str, int], InProcessEngine] = {}
        self.stopped: set[tuple[str, int]] = set()
        self.crashed: set[tuple[str, int]] = set()

    def engine(self, model: str, instance_id: int) -> InProcessEngine:
        return self.engines[(model, instance_id)]

    def perform_start(self, action: StartEngine, now_s: float) -> EngineAnswer:
        engine = self.engine_factory(action.model, action.pod)
        self.engines[(action.model, action.instance_id)] = engine
        ready_at_s = engine.cold_start(now_s)
        if self.on_started is not None:
            self.on_started(action, engine, now_s)
        return EngineAnswer(ready_at_s, self.url_template.format(model=action.model, pod=action.pod))

    def perform_wake(self, action: WakeEngine, now_s: float) -> EngineAnswer:
        ready_at_s = self.engine(action.model, action.instance_id).wake_up(now_s)
        return EngineAnswer(ready_at_s, self.url_template.format(model=action.model, pod=action.pod))

    def perform_sleep(self, action: SleepEngine, now_s: float) -> float:
        done = self.engine(action.model, action.instance_id).sleep(action.level, now_s)
        # sim.EngineCore.sleep may return nothing: then the sleep counts as done at once.
        return float(done) if isinstance(done, int | float) and done >= now_s else now_s

    def perform_stop(self, action: StopEngine, now_s: float) -> None:
        self.stopped.add((action.model, action.instance_id))

    def crash(self, model: str, instance_id: int) -> None:
        self.crashed.add((model, instance_id))

    async def start(self, action: StartEngine, now_s: float) -> EngineAnswer:
        return self.perform_start(action, now_s)

    async def wake(self, action: WakeEngine, now_s: float) -> EngineAnswer:
        return self.perform_wake(action, now_s)

    async def sleep(self, action: SleepEngine, now_s: float) -> float:
        return self.perform_sleep(action, now_s)

    async def stop(self, action: StopEngine, now_s: float) -> None:
        self.perform_stop(action, now_s)

    async def alive(self, model: str, instance_id: int) -> bool:
        key = (model, instance_id)
        return key in self.engines and key not in self.stopped and key not in self.crashed

    async def asleep(self, model: str, instance_id: int) -> bool:
        return False  # in-process engines sleep only when the lifecycle says so

    async def close(self) -> None:
        self.engines.clear()


class BackendByModel:
    """One backend per model (e.g. some claims attach to running engines, others start processes)."""

    def __init__(self, backends: dict[str, EngineBackend]) -> None:
        self.backends = backends

    def _for(self, model: str) -> EngineBackend:
        return self.backends[model]

    def use_estimates(self, expected_s: Callable[[str, str], float | None]) -> None:
        """Hand the lifecycle's expected call durations to every backend that polls readiness."""
        for backend in self.backends.values():
            plug = getattr(backend, "use_estimates", None)
            if plug is not None:
                plug(expected_s)

    async def start(self, action: StartEngine, now_s: float) -> EngineAnswer:
        return await self._for(action.model).start(action, now_s)

    async def wake(self, action: WakeEngine, now_s: float) -> EngineAnswer:
        return await self._for(action.model).wake(action, now_s)

    async def sleep(self, action: SleepEngine, now_s: float) -> float:
        return await self._for(action.model).sleep(action, now_s)

    async def stop(self, action: StopEngine, now_s: float) -> None:
        await self._for(action.model).stop(action, now_s)

    async def alive(self, model: str, instance_id: int) -> bool:
        return await self._for(model).alive(model, instance_id)

    async def asleep(self, model: str, instance_id: int) -> bool:
        return await self._for(model).asleep(model, instance_id)

    async def close(self) -> None:
        for backend in {id(b): b for b in self.backends.values()}.values():
            await backend.close()
