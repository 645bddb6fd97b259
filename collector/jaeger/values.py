"""Jaeger's JSON values, checked and written as OTLP/JSON writes them: hex IDs padded to their
length, microseconds, and tags of every type (``string``, ``bool``, ``int64``, ``float64``,
``binary`` as base64) as attributes. A value that breaks the rules rejects its span
(``SpanRejected``), with a message that shows at most ``SHOWN_CHARS`` of it."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from restorelens.collector.rows import MAX_TIMESTAMP_NS, SpanRejected

__all__ = [
    "MAX_MICROS",
    "NS_PER_US",
    "SHOWN_CHARS",
    "attributes",
    "hex_id",
    "json_type",
    "microseconds",
    "shown",
    "string_tag",
    "typed_tags",
]

_HEX = frozenset("0123456789abcdefABCDEF")
#: Nanoseconds per microsecond: Jaeger's JSON times and durations are microseconds.
NS_PER_US = 1000
#: The latest time (and start + duration) whose nanoseconds fit the store's signed 64-bit TIMESTAMP_NS.
MAX_MICROS = MAX_TIMESTAMP_NS // NS_PER_US
_INT64 = (-(2**63), 2**63 - 1)
#: Digits beyond which a decimal cannot be in range: checked before int(), which refuses more than
#: 4300 digits with a ValueError of its own.
_MAX_INT64_DIGITS = 19
_UNSIGNED = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"-?[0-9]+")
# A float64 as a string: what Go's strconv.ParseFloat reads in base 10 (float() would also take
# blanks around it and "1_000")
_FLOAT = re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)
#: Characters of a value shown in a message: a megabyte-long value must not make a megabyte-long line.
SHOWN_CHARS = 200


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters with an ellipsis."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # an int of over 4300 digits; a structure nested too deeply
        return f"<a {type(value).__name__} too large to show>"
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def hex_id(value: Any, digits: int, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise SpanRejected(f"{what} is missing" if value in (None, "") else f"{what} must be a hex string")
    if len(value) > digits or not _HEX.issuperset(value):
        raise SpanRejected(f"{what} {shown(value, 52)} is not hex of at most {digits} digits")
    return value.lower().rjust(digits, "0")


def microseconds(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise SpanRejected(f"{what} must be a number of microseconds")
    if isinstance(value, int):
        micros = value
    elif isinstance(value, float) and value.is_integer():
        micros = int(value)
    elif isinstance(value, str) and _UNSIGNED.fullmatch(value):
        if len(value.lstrip("0")) > _MAX_INT64_DIGITS:
            raise SpanRejected(f"{what} {shown(value)} is out of range (0 .. {MAX_MICROS} microseconds)")
        micros = int(value)
    else:
        raise SpanRejected(f"{what} {shown(value)} is not a whole number of microseconds")
    if micros < 0:
        raise SpanRejected(f"{what} {shown(micros)} is negative")
    if micros > MAX_MICROS:  # the store's nanoseconds are a signed 64-bit count
        raise SpanRejected(f"{what} {shown(micros)} is out of range (0 .. {MAX_MICROS} microseconds)")
    return micros


def _int64(value: Any) -> int | None:
    """An int64 tag's value (a JSON number, or a decimal string beyond 2^53); None if not an integer."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _SIGNED.fullmatch(value):
        if len(value.lstrip("-").lstrip("0")) > _MAX_INT64_DIGITS:
            raise SpanRejected(f"int64 value {shown(value)} is out of range")
        number = int(value)
    else:
        return None
    if not _INT64[0] <= number <= _INT64[1]:
        raise SpanRejected(f"int64 value {shown(number)} is out of range")
    return number


def _float64(value: Any) -> float | None:
    """A float64 tag's value (a JSON number, or a string of one); None if not a number."""
    if isinstance(value, float):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise SpanRejected(f"float64 value {shown(value)} is out of range") from None
    if isinstance(value, str) and _FLOAT.fullmatch(value):
        return float(value)
    return None


def _tag(kv: Any, what: str) -> tuple[str, str, Any]:
    """One Jaeger KeyValue as (key, type, value) with the value of that type."""
    if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
        raise SpanRejected(f"{what} must be an object with a string 'key'")
    key, kind, value = kv["key"], kv.get("type"), kv.get("value")
    try:
        return key, *_typed(kind, value)
    except SpanRejected as exc:
        raise SpanRejected(f"{what} {shown(key, 60)}: {exc}") from None


def _typed(kind: Any, value: Any) -> tuple[str, Any]:
    """A tag's (type, value), the value checked against the type (or the type told by the value)."""
    if kind is None:  # "type" is omitempty in model/json: tell it by the JSON value
        kind = {str: "string", bool: "bool", int: "int64", float: "float64"}.get(type(value), "")
    given = kind
    kind = kind.lower() if isinstance(kind, str) else ""
    if kind == "string" and isinstance(value, str):
        return kind, value
    if kind == "bool":
        if isinstance(value, bool):
            return kind, value
        if value in ("true", "false"):
            return kind, value == "true"
    elif kind == "int64":
        # from_domain.go writes integers beyond 2^53 (JavaScript's exact range) as decimal strings
        number = _int64(value)
        if number is not None:
            return kind, number
    elif kind == "float64":
        double = _float64(value)
        if double is not None:
            return kind, double
    elif kind == "binary" and isinstance(value, str):  # Go's JSON encodes []byte as base64
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise SpanRejected("binary value is not base64") from None
        return kind, value
    elif kind not in ("string", ""):
        raise SpanRejected(f"unknown type {shown(given, 40)}")
    raise SpanRejected(f"value {shown(value, 40)} is not of type {kind or 'string'}")


def _any_value(kind: str, value: Any) -> dict[str, Any]:
    if kind == "string":
        return {"stringValue": value}
    if kind == "bool":
        return {"boolValue": value}
    if kind == "int64":
        return {"intValue": str(value)}
    if kind == "float64":
        return {"doubleValue": value}
    return {"bytesValue": value}


def typed_tags(kvs: Any, what: str) -> dict[str, tuple[str, Any]]:
    if kvs is None:
        return {}
    if not isinstance(kvs, list):
        raise SpanRejected(f"{what}s must be a list")
    tags: dict[str, tuple[str, Any]] = {}
    for kv in kvs:
        key, kind, value = _tag(kv, what)
        tags[key] = (kind, value)  # a repeated key: the last wins, as for OTLP attributes
    return tags


def attributes(tags: dict[str, tuple[str, Any]]) -> list[dict[str, Any]]:
    return [{"key": key, "value": _any_value(kind, value)} for key, (kind, value) in tags.items()]


def string_tag(tags: dict[str, tuple[str, Any]], key: str) -> str | None:
    """Remove tag ``key``; its value if a string, '' if of another type (pcommon's Str()), None if absent."""
    found = tags.pop(key, None)
    if found is None:
        return None
    return found[1] if found[0] == "string" else ""


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}


def json_type(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)
