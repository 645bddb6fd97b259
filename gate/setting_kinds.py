"""What a gate setting accepts (``Kind``): the type check and the cast from text of every setting.

The gate's settings (``gate/settings.py``) and the policies' options (``gate/policies/registry.py``)
declare their values with these, so a TOML, environment, flag or admin value of the wrong type is
one ``SettingError`` line whichever declares it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FLOOR_TABLE", "SECONDS", "SWITCH", "TEXT", "TEXT_OR_NONE", "UPSTREAM_TABLE", "WHOLE", "WHOLE_OR_NONE",
           "Kind", "is_int", "shown"]


def _bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ValueError("expected true or false")


def shown(value: Any) -> str:
    """``str 'abc'``, ``bool True``: the type and the value, for "expected …, got …" messages."""
    if value is None:
        return "null"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def is_int(value: Any) -> bool:
    # bool is an int subclass: `port = true` is a mistake, not port 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_upstream_table(value: Any) -> bool:
    if not isinstance(value, Mapping):
        return False
    for model, urls in value.items():
        if not isinstance(model, str):
            return False
        if not (isinstance(urls, str) or (isinstance(urls, list | tuple) and all(isinstance(u, str) for u in urls))):
            return False
    return True


def _is_floor_table(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) and is_int(v) for k, v in value.items())


@dataclass(frozen=True, slots=True)
class Kind:
    """What a setting accepts, checked before any range check: a TOML, environment or admin value of
    the wrong type is a one-line SettingError, never a TypeError deep inside a comparison."""

    expected: str  # the "expected …" of the error
    accepts: Callable[[Any], bool]
    from_text: Callable[[str], Any]  # the cast of the environment variable (and of the flag)


TEXT = Kind("a string", lambda v: isinstance(v, str), str)
TEXT_OR_NONE = Kind("a string", lambda v: v is None or isinstance(v, str), str)
WHOLE = Kind("a whole number", is_int, int)
WHOLE_OR_NONE = Kind("a whole number or none", lambda v: v is None or is_int(v), int)
SECONDS = Kind("a number of seconds", _is_number, float)
SWITCH = Kind("true or false", lambda v: isinstance(v, bool), _bool)
UPSTREAM_TABLE = Kind("a table of MODEL = URL or [URL, ...]", _is_upstream_table, str)
FLOOR_TABLE = Kind("a table of CLASS = whole number", _is_floor_table, str)
