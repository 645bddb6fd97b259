"""ASGI plumbing of the gate's proxy: message types, the gate's own JSON answers, disconnect watching."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from restorelens.protocol import SDK_RETRY_COUNT_HEADER

from .client_identity import ClientFacts, client_facts

__all__ = [
    "ClientGone", "DisconnectWatch", "GateAnswer", "REFUSAL_LIMITS", "JsonTooDeep", "Receive", "Scope", "Send",
    "error_body", "load_json", "nested_deeper_than", "read_request_headers", "send_json",
]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

TRAFFIC_CLASS_HEADER = b"x-traffic-class"
REQUEST_ID_HEADER = b"x-request-id"
_TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})
#: Headers that say who the client is (``client_identity``), by the ``client_facts`` argument they fill.
_CLIENT_HEADERS = {b"authorization": "authorization", b"api-key": "api_key", b"idempotency-key": "idempotency_key",
                   SDK_RETRY_COUNT_HEADER.encode(): "retry_count"}

#: The size limits a request can be refused for, by setting: the keys of the gate's refusal counts.
REFUSAL_LIMITS = ("max_header_bytes", "max_body_bytes", "max_json_depth")


class JsonTooDeep(Exception):
    """A JSON body nests deeper than the gate accepts (gate.max_json_depth)."""


def load_json(body: bytes, max_depth: int) -> Any:
    """``json.loads`` bounded in depth: ``JsonTooDeep`` past ``max_depth`` (or past what the parser
    itself can take), ``ValueError`` when the body is not JSON (an int literal past Python's digit
    limit included)."""
    try:
        value = json.loads(body)
    except RecursionError:
        raise JsonTooDeep() from None
    if nested_deeper_than(value, max_depth, body):
        raise JsonTooDeep()
    return value


def nested_deeper_than(value: Any, max_depth: int, raw: bytes) -> bool:
    """True when parsed JSON nests objects and arrays more than ``max_depth`` deep (``{}`` is 1).

    The raw text's bracket count bounds the depth from above at C speed, so most bodies skip the
    walk; the walk visits containers only, never string contents.
    """
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return False
    level = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        level = [
            child for each in level for child in (each.values() if isinstance(each, dict) else each)
            if isinstance(child, dict | list)
        ]
    return False


def error_body(status: int, message: str, error_type: str) -> bytes:
    """OpenAI-style JSON error (clients of OpenAI-compatible servers already parse this shape)."""
    return json.dumps({"error": {"message": message, "type": error_type, "code": status}}).encode()


class ClientGone(Exception):
    """The client went away before the request was complete."""


class GateAnswer(Exception):
    """The gate answers by itself (status, JSON body, extra headers) instead of forwarding."""

    def __init__(self, status: int, message: str, error_type: str, headers: list[tuple[bytes, bytes]] | None = None):
        super().__init__(message)
        self.status, self.message, self.error_type, self.headers = status, message, error_type, headers or []


async def send_json(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *(headers or [])],
    })
    await send({"type": "http.response.body", "body": body})


class DisconnectWatch:
    """Cancel the request's own task when the client disconnects before its answer is complete.

    One watcher task per request instead of a second task for the work plus ``asyncio.wait`` over
    both. ``finished`` is set before the answer's last send: completing a response also makes
    uvicorn's ``receive()`` say disconnect, which must not cancel anything.
    """

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self.finished = False
        #: The answer's headers went out (a preemption then ends the stream instead of answering 503).
        self.response_started = False
        #: The answer's body went out whole (the engine's stream ended, not the client or the gate).
        self.response_completed = False
        #: Set when the gate takes the request back (``lend-preempt``): what to tell the client.
        self.preemption: Any = None
        self._fired = False
        self._watcher = asyncio.get_running_loop().create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.finished:
            self._fired = True
            self._task.cancel()

    def preempt(self, preemption: Any) -> None:
        """Take the request back: cancel its task wherever it waits, as a disconnect does."""
        if self.finished or self.preemption is not None:
            return
        self.preemption = preemption
        self.finished = True  # a disconnect now must not cancel the task a second time
        if not self._fired:  # after a disconnect the task is cancelled already: record, do not cancel twice
            self._fired = True
            self._task.cancel()

    def absorb(self) -> bool:
        """After a CancelledError: True when our disconnect or preemption caused it (and nothing else cancelled)."""
        return self._fired and self._task.uncancel() == 0

    def stop(self) -> None:
        self._watcher.cancel()


def read_request_headers(scope: Scope) -> tuple[str, str, dict[str, str], ClientFacts]:
    """(request id, traffic class, the trace headers, who the client is) in one pass over the
    request's headers; an absent id or class is ``""``."""
    request_id = traffic_class = ""
    carrier: dict[str, str] = {}
    facts: dict[str, str] = {}
    for name, value in scope["headers"]:  # uvicorn gives lower-case names
        if name == REQUEST_ID_HEADER:
            request_id = value.decode("latin-1")
        elif name == TRAFFIC_CLASS_HEADER:
            traffic_class = value.decode("latin-1")
        elif name in _TRACE_HEADERS:
            carrier[name.decode("latin-1")] = value.decode("latin-1")
        elif name in _CLIENT_HEADERS:
            facts[_CLIENT_HEADERS[name]] = value.decode("latin-1")
    peer = scope.get("client")
    client = client_facts(peer=peer[0] if peer else None, request_id=request_id,
                          traced="traceparent" in carrier, **facts)
    return request_id, traffic_class, carrier, client
