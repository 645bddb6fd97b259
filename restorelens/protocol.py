"""What the gate tells a client beyond HTTP itself, shared by the gate (which says it) and the
client (which reads it) so that the two cannot drift.

- ``x-restorelens-retry-after-ms``: the gate's retry estimate in milliseconds, finer than
  Retry-After's whole seconds.
- ``retry-after-ms``: the same value under the name the OpenAI, Anthropic and Azure SDKs read
  before Retry-After (restorelens's client reads it first too).
- ``x-should-retry``: ``true`` when a retry will succeed, ``false`` when only an operator or a new
  declaration can help; the OpenAI SDK obeys it (once the hint is within its 120-s limit).
- ``x-stainless-retry-count``: sent by the OpenAI (Stainless-generated) SDKs, the retries taken so
  far: a client that carries its own retry budget.
- A preempted stream: when ``lend-preempt`` takes a loan back after the answer's headers went out,
  the gate ends the stream with one Server-Sent Event in OpenAI's error shape whose type is
  ``preempted``, carrying the same hint as the 503 it would otherwise have sent
  (``retry_after_ms``, and ``retry_after_s`` as Retry-After would say it).
"""

from __future__ import annotations

import json

__all__ = ["PREEMPTED", "RETRY_AFTER_MS_HEADER", "SDK_RETRY_AFTER_MS_HEADER", "SDK_RETRY_COUNT_HEADER",
           "SHOULD_RETRY_HEADER", "is_preempted_answer", "parse_preempted_event", "preempted_event"]

RETRY_AFTER_MS_HEADER = "x-restorelens-retry-after-ms"
SDK_RETRY_AFTER_MS_HEADER = "retry-after-ms"
SHOULD_RETRY_HEADER = "x-should-retry"
SDK_RETRY_COUNT_HEADER = "x-stainless-retry-count"
#: The error type of a preemption, in the 503 body and in the stream's last event.
PREEMPTED = "preempted"
_EVENT_PREFIX = 'data: {"error"'
#: A preemption event is a few hundred bytes; a longer error line is not one (and is not parsed).
_MAX_EVENT_CHARS = 1024


def preempted_event(message: str, retry_after_ms: int, retry_after_s: str) -> bytes:
    """The stream's last event when the gate takes the request back (then the stream ends)."""
    error = {"message": message, "type": PREEMPTED, "code": 503, "retry_after_ms": retry_after_ms,
             "retry_after_s": retry_after_s}
    return b"data: " + json.dumps({"error": error}).encode() + b"\n\n"


def parse_preempted_event(line: str) -> tuple[tuple[str, str], ...] | None:
    """The retry hint of a preemption event as response headers would carry it, or None when
    ``line`` (one SSE line) is anything else."""
    if not line.startswith(_EVENT_PREFIX) or len(line) > _MAX_EVENT_CHARS:
        return None
    try:
        error = json.loads(line[len("data: "):])["error"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(error, dict) or error.get("type") != PREEMPTED:
        return None
    headers: list[tuple[str, str]] = []
    if isinstance(error.get("retry_after_ms"), int):
        headers.append((RETRY_AFTER_MS_HEADER, str(error["retry_after_ms"])))
        headers.append((SDK_RETRY_AFTER_MS_HEADER, str(error["retry_after_ms"])))
    if isinstance(error.get("retry_after_s"), str):
        headers.append(("retry-after", error["retry_after_s"]))
    return tuple(headers)


def is_preempted_answer(status: int, body: bytes) -> bool:
    """A 503 whose OpenAI-shaped error says the gate took the request back (before any byte of its
    answer went out)."""
    if status != 503 or len(body) > _MAX_EVENT_CHARS:
        return False
    try:
        error = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(error, dict) and error.get("type") == PREEMPTED
