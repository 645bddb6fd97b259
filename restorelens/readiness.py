"""What says an engine can serve: the readiness check the lifecycle and ``restorelens probe`` share.

``/health`` is not it: vLLM (and ``restorelens sim``) answer ``/health`` 200 while asleep. A check
is one of:

- ``auto`` (the default): ``GET /is_sleeping`` (vLLM's dev-mode sleep API, ``restorelens sim
  --enable-sleep-mode``) must answer 200 with ``"is_sleeping": false``; an engine that does not
  expose it (404/405) is judged by ``GET /health`` alone, the only signal it gives;
- ``health``: ``GET /health`` answers 2xx (for engines without sleep mode);
- ``completion``: a one-token completion (``POST /v1/completions``, ``max_tokens`` 1) answers 2xx:
  what the engine can do, whatever it reports; costs one engine step per check;
- a JSON check: ``GET path`` answers 200 with a JSON object whose top-level ``field`` equals
  ``equals`` (a boolean only a boolean: JSON's ``true`` is not ``1``).

This module holds the check as data, its parsing (``parse_readiness``) and its one HTTP exchange
(``check_ready``), which the lifecycle's backends and the probe's poller repeat on their own clocks.
An answer is ready, asleep (only the sleep API can say so: ``auto``, or ``sleep_state``) or not
ready (a refused connection, an error status, an answer that is not what the check wants). Every
answer is read to at most ``MAX_BODY_BYTES``: these are tiny JSON bodies, and an endpoint that
sends more is not the one the check means. The completion check's prompt is a fixed word and is
never recorded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from restorelens.errors import SettingError, first_line

__all__ = [
    "ASLEEP", "AUTO", "COMPLETION", "COMPLETION_PROMPT", "HEALTH", "JSON", "KINDS", "MAX_BODY_BYTES", "NOT_READY",
    "READY", "ReadinessAnswer", "ReadinessCheck", "check_ready", "parse_readiness", "sleep_state",
]

AUTO, HEALTH, COMPLETION, JSON = "auto", "health", "completion", "json"
KINDS = (AUTO, HEALTH, COMPLETION, JSON)
READY, ASLEEP, NOT_READY = "ready", "asleep", "not-ready"
#: The most of an answer a check reads; past it the answer counts as not ready.
MAX_BODY_BYTES = 64 * 1024
#: What the completion check sends: one token of a fixed word, so no user text ever leaves.
COMPLETION_PROMPT = "ready?"
_TABLE_KEYS = ("path", "field", "equals")
#: What an engine without vLLM's dev-mode sleep API answers ``GET /is_sleeping``.
_NO_ROUTE = (404, 405)


@dataclass(frozen=True, slots=True)
class ReadinessCheck:
    """One readiness check; ``path``/``field``/``equals`` only for ``json``."""

    kind: str = AUTO
    path: str = ""
    field: str = ""
    equals: Any = None

    def describe(self) -> str:
        if self.kind == JSON:
            return f"GET {self.path} -> {self.field} == {self.equals!r}"
        return {AUTO: "GET /is_sleeping -> is_sleeping == false (else /health)", HEALTH: "GET /health -> 2xx",
                COMPLETION: "a one-token completion -> 2xx"}[self.kind]


def parse_readiness(value: Any, where: str) -> ReadinessCheck:
    """A check from ``"auto"``, ``"health"``, ``"completion"`` or ``{ path, field, equals }``."""
    if isinstance(value, str):
        if value in (AUTO, HEALTH, COMPLETION):
            return ReadinessCheck(value)
        raise SettingError(where, f"must be auto, health, completion or a table {{ path, field, equals }}, got {value!r}")
    if not isinstance(value, Mapping):
        raise SettingError(where, f"must be auto, health, completion or a table {{ path, field, equals }}, got {value!r}")
    unknown = sorted(set(value) - set(_TABLE_KEYS))
    if unknown:
        raise SettingError(f"{where}.{unknown[0]}", f"unknown key; valid: {', '.join(_TABLE_KEYS)}")
    path, field = value.get("path"), value.get("field")
    if not isinstance(path, str) or not path.startswith("/"):
        raise SettingError(f"{where}.path", f"must be a path starting with '/', got {path!r}")
    if not isinstance(field, str) or not field:
        raise SettingError(f"{where}.field", f"must name the JSON field to compare, got {field!r}")
    if "equals" not in value:
        raise SettingError(f"{where}.equals", "must give the value that means ready (e.g. false)")
    equals = value["equals"]
    if not isinstance(equals, str | int | float | bool):
        raise SettingError(f"{where}.equals", f"must be a string, number or boolean, got {equals!r}")
    return ReadinessCheck(JSON, path, field, equals)


@dataclass(frozen=True, slots=True)
class ReadinessAnswer:
    """One check's verdict: ``state`` is ``READY``, ``ASLEEP`` or ``NOT_READY``; ``detail`` says in
    one line what was seen. ``sleep_known``: the engine's sleep API answered (an ``auto`` check that
    fell back to ``/health``, and every other kind, cannot tell a sleeping engine from a ready one).
    ``reached``: the engine answered at all (False: refused, timed out, broke off)."""

    state: str
    detail: str
    sleep_known: bool = False
    reached: bool = True

    @property
    def ready(self) -> bool:
        return self.state == READY

    @property
    def asleep(self) -> bool:
        return self.state == ASLEEP


class _TooLarge(Exception):
    pass


async def _exchange(client: httpx.AsyncClient, method: str, url: str, body: Any = None) -> tuple[int, bytes]:
    """Status and body of one request, the body read to at most ``MAX_BODY_BYTES`` (``_TooLarge`` past it)."""
    async with client.stream(method, url, json=body) as response:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            raise _TooLarge
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > MAX_BODY_BYTES:
                raise _TooLarge
        return response.status_code, bytes(data)


async def _ask(
    client: httpx.AsyncClient, method: str, url: str, body: Any = None
) -> tuple[int, bytes] | ReadinessAnswer:
    """The answer, or the not-ready verdict of a request that got none a check can read."""
    shown = f"{method} {httpx.URL(url).path}"
    try:
        return await _exchange(client, method, url, body)
    except _TooLarge:
        return ReadinessAnswer(NOT_READY, f"{shown}: answer larger than {MAX_BODY_BYTES // 1024} KiB")
    except httpx.HTTPError as exc:
        return ReadinessAnswer(NOT_READY, f"{shown}: {first_line(exc)}", reached=False)


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError included; a body of nested brackets
        return None
    return value if isinstance(value, dict) else None


def _same(value: Any, equals: Any) -> bool:
    # JSON's true is not 1: a field that says true must not pass a check for 1, nor 0 one for false.
    if isinstance(value, bool) or isinstance(equals, bool):
        return isinstance(value, bool) and isinstance(equals, bool) and value == equals
    return value == equals


async def sleep_state(client: httpx.AsyncClient, base_url: str) -> ReadinessAnswer | None:
    """The engine's own sleep state from ``GET /is_sleeping``: ``READY`` when it says false, ``ASLEEP``
    when true, ``NOT_READY`` for any other answer; None when the engine has no such route (404/405)."""
    answer = await _ask(client, "GET", f"{base_url.rstrip('/')}/is_sleeping")
    if isinstance(answer, ReadinessAnswer):
        return answer
    status, data = answer
    if status in _NO_ROUTE:
        return None
    if status != 200:
        return ReadinessAnswer(NOT_READY, f"GET /is_sleeping answered {status}")
    sleeping = (_json_object(data) or {}).get("is_sleeping")
    if not isinstance(sleeping, bool):
        return ReadinessAnswer(NOT_READY, "GET /is_sleeping: no boolean is_sleeping in the answer")
    return ReadinessAnswer(ASLEEP if sleeping else READY, f"GET /is_sleeping: is_sleeping {str(sleeping).lower()}",
                           sleep_known=True)


async def _succeeds(client: httpx.AsyncClient, method: str, url: str, body: Any = None) -> ReadinessAnswer:
    answer = await _ask(client, method, url, body)
    if isinstance(answer, ReadinessAnswer):
        return answer
    status = answer[0]
    return ReadinessAnswer(READY if 200 <= status < 300 else NOT_READY, f"{method} {httpx.URL(url).path} answered {status}")


async def check_ready(
    client: httpx.AsyncClient, base_url: str, check: ReadinessCheck, *, model: str | None = None
) -> ReadinessAnswer:
    """Run ``check`` once against the engine at ``base_url``; ``model`` names it for ``completion``."""
    base = base_url.rstrip("/")
    if check.kind == AUTO:
        answer = await sleep_state(client, base)
        if answer is not None:
            return answer
        health = await _succeeds(client, "GET", f"{base}/health")
        return ReadinessAnswer(health.state, f"no /is_sleeping (sleep state unknown); {health.detail}",
                               reached=health.reached)
    if check.kind == HEALTH:
        return await _succeeds(client, "GET", f"{base}/health")
    if check.kind == COMPLETION:
        if not model:
            raise ValueError("a completion readiness check needs the model name")
        body = {"model": model, "prompt": COMPLETION_PROMPT, "max_tokens": 1}
        return await _succeeds(client, "POST", f"{base}/v1/completions", body)
    answer = await _ask(client, "GET", f"{base}{check.path}")
    if isinstance(answer, ReadinessAnswer):
        return answer
    status, data = answer
    shown = f"GET {check.path}"
    if status != 200:
        return ReadinessAnswer(NOT_READY, f"{shown} answered {status}")
    document = _json_object(data)
    if document is None:
        return ReadinessAnswer(NOT_READY, f"{shown}: the answer is no JSON object")
    if check.field not in document:
        return ReadinessAnswer(NOT_READY, f"{shown}: no field {check.field!r} in the answer")
    value = document[check.field]
    ready = _same(value, check.equals)
    return ReadinessAnswer(READY if ready else NOT_READY, f"{shown}: {check.field} is {json.dumps(value)[:80]}")
