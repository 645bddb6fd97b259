"""Drive an ``EngineCore`` against a real clock inside an asyncio loop.

One task per engine sleeps until the core's ``next_event_s()`` or until an input arrives (a single
future that inputs resolve, so a burst of requests costs one wake-up, not one per request), then
advances the core and hands each event to whoever waits for it: a future per non-streaming request,
a queue per streaming one, predicates for sleep/wake callers. Spans and metrics for finished
requests are recorded here, so they exist even when the client has gone away.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from restorelens.clock import Clock
from restorelens.sim.core import EngineCore
from restorelens.sim.metrics import EngineMetrics
from restorelens.sim.records import EngineStateEvent, Event, FinishedEvent, RequestRecord, SimRequest, TokenEvent
from restorelens.sim.tracing import emit_llm_request_span, emit_startup_spans

__all__ = ["InFlight", "LiveEngine"]


@dataclass(slots=True)
class InFlight:
    """A submitted request: ``done`` resolves to its record; ``tokens`` (streaming) gets each token event."""

    request_id: str
    done: asyncio.Future[RequestRecord]
    tokens: asyncio.Queue[TokenEvent | RequestRecord] | None
    parent_context: Context | None = None
    span_params: Mapping[str, Any] = field(default_factory=dict)


class LiveEngine:
    def __init__(
        self, core: EngineCore, *, clock: Clock, tracer: Tracer | None, metrics: EngineMetrics, model_name: str
    ) -> None:
        self.core = core
        self.clock = clock
        self.tracer = tracer
        self.metrics = metrics
        self.model_name = model_name
        self._in_flight: dict[str, InFlight] = {}
        self._state_waiters: list[tuple[Callable[[], bool], asyncio.Future[None]]] = []
        self._wakeup: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        #: (process start, parent context) of a cold start in progress: its spans are emitted,
        #: and flushed, the moment the engine is ready.
        self.cold_start: tuple[float, Context | None] | None = None
        self.flush: Callable[[], object] | None = None

    # --- lifecycle of the task ----------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def kick(self) -> None:
        """Something changed: let the stepping task re-read ``next_event_s()`` now."""
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        core, clock = self.core, self.clock
        while True:
            self._dispatch(core.advance_to(clock.now_s()))
            next_s = core.next_event_s()
            delay_s = None if next_s is None else next_s - clock.now_s()
            if delay_s is not None and delay_s <= 0:
                await asyncio.sleep(0)  # let handlers run between back-to-back steps
                continue
            wakeup = self._wakeup = loop.create_future()
            timer = None if delay_s is None else loop.call_later(delay_s, _resolve, wakeup)
            await wakeup
            if timer is not None:
                timer.cancel()

    # --- inputs -------------------------------------------------------------------------------

    def submit(
        self,
        request: SimRequest,
        *,
        parent_context: Context | None = None,
        span_params: Mapping[str, Any] | None = None,
    ) -> InFlight:
        """Queue a request now; raises the core's RequestRejectedError / EngineNotReadyError."""
        self.core.add_request(request, self.clock.now_s())
        in_flight = InFlight(
            request.request_id,
            asyncio.get_running_loop().create_future(),
            asyncio.Queue() if request.emit_tokens else None,
            parent_context,
            span_params or {},
        )
        self._in_flight[request.request_id] = in_flight
        self.kick()
        return in_flight

    def abort(self, request_id: str) -> None:
        """The client went away: free the engine's resources; no span, as in vLLM."""
        self._in_flight.pop(request_id, None)
        if self.core.abort(request_id, self.clock.now_s()) is not None:
            self.kick()

    def is_in_flight(self, request_id: str) -> bool:
        return request_id in self._in_flight

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition()`` holds; it is re-checked after every advance of the core."""
        if condition():
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._state_waiters.append((condition, future))
        self.kick()
        await future

    # --- outputs ------------------------------------------------------------------------------

    def _dispatch(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, TokenEvent):
                in_flight = self._in_flight.get(event.request_id)
                if in_flight is not None and in_flight.tokens is not None:
                    in_flight.tokens.put_nowait(event)
            elif isinstance(event, FinishedEvent):
                self._finished(event.record)
            elif isinstance(event, EngineStateEvent):
                # State waiters below re-check the core itself.
                if event.state == "ready" and self.cold_start is not None:
                    self._cold_start_done()
        if self._state_waiters:
            still_waiting = []
            for condition, future in self._state_waiters:
                if future.done():
                    continue
                if condition():
                    future.set_result(None)
                else:
                    still_waiting.append((condition, future))
            self._state_waiters = still_waiting

    def _cold_start_done(self) -> None:
        assert self.cold_start is not None
        started_s, parent_context = self.cold_start
        self.cold_start = None
        if self.tracer is None:
            return
        emit_startup_spans(self.tracer, self.core.config, started_s, parent_context)
        if self.flush is not None:
            # Export now, not at the next batch, so a collector sees the start as soon as it ends;
            # off the loop, since an exporter may block on the network.
            asyncio.get_running_loop().run_in_executor(None, self.flush)

    def _finished(self, record: RequestRecord) -> None:
        in_flight = self._in_flight.pop(record.request_id, None)
        self.metrics.observe_finished(record)
        if self.tracer is not None:
            emit_llm_request_span(
                self.tracer,
                record,
                model=self.model_name,
                parent_context=in_flight.parent_context if in_flight else None,
                request_params=in_flight.span_params if in_flight else None,
            )
        if in_flight is None:
            return
        if in_flight.tokens is not None:
            in_flight.tokens.put_nowait(record)
        if not in_flight.done.done():
            in_flight.done.set_result(record)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
