"""``ModelClaimRouter``: the lifecycle core driven live, as the gate's ``ModelRouter``.

The gate calls ``route`` / ``request_started`` / ``request_finished`` on its event loop; each call
runs the sans-I/O core at the gate's ``now_s`` and hands the actions the core returns to asyncio
tasks that drive the engine backend. A background task (``start``/``stop``) honours the core's
deadlines (idle sleeps, restart backoff, room, give-ups) and checks Active engines are alive and
awake (an engine slept behind the lifecycle's back becomes Sleeping, and the next request wakes it).

A request the lifecycle lets the gate hold (``[modelclaim] hold_s``) waits in ``wait_routable``
until a wake of its model ends. With ``calibration_path`` the router writes what the lifecycle
learnt from its wakes there after each one (``modelclaim.calibration_file``: whole, durably, merged
with what other gates sharing the file wrote), so hints stay calibrated across restarts.

Times: the backend's answer carries the engine's ready time; the router's clock when it hands
that answer to the core is the observed time. Both land on the ``modelclaim.wake`` span.

Endpoints (``routes()``, mounted by the gate): ``GET /modelclaim/status`` (read-only) and
``POST /modelclaim/models/{model}/{sleep|wake|restart}`` which require ``Authorization: Bearer
<admin token>`` — AIBrix's runtime agent has no authentication; without a token configured the
control endpoints answer 403.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import threading
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanContext
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from restorelens.clock import Clock, WallClock
from restorelens.errors import SettingError
from restorelens.gate.modelclaim.actions import (
    Action,
    SleepEngine,
    StartEngine,
    StopEngine,
    WakeEngine,
    WakeEnds,
    WakeRecord,
)
from restorelens.gate.modelclaim.backends import EngineBackend
from restorelens.gate.modelclaim.calibration_file import write_calibration
from restorelens.gate.modelclaim.core import ClaimControlError, ModelClaimCore
from restorelens.gate.modelclaim.metrics import ModelClaimMetrics
from restorelens.gate.modelclaim.phases import ACTIVE
from restorelens.gate.modelclaim.spans import ModelClaimSpans
from restorelens.gate.routing import RouteAnswer

__all__ = ["CONTROL_OPERATIONS", "ModelClaimRouter", "STATUS_PATH"]

STATUS_PATH = "/modelclaim/status"
CONTROL_OPERATIONS = ("sleep", "wake", "restart")
log = logging.getLogger(__name__)


class ModelClaimRouter:
    """Implements ``restorelens.gate.routing.ModelRouter`` over a ``ModelClaimCore`` and a backend."""

    def __init__(
        self,
        core: ModelClaimCore,
        backend: EngineBackend,
        *,
        clock: Clock | None = None,
        tracer_provider: TracerProvider | None = None,
        admin_token: str | None = None,
        health_interval_s: float = 2.0,
        calibration_path: Path | None = None,
    ) -> None:
        self.core = core
        self.calibration_path = calibration_path
        self._written_version = core.calibration.version
        self._write_failed = False
        self._writing: asyncio.Future[None] | None = None
        self._write_again = False
        #: Requests held for each model (``wait_routable``), released when a wake of it ends.
        self._held: dict[str, set[asyncio.Future[None]]] = {}
        self.backend = backend
        # Backends that poll readiness poll finely around the time the lifecycle expects it.
        plug = getattr(backend, "use_estimates", None)
        if plug is not None:
            plug(self._expected_call_s)
        self.clock = clock or WallClock()
        # Deadlines are clock seconds, asyncio waits real ones; a ScaledClock runs time_scale x the wall.
        self._real_s_per_clock_s = 1.0 / self.clock.time_scale
        self.admin_token = admin_token
        self.health_interval_s = health_interval_s
        self._lock = threading.Lock()  # the prometheus scrape may run on another thread
        self.metrics = ModelClaimMetrics(core, self._lock)
        core.listeners.extend([ModelClaimSpans(tracer_provider, core=core), self.metrics, WakeEnds(self._wake_ended)])
        self._tasks: set[asyncio.Task[None]] = set()
        self._queued: list[Action] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._stopping = False

    def _expected_call_s(self, model: str, call: str) -> float | None:
        with self._lock:
            return self.core.hints.estimates(self.core.calibration).for_call(model, call)

    # --- ModelRouter -------------------------------------------------------------------------

    def models(self) -> Collection[str]:
        return self.core.models()

    def route(self, model: str, now_s: float, trigger: SpanContext | None = None,
              retries_taken: int | None = None) -> RouteAnswer:
        with self._lock:
            answer, actions = self.core.route(model, now_s, trigger, retries_taken)
        self._dispatch(actions)
        return answer

    def request_started(self, model: str, now_s: float) -> None:
        with self._lock:
            actions = self.core.request_started(model, now_s)
        self._dispatch(actions)

    async def wait_routable(self, model: str, timeout_s: float) -> bool:
        with self._lock:
            if self.core.claims_view()[model].routable:
                return True
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.setdefault(model, set()).add(held)
        try:
            await asyncio.wait({held}, timeout=max(0.0, timeout_s) * self._real_s_per_clock_s)
        finally:
            self._held.get(model, set()).discard(held)
        with self._lock:
            return self.core.claims_view()[model].routable

    def request_finished(self, model: str, now_s: float) -> None:
        with self._lock:
            actions = self.core.request_finished(model, now_s)
        self._dispatch(actions)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._stopping = False
        with self._lock:
            actions = self.core.start(self.clock.now_s())
        queued, self._queued = self._queued, []
        self._dispatch(queued + actions)
        self._runner = asyncio.create_task(self._run(), name="modelclaim-lifecycle")

    async def stop(self) -> None:
        if self._runner is not None:
            # A flag, not only cancel(): Python 3.11's wait_for can swallow a cancellation that
            # races with the event it waits on, and the runner would then wait on forever.
            self._stopping = True
            if self._changed is not None:
                self._changed.set()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
            self._runner = None
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with self._lock:
            actions = self.core.shutdown(self.clock.now_s())
        for action in actions:
            with contextlib.suppress(Exception):
                await self.backend.stop(action, self.clock.now_s())  # type: ignore[arg-type]
        await self.backend.close()
        if self._writing is not None:
            with contextlib.suppress(Exception):
                await self._writing  # the last wake's calibration reaches the file before the gate exits
        self._loop = None
        self._persist_calibration()  # a change that waited for that write

    def register_metrics(self, registry: Any) -> None:
        self.metrics.register(registry)

    # --- wake ends: held requests and the calibration file ---------------------------------------

    def _wake_ended(self, record: WakeRecord) -> None:
        for held in self._held.pop(record.model, set()):
            if not held.done():
                held.set_result(None)
        self._persist_calibration()

    def _persist_calibration(self) -> None:
        """Write the calibration when it changed, off the event loop (a slow disk must not stall
        requests); writes never overlap, and the last one written is the newest."""
        calibration = self.core.calibration
        if self.calibration_path is None or calibration.version == self._written_version:
            return
        if self._writing is not None and not self._writing.done():
            self._write_again = True  # the write under way finishes first; this change follows it
            return
        version, wakes = calibration.version, calibration.observed_wakes()
        if self._loop is None:  # not serving (a tool, a test): nothing to stall
            try:
                write_calibration(self.calibration_path, wakes)
            except (OSError, SettingError) as exc:
                self._written(exc, version)
            else:
                self._written(None, version)
            return
        self._writing = self._loop.run_in_executor(None, write_calibration, self.calibration_path, wakes)
        self._writing.add_done_callback(
            lambda done: self._written(asyncio.CancelledError() if done.cancelled() else done.exception(), version))

    def _written(self, error: BaseException | None, version: int) -> None:
        if error is None:
            self._written_version, self._write_failed = version, False
        elif not self._write_failed:  # logged once; retried at the next wake
            # A SettingError names the path itself.
            detail = error if isinstance(error, SettingError) else f"{self.calibration_path}: {error}"
            log.warning("modelclaim: cannot write the calibration: %s", detail)
            self._write_failed = True
        if self._write_again:
            self._write_again = False
            self._persist_calibration()

    def routes(self) -> Sequence[Any]:
        return [
            Route(STATUS_PATH, self._status_endpoint, methods=["GET"]),
            Route("/modelclaim/models/{model}/{operation}", self._control_endpoint, methods=["POST"]),
        ]

    # --- status and control --------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self._lock:
            ledger = self.core.ledger
            models = [self.core.status(m) for m in self.core.models()]
            now_s, claims = self.clock.now_s(), self.core.claims_view()
            # What a request now would be told (calibrated hints depend on the wake's progress).
            hints = {s.model: self.core.hints.answer(claims[s.model], now_s, self.core.calibration)
                     for s in models if s.phase != ACTIVE}
            gpus = [
                {"pod": s.pod, "gpu": s.index, "capacity_bytes": ledger.capacity_bytes(s),
                 "accounted_bytes": ledger.charged_bytes(s), "by_model": dict(ledger.charges(s))}
                for s in ledger.gpu_slots()
            ]
            hosts = [
                {"node": n, "accounted_bytes": ledger.host_bytes(n), "limit_bytes": ledger.host_ram_limit_bytes.get(n)}
                for n in ledger.nodes()
            ]
        return {
            "hint_mode": self.core.hints.hint_mode,
            "models": [
                {"model": s.model, "phase": s.phase, "reason": s.reason, "since_s": s.since_s, "pod": s.pod,
                 "gpus": list(s.gpus), "upstream_url": s.upstream_url, "in_flight": s.in_flight,
                 "idle_since_s": s.idle_since_s, "restarts": s.restarts, "wake_path": s.wake_path,
                 "retry_after_s": hints[s.model].retry_after_s if s.model in hints else None,
                 "retry_after_ms": hints[s.model].retry_after_ms if s.model in hints else None,
                 "hint_source": hints[s.model].hint_source if s.model in hints else None,
                 "last_error": s.last_error or None}
                for s in models
            ],
            "gpus": gpus,
            "host_memory": hosts,
        }

    async def _status_endpoint(self, request: Request) -> JSONResponse:
        return JSONResponse(self.status())

    async def _control_endpoint(self, request: Request) -> JSONResponse:
        denied = self._check_token(request)
        if denied is not None:
            return denied
        model, operation = request.path_params["model"], request.path_params["operation"]
        if operation not in CONTROL_OPERATIONS:
            return _error(404, f"unknown operation {operation!r}; use {', '.join(CONTROL_OPERATIONS)}", "not_found")
        if model not in self.core.models():
            return _error(404, f"model {model} is not declared", "not_found")
        try:
            with self._lock:
                actions = getattr(self.core, operation)(model, self.clock.now_s())
        except ClaimControlError as exc:
            return _error(409, str(exc), "conflict")
        self._dispatch(actions)
        with self._lock:
            status = self.core.status(model)
        return JSONResponse({"model": model, "operation": operation, "phase": status.phase, "reason": status.reason},
                            status_code=202)

    def _check_token(self, request: Request) -> JSONResponse | None:
        if self.admin_token is None:
            return _error(403, "control endpoints are disabled: no admin token is configured", "forbidden")
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.encode(), self.admin_token.encode()):
            response = _error(401, "missing or wrong bearer token", "unauthorized")
            response.headers["www-authenticate"] = "Bearer"
            return response
        return None

    # --- driving the backend -------------------------------------------------------------------

    def _dispatch(self, actions: list[Action]) -> None:
        # Every core call may move its deadlines: wake the background task to re-read them.
        if self._changed is not None:
            self._changed.set()
        if not actions:
            return
        if self._loop is None:
            self._queued.extend(actions)  # performed once start() runs
            return
        for action in actions:
            task = self._loop.create_task(self._perform(action))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _perform(self, action: Action) -> None:
        now_s = self.clock.now_s()
        try:
            if isinstance(action, StartEngine | WakeEngine):
                call = self.backend.start if isinstance(action, StartEngine) else self.backend.wake
                answer = await call(action, now_s)  # type: ignore[arg-type]
                wait_s = answer.ready_at_s - self.clock.now_s()
                if wait_s > 0:  # an in-process engine answers ahead of time
                    await asyncio.sleep(wait_s * self._real_s_per_clock_s)
                observed_s = self.clock.now_s()
                with self._lock:
                    follow = self.core.on_engine_ready(
                        action.model, action.instance_id, observed_s, ready_at_s=answer.ready_at_s, url=answer.url,
                        attached=answer.attached, asleep=answer.asleep,
                    )
            elif isinstance(action, SleepEngine):
                await self.backend.sleep(action, now_s)
                with self._lock:
                    follow = self.core.on_engine_slept(action.model, action.instance_id, self.clock.now_s())
            else:
                assert isinstance(action, StopEngine)
                await self.backend.stop(action, now_s)
                return
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any backend failure is an engine failure; the core decides what next
            log.warning("modelclaim: %s of %s failed: %s", type(action).__name__, action.model, exc)
            with self._lock:
                follow = self.core.on_engine_failed(action.model, action.instance_id, self.clock.now_s(), str(exc))
        self._dispatch(follow)

    async def _run(self) -> None:
        assert self._changed is not None
        next_health_s = self.clock.now_s() + self.health_interval_s
        while not self._stopping:
            self._changed.clear()  # before reading the deadline, so a change made meanwhile is not missed
            now_s = self.clock.now_s()
            with self._lock:
                deadline_s = self.core.next_deadline_s()
            wait_s = min(next_health_s, deadline_s if deadline_s is not None else next_health_s) - now_s
            if wait_s > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait_s * self._real_s_per_clock_s)
            if self._stopping:
                return
            now_s = self.clock.now_s()
            with self._lock:
                actions = self.core.advance(now_s)
            self._dispatch(actions)
            if now_s >= next_health_s:
                next_health_s = now_s + self.health_interval_s
                await self._check_health()

    async def _check_health(self) -> None:
        with self._lock:
            active = [
                (m, c.instance.id) for m, c in self.core.claims_view().items() if c.routable  # type: ignore[union-attr]
            ]
        for model, instance_id in active:
            if not await self.backend.alive(model, instance_id):
                with self._lock:
                    actions = self.core.on_engine_failed(model, instance_id, self.clock.now_s(), "engine not alive")
                self._dispatch(actions)
            elif await self.backend.asleep(model, instance_id):
                # vLLM answers /health 200 while asleep: only its sleep state tells.
                with self._lock:
                    actions = self.core.on_engine_found_asleep(model, instance_id, self.clock.now_s())
                self._dispatch(actions)


def _error(status: int, message: str, error_type: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": error_type, "code": status}}, status_code=status)
