"""The I/O shell around the admission core: one raw-ASGI endpoint per OpenAI inference path.

Per request: read and parse the body (400 on bad JSON, before anything else), route by model (the
static upstream table, or the ``ModelRouter`` for lifecycle-managed models; a model that wakes may
have its request held until it serves, once, bounded by ``hold_s`` and ``queue_limit`` held at
once), ask ``Admission`` for a
grant (wait on a future while queued), forward through the connection pool (traced: with the call's
CLIENT span, ``upstream_spans.py``) and stream the answer back chunk by chunk. A watcher on ``receive()`` notices a client disconnect while
queued or streaming. The grant, the router's started/finished pair and the span are each closed in
one ``finally``: every grant is released exactly once however the request ends.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
from typing import Any

import httpx
from opentelemetry.context import Context
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from restorelens import spans as S
from restorelens.clock import Clock
from restorelens.protocol import preempted_event
from restorelens.spans import TRAFFIC_CLASSES

from .admission import Admission
from .client_identity import ClientFacts
from .decision import RETRY_AFTER, SHUTTING_DOWN, Admit, Answer, Forward, Hold, Respond, decide, preempted, static_route
from .forwarding import UpstreamForwarder
from .gate_spans import GateSpans
from .grants import Grant, Rejection, Waiter
from .policies.interface import request_size_of
from .proxy_asgi import (
    REFUSAL_LIMITS, ClientGone, DisconnectWatch, GateAnswer, JsonTooDeep, Receive, Scope, Send, error_body, load_json,
    read_request_headers, send_json,
)
from .routing import ModelRouter, NotReady, RouteAnswer, Routed, UpstreamTable
from .settings import GateSettings
from .upstream_spans import UpstreamSpans
from .upstream_transport import UpstreamTransport

__all__ = ["ProxyEndpoint", "Receive", "Scope", "Send", "error_body"]

_PROPAGATOR = TraceContextTextMapPropagator()


def _gate_answer(answer: Respond) -> GateAnswer:
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in answer.headers]
    return GateAnswer(answer.status, answer.message, answer.error_type, headers)


class ProxyEndpoint:
    """Raw ASGI app for ``POST /v1/completions`` and ``POST /v1/chat/completions``."""

    def __init__(
        self,
        *,
        settings: GateSettings,
        admission: Admission,
        emitter: GateSpans,
        upstream: UpstreamTransport,
        timeout: httpx.Timeout,
        upstreams: UpstreamTable,
        clock: Clock,
        router: ModelRouter | None,
        waiters: dict[Waiter, asyncio.Future[Grant | Rejection]],
        refusals: dict[str, int] | None = None,
    ) -> None:
        self.settings = settings
        #: Requests refused per size limit (REFUSAL_LIMITS); /metrics reads it, the server's head check adds to it.
        self.refusals = refusals if refusals is not None else dict.fromkeys(REFUSAL_LIMITS, 0)
        self.admission = admission
        self.emitter = emitter
        self._ids = random.Random()  # its own generator: a seeded global `random` must not repeat ids
        self.upstreams = upstreams
        self.clock = clock
        # asyncio waits in real seconds; a ScaledClock (demo, `run --time-scale X`) runs X times faster.
        self._real_s_per_clock_s = 1.0 / clock.time_scale
        self.router = router
        self.router_models = frozenset(router.models()) if router is not None else frozenset()
        self.tracing = settings.tracing  # with the caller's provider, else the global one
        self.waiters = waiters
        #: The watch of each granted request in flight, by grant id: a preemption cancels through it.
        self._watches: dict[int, DisconnectWatch] = {}
        #: Preemptions of grants made from the queue whose task has not resumed yet, by grant id;
        #: the task takes its own when it resumes, and ``_give_back`` drops it on every other path.
        self._pending_preemptions: dict[int, Any] = {}
        #: The timer that calls ``Admission.expire`` at the core's next deadline (a floor restored
        #: by the controller, with its preemptions; a hold-off ending), and the time it is set for.
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._deadline_s: float | None = None
        #: Requests held while their model wakes; at most ``queue_limit`` at once, the rest answered 503.
        self.held = 0
        #: Set when the server shuts down (``begin_drain``): held requests are answered, no new one is held.
        self._draining = asyncio.Event()
        self._cut = False  # past the drain deadline: see cut_requests
        self.forwarder = UpstreamForwarder(
            upstream=upstream, timeout=timeout, emitter=emitter, clock=clock,
            upstream_spans=UpstreamSpans(emitter.tracer) if self.tracing else None,
        )
        self.upstream_errors = self.forwarder.upstream_errors  # the same dict: /metrics reads it

    def _request_headers(self, scope: Scope) -> tuple[str, str, Context | None, ClientFacts]:
        """(request id, traffic class, the caller's trace context, who the caller is)."""
        request_id, traffic_class, carrier, client = read_request_headers(scope)
        parent = _PROPAGATOR.extract(carrier) if carrier and self.tracing else None
        return (
            request_id or f"{self._ids.getrandbits(128):032x}",
            traffic_class or self.settings.default_traffic_class,
            parent,
            client,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id, traffic_class, parent, client = self._request_headers(scope)
        now_s = self.clock.now_s()
        early: GateAnswer | ClientGone | None = None
        payload: dict[str, Any] = {}
        body = b""
        try:
            body = await self._read_body(receive)
            payload = self._parse(body, traffic_class)
        except (GateAnswer, ClientGone) as exc:
            early = exc
        model = payload.get("model")
        # Started once the model is known (one attribute write less); the start time is the arrival.
        span = self.emitter.start_request(
            request_id, traffic_class, now_s, model=model if isinstance(model, str) else None, parent=parent,
            client=client,
        )
        status: int | None = None
        watch: DisconnectWatch | None = None
        try:
            if early is not None:
                raise early
            # Holding, admission and forwarding run in this task; a watcher on receive() (after the
            # body it only says disconnect) cancels it wherever it waits: hold, queue, upstream, a
            # slow stream.
            watch = DisconnectWatch(receive)
            upstream = await self._route(model, traffic_class, span, now_s, client.retry_count)
            status = await self._serve(scope, send, payload, body, model, upstream, request_id, traffic_class, span, watch)
        except GateAnswer as answer:
            status = answer.status
            if watch is not None:
                watch.finished = True
            if answer.error_type not in ("admission_rejected", "not_ready", SHUTTING_DOWN):
                self.emitter.failed(span, answer.error_type, status)
            await send_json(send, status, error_body(status, answer.message, answer.error_type), answer.headers)
        except ClientGone:
            span.set_attribute(S.ATTR_ERROR_TYPE, self._gone)
        except asyncio.CancelledError:
            if watch is None or not watch.absorb():
                raise  # cancelled from outside (shutdown): _serve's finally has released the grant
            if watch.preemption is None:
                span.set_attribute(S.ATTR_ERROR_TYPE, self._gone)
            else:
                status = await self._send_preempted(send, watch)
        finally:
            if watch is not None:
                watch.stop()
            self.emitter.end_request(span, request_id, self.clock.now_s(), status)

    async def _serve(
        self, scope: Scope, send: Send, payload: dict[str, Any], body: bytes, model: str | None, upstream: str,
        request_id: str, traffic_class: str, span: Span, watch: DisconnectWatch,
    ) -> int:
        grant: Grant | None = None
        routed_model: str | None = None
        completed = False
        try:
            grant, priority = await self._admit(request_id, traffic_class, span, upstream, request_size_of(payload))
            self._watches[grant.grant_id] = watch
            if (pending := self._pending_preemptions.pop(grant.grant_id, None)) is not None:
                watch.preempt(pending)  # taken back before this task resumed with its grant
            if self.router is not None and model in self.router_models:
                routed_model = model
                self.router.request_started(model, self.clock.now_s())
            if priority is not None:
                payload["priority"] = priority
                body = json.dumps(payload).encode()
            # Streamed tokens are counted only for a policy that keeps a budget (it predicts from them).
            counts = self.admission.policy.restore_budget_s is not None
            status = await self.forwarder.forward(
                scope, send, scope["headers"], body, upstream, span, watch,
                on_first_chunk=functools.partial(self.admission.first_byte, grant),
                on_tokens=functools.partial(self._streamed, grant) if counts else None,
            )
            # What the lenders may learn the engine's rates from: an answer that ran to its end.
            completed = 200 <= status < 300 and watch.response_completed
            return status
        finally:
            end_s = self.clock.now_s()
            if grant is not None:
                self._give_back(grant, end_s, completed=completed and watch.preemption is None)
            if routed_model is not None and self.router is not None:
                self.router.request_finished(routed_model, end_s)

    # --- steps -------------------------------------------------------------------------------

    async def _read_body(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.settings.max_body_bytes:
                self.refusals["max_body_bytes"] += 1
                raise GateAnswer(413, f"request body exceeds {self.settings.max_body_bytes} bytes", "request_too_large")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    def _parse(self, body: bytes, traffic_class: str) -> dict[str, Any]:
        if traffic_class not in TRAFFIC_CLASSES:
            raise GateAnswer(400, f"x-traffic-class {traffic_class!r} is not one of {', '.join(TRAFFIC_CLASSES)}", "invalid_request_error")
        try:
            payload = load_json(body, self.settings.max_json_depth)
        except JsonTooDeep:
            self.refusals["max_json_depth"] += 1
            raise GateAnswer(400, f"request body nests JSON deeper than {self.settings.max_json_depth} levels", "invalid_request_error") from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int literal past Python's digit limit
            # The position only, never the text: the body is a prompt.
            raise GateAnswer(400, f"request body is not valid JSON (line {getattr(exc, 'lineno', 1)}, column {getattr(exc, 'colno', 0)})", "invalid_request_error") from None
        if not isinstance(payload, dict):
            raise GateAnswer(400, "request body must be a JSON object", "invalid_request_error")
        return payload

    async def _route(self, model: Any, traffic_class: str, span: Span, now_s: float, retries_taken: int | None) -> str:
        if model is not None and not isinstance(model, str):
            raise GateAnswer(400, "'model' must be a string", "invalid_request_error")
        route: RouteAnswer
        if self.router is not None and model in self.router_models:
            route = self.router.route(model, now_s, trigger=span.get_span_context(), retries_taken=retries_taken)
        else:
            route = static_route(self.upstreams.pick(model), model)
        may_hold = self.held < self.settings.queue_limit and not self._draining.is_set()
        answer = self._decide(route, None, model, traffic_class, may_hold=may_hold)
        if isinstance(answer, Hold):
            assert self.router is not None and isinstance(route, NotReady)
            route = await self._hold(model, route, answer, span, retries_taken)
            answer = self._decide(route, None, model, traffic_class, may_hold=False)
        if isinstance(route, NotReady):
            self.emitter.not_ready(span, route)
        if isinstance(answer, Respond):
            raise _gate_answer(answer)
        assert isinstance(answer, Admit)
        return answer.upstream

    async def _hold(self, model: str, route: NotReady, hold: Hold, span: Span, retries_taken: int | None) -> RouteAnswer:
        """Keep the request open until its model serves or the hold ends; then where it goes now."""
        assert self.router is not None
        held_s = self.clock.now_s()
        self.held += 1
        routable = asyncio.ensure_future(self.router.wait_routable(model, hold.until_s - held_s))
        draining = asyncio.ensure_future(self._draining.wait())
        try:
            await asyncio.wait({routable, draining}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (routable, draining):
                waiter.cancel()
            self.held -= 1
            released_s = self.clock.now_s()
            self.emitter.held(span, route, released_s - held_s, released_s)
        return self.router.route(model, self.clock.now_s(), trigger=span.get_span_context(),
                                 retries_taken=retries_taken)

    def begin_drain(self) -> None:
        """The server shuts down: answer the held requests now (routed, or 503 with a fresh hint)
        and the queued ones (503, ``decision.draining``); a request that would queue from now on is
        answered so at once."""
        self._draining.set()
        for waiter in self.admission.drain(self.clock.now_s()):
            future = self.waiters.get(waiter)
            if future is not None and not future.done():
                future.set_result(waiter.rejection)  # its task, in _wait, answers it

    def cut_requests(self) -> None:
        """The server's drain deadline passed: it cuts every connection still open next, so the
        requests that end now were ended by the gate, not left by their clients (their spans say so)."""
        self._cut = True

    @property
    def _gone(self) -> str:
        """The error type of a request whose connection closed before its answer was complete."""
        return "gate_shutdown" if self._cut else "client_disconnected"

    def _arm_deadline(self) -> None:
        """Make sure ``expire`` runs at the core's next deadline, as the virtual loop's time source
        does: without it a floor restored by the controller, and the preemptions it brings, would
        wait for the next request or release."""
        now_s = self.clock.now_s()
        deadline_s = self.admission.next_deadline_s(now_s)
        if deadline_s is None or (self._deadline_s is not None and self._deadline_s <= deadline_s):
            return
        if self._deadline_timer is not None:
            self._deadline_timer.cancel()
        self._deadline_s = deadline_s
        delay_s = max(0.0, deadline_s - now_s) * self._real_s_per_clock_s
        self._deadline_timer = asyncio.get_running_loop().call_later(delay_s, self._deadline_due)

    def _deadline_due(self) -> None:
        deadline_s = self._deadline_s
        self._deadline_timer = self._deadline_s = None
        # The event loop's timer may fire a few microseconds before the clock reads the deadline:
        # decide at the deadline, or a hold-off would still look unfinished and nothing re-arm.
        now_s = self.clock.now_s()
        self.admission.expire(now_s if deadline_s is None else max(now_s, deadline_s))
        self._arm_deadline()

    def _streamed(self, grant: Grant, tokens: int, now_s: float) -> None:
        self.admission.streamed(grant, now_s, tokens)

    def _give_back(self, grant: Grant, now_s: float, *, completed: bool) -> None:
        """Release a grant this endpoint holds: the one place its watch and a preemption still
        waiting for its task are dropped, however the request ended (answered, or its client left
        before its task resumed with a grant made and taken back meanwhile)."""
        self._watches.pop(grant.grant_id, None)
        self._pending_preemptions.pop(grant.grant_id, None)
        self.admission.release(grant, now_s, completed=completed)
        self._arm_deadline()

    def preempt(self, grant: Grant, preemption: Any) -> None:
        """Admission's ``on_preempt``: take the borrowed request back (its task answers the client)."""
        watch = self._watches.get(grant.grant_id)
        if watch is not None:
            watch.preempt(preemption)
        else:  # granted from the queue in this loop iteration: its task has not resumed yet
            self._pending_preemptions[grant.grant_id] = preemption

    async def _send_preempted(self, send: Send, watch: DisconnectWatch) -> int:
        """Tell the client its request was taken back: the 503, or the stream's last event."""
        answer = preempted(watch.preemption.retry_after_ms)
        if not watch.response_started:
            await send_json(send, answer.status, error_body(answer.status, answer.message, answer.error_type),
                            _gate_answer(answer).headers)
            return answer.status
        hint = dict(answer.headers)
        await send({"type": "http.response.body", "body": preempted_event(
            answer.message, watch.preemption.retry_after_ms, hint[RETRY_AFTER]), "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return answer.status

    async def _admit(self, request_id: str, traffic_class: str, span: Span, upstream: str,
                     size: RequestSize) -> tuple[Grant, int | None]:
        """A grant for the request and the engine-side priority to forward it with."""
        decision = self.admission.request(request_id, traffic_class, self.clock.now_s(), size=size)
        self._arm_deadline()
        if isinstance(decision, Waiter):
            decision = await self._wait(decision)
        answer = self._decide(Routed(upstream), decision, None, traffic_class)
        if isinstance(answer, Respond):
            assert isinstance(decision, Rejection)
            self.emitter.rejected(span, decision)
            raise _gate_answer(answer)
        assert isinstance(decision, Grant) and isinstance(answer, Forward)
        self.emitter.granted(span, decision, upstream=upstream)
        return decision, answer.priority

    def _decide(self, route: RouteAnswer, admitted: Grant | Rejection | None, model: str | None, traffic_class: str,
                *, may_hold: bool = False) -> Answer:
        return decide(route, admitted, model=model, traffic_class=traffic_class, policy=self.admission.policy,
                      lifecycle=self.router is not None, may_hold=may_hold)

    async def _wait(self, waiter: Waiter) -> Grant | Rejection:
        """Park on a future until a release grants the waiter or its deadline passes."""
        future: asyncio.Future[Grant | Rejection] = asyncio.get_running_loop().create_future()
        self.waiters[waiter] = future
        try:
            wait_s = max(0.0, waiter.deadline_s - self.clock.now_s()) * self._real_s_per_clock_s
            await asyncio.wait({future}, timeout=wait_s)
        except BaseException:
            # Cancelled (client gone, shutdown): leave the queue, or give back a grant made meanwhile.
            self.waiters.pop(waiter, None)
            answer = self.admission.withdraw(waiter, self.clock.now_s())
            if isinstance(answer, Grant):
                self._give_back(answer, self.clock.now_s(), completed=False)
            raise
        self.waiters.pop(waiter, None)
        return self.admission.withdraw(waiter, self.clock.now_s(), "timeout")
