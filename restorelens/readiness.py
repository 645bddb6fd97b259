"""What says an engine can serve: the readiness check the lifecycle and ``restorelens probe`` share.

``/health`` is not it: vLLM (and ``restorelens sim``) answer ``/health`` 200 while asleep. A check
is one of:

- ``auto`` (the default): ``GET /is_sleeping`` (vLLM's dev-mode sleep API, ``restorelens sim
  --enable-sleep-mode``) must answer 200 with ``"is_sleeping": false``; an engine that does not
  expose it (404/405) is judged by ``GET /health`` alone, the only signal it gives;
- ``health``: ``GET /health`` answers 2xx (for engines without sleep mode);
- ``completion``: a one-token completion (``POST /v1/completions``, ``max_tokens`` 1) answers 2xx:
  what the engine can do, whatever it reports; costs one engine step per check;
- a JSON check: ``GET path`` answers 200 with a JSON object whose ``field`` equals ``equals``.

This module holds the check as data and its parsing (``parse_readiness``); the HTTP side lives
with the callers' I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from restorelens.errors import SettingError

__all__ = ["AUTO", "COMPLETION", "HEALTH", "JSON", "KINDS", "ReadinessCheck", "parse_readiness"]

AUTO, HEALTH, COMPLETION, JSON = "auto", "health", "completion", "json"
KINDS = (AUTO, HEALTH, COMPLETION, JSON)
_TABLE_KEYS = ("path", "field", "equals")


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
