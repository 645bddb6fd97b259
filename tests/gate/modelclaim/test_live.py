"""Live: the router drives the simulator's real sleep API over HTTP, and the process backend
starts a real engine process through a cold start; spans keep ready and observed times apart."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags

from restorelens.clock import ScaledClock
from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.process_backend import EngineCommand, ProcessBackend
from restorelens.gate.modelclaim.router import ModelClaimRouter
from restorelens.gate.modelclaim.vllm_backend import VllmSleepBackend
from restorelens.gate.routing import NotReady, Routed
from restorelens.sim.app import create_app
from restorelens.spans import (
    ATTR_MODELCLAIM_WAKE_PATH,
    EVENT_ENGINE_READY,
    EVENT_ENGINE_WAKE_CALLED,
    EVENT_READY_OBSERVED,
    SPAN_ENGINE_SLEEP,
    SPAN_ENGINE_WAKE_UP,
    SPAN_MODELCLAIM_WAKE,
)

GIB = 2**30
TRIGGER = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
# A real engine process: the simulator under uvicorn, starting cold (its /health says 503 while loading).
SIM_PROCESS = (
    "import sys, uvicorn; from restorelens.sim.app import create_app; "
    "uvicorn.run(create_app('tiny-cpu', model_name='m', enable_sleep_mode=True, start_mode='cold', time_scale=60.0), "
    "host='127.0.0.1', port=int(sys.argv[1]), log_level='warning')"
)


def one_model_core() -> ModelClaimCore:
    return ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB)],
                          PoolPolicy(sleep_after_s=3600))


async def until(check: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def wake_events(exporter: InMemorySpanExporter, path: str) -> dict[str, int]:
    (span,) = [s for s in exporter.get_finished_spans()
               if s.name == SPAN_MODELCLAIM_WAKE and s.attributes[ATTR_MODELCLAIM_WAKE_PATH] == path]
    return {e.name: e.timestamp for e in span.events}


def test_sleep_api_over_http_wakes_in_place(serve_asgi, tracer_provider, span_exporter) -> None:  # noqa: ANN001
    sim = serve_asgi(create_app("tiny-cpu", model_name="m", enable_sleep_mode=True, tracer_provider=tracer_provider))
    backend = VllmSleepBackend({"m": sim.url}, poll_interval_s=0.05)
    router = ModelClaimRouter(one_model_core(), backend, tracer_provider=tracer_provider, health_interval_s=3600)

    async def scenario() -> None:
        await router.start()
        try:
            await until(lambda: router.core.status("m").phase == "Active", "attach")
            router._dispatch(router.core.sleep("m", router.clock.now_s()))
            await until(lambda: router.core.status("m").phase == "Sleeping" and router.core.status("m").reason
                        == "EngineSleeping" and router.core.claims_view()["m"].op is None, "sleep")
            assert await backend.is_sleeping(sim.url)
            answer = router.route("m", router.clock.now_s(), trigger=TRIGGER)
            assert isinstance(answer, NotReady) and answer.retry_after_s == 10
            await until(lambda: isinstance(router.route("m", router.clock.now_s()), Routed), "wake")
            assert not await backend.is_sleeping(sim.url)
        finally:
            await router.stop()

    asyncio.run(scenario())
    events = wake_events(span_exporter, "in-place")
    assert events[EVENT_ENGINE_WAKE_CALLED] < events[EVENT_ENGINE_READY] < events[EVENT_READY_OBSERVED]
    names = [s.name for s in span_exporter.get_finished_spans()]
    assert SPAN_ENGINE_SLEEP in names and SPAN_ENGINE_WAKE_UP in names  # the simulator saw the real calls


def test_process_backend_cold_start_then_stop(tracer_provider, span_exporter) -> None:  # noqa: ANN001
    command = EngineCommand((sys.executable, "-c", SIM_PROCESS, "{port}"))
    backend = ProcessBackend({"m": command}, poll_interval_s=0.1, start_timeout_s=60)
    router = ModelClaimRouter(one_model_core(), backend, tracer_provider=tracer_provider, health_interval_s=3600)
    pids: list[int] = []

    async def scenario() -> None:
        await router.start()
        try:
            answer = router.route("m", router.clock.now_s(), trigger=TRIGGER)
            assert isinstance(answer, NotReady) and (answer.reason, answer.retry_after_s) == ("EngineStarting", 10)
            await until(lambda: backend.pid("m", 1) is not None, "the process to start")
            pids.append(backend.pid("m", 1))
            await until(lambda: router.core.status("m").phase == "Active", "cold start", timeout_s=60)
            routed = router.route("m", router.clock.now_s())
            assert isinstance(routed, Routed) and routed.upstream_url.startswith("http://127.0.0.1:")
        finally:
            await router.stop()

    asyncio.run(scenario())
    events = wake_events(span_exporter, "cold-start")
    assert events[EVENT_ENGINE_WAKE_CALLED] < events[EVENT_ENGINE_READY] < events[EVENT_READY_OBSERVED]
    try:
        os.kill(pids[0], 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"engine process {pids[0]} still runs after stop()")


def test_lifecycle_waits_run_on_the_router_clock_not_the_wall() -> None:
    """A 60-s cold start and a 120-s idle sleep under a clock 600x the wall: 0.1 s and 0.2 s real."""
    clock = ScaledClock(600.0)
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB)],
                          PoolPolicy(sleep_after_s=120))
    backend = InProcessBackend(lambda model, pod: FixedLatencyEngine(cold_start_s=60.0, wake_s=4.0, sleep_s=0.5))
    router = ModelClaimRouter(core, backend, clock=clock, health_interval_s=3600)

    async def scenario() -> None:
        await router.start()
        try:
            # Slept in clock seconds as real ones, these would take 60 s and 120 s: past until()'s 20 s.
            await until(lambda: router.core.status("m").phase == "Active", "the cold start")
            await until(lambda: router.core.status("m").phase == "Sleeping", "the idle sleep")
        finally:
            await router.stop()

    asyncio.run(scenario())
