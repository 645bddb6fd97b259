"""Decode OTLP/JSON ``TracesData`` (a parsed JSON object) into span rows.

Lenient on input like the Collector's OTLP/JSON receiver (the OTLP spec's JSON encoding): hex IDs in any case
(and 16/8-byte base64 IDs, as protobuf's own JSON mapping writes them), 64-bit integers as strings
or numbers, enums as integers or names, camelCase and snake_case keys, ``status: {}``, legacy
``instrumentationLibrarySpans``. A malformed envelope raises :class:`PayloadError`; a malformed span
is rejected alone with a reason naming its position.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.rows import (
    KIND_NAMES,
    MAX_TIMESTAMP_NS,
    STATUS_NAMES,
    PayloadError,
    SpanRejected,
    SpanRows,
    compact_json,
    double_to_str,
)

__all__ = ["decode_traces_json", "json_value_to_str", "loads"]

_HEX_DIGITS = frozenset("0123456789abcdef")
_MAX_VALUE_DEPTH = 32

_KIND_BY_NAME = {name.upper(): i for i, name in enumerate(KIND_NAMES)}
_KIND_BY_NAME.update({f"SPAN_KIND_{name.upper()}": i for i, name in enumerate(KIND_NAMES)})
_STATUS_BY_NAME = {name.upper(): i for i, name in enumerate(STATUS_NAMES)}
_STATUS_BY_NAME.update({f"STATUS_CODE_{name.upper()}": i for i, name in enumerate(STATUS_NAMES)})


def _get(obj: dict[str, Any], camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _hex_id(value: Any, n_bytes: int, what: str, required: bool) -> str:
    if value is None or value == "":
        if required:
            raise SpanRejected(f"{what} is missing")
        return ""
    if not isinstance(value, str):
        raise SpanRejected(f"{what} must be a hex string, not {type(value).__name__}")
    if len(value) == 2 * n_bytes:
        low = value.lower()
        if _HEX_DIGITS.issuperset(low):
            if required and low.count("0") == len(low):
                raise SpanRejected(f"{what} is all zeros (invalid)")
            return low
    elif len(value) == 4 * ((n_bytes + 2) // 3):
        try:
            return _hex_id(base64.b64decode(value, validate=True).hex(), n_bytes, what, required)
        except (binascii.Error, ValueError):
            pass
    raise SpanRejected(f"{what} {value[:48]!r} is not {2 * n_bytes} hex digits")


#: The decimal digits of the largest int64 (9,223,372,036,854,775,807).
_INT64_DIGITS = 19
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _nanos(value: Any, what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit()):
            raise SpanRejected(f"{what} {value[:32]!r} is not a non-negative integer")
        if len(value.lstrip("0")) > _INT64_DIGITS:
            # past any int64, and int() refuses strings past 4,300 digits with a ValueError
            raise SpanRejected(f"{what} {value[:32]!r}... is out of range (0 .. 2^63-1 ns)")
        nanos = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        nanos = value
    elif isinstance(value, float) and value.is_integer():
        nanos = int(value)
    else:
        raise SpanRejected(f"{what} {value!r:.32} is not a non-negative integer")
    if not 0 <= nanos <= MAX_TIMESTAMP_NS:
        raise SpanRejected(f"{what} {nanos} is out of range (0 .. 2^63-1 ns)")
    return nanos


def _enum(value: Any, by_name: dict[str, int], names: tuple[str, ...], what: str) -> str:
    if value is None:
        return names[0]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(names):
        return names[value]
    if isinstance(value, str):
        number = by_name.get(value.upper())
        if number is None and value.isascii() and value.isdigit() and len(value) <= 3 and int(value) < len(names):
            number = int(value)
        if number is not None:
            return names[number]
    raise SpanRejected(f"{what} {value!r:.40} is not a known value")


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    # OTLP's intValue is an int64, in JSON a decimal string: one optional sign, then digits ("--5"
    # passed a strip of every "-"; a string past 4,300 digits makes int() raise ValueError)
    digits = value[1:] if isinstance(value, str) and value.startswith("-") else value
    if (isinstance(digits, str) and digits.isascii() and digits.isdigit()
            and len(digits.lstrip("0")) <= _INT64_DIGITS and _INT64_MIN <= int(value) <= _INT64_MAX):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise SpanRejected(f"intValue {value!r:.32} is not an integer")


class _NegativeZero(int):
    """The JSON number ``-0``: the integer 0 everywhere, except that as a ``doubleValue`` it is -0.0."""


_NEGATIVE_ZERO = _NegativeZero(0)


def _parse_int(text: str) -> int:
    return _NEGATIVE_ZERO if text == "-0" else int(text)


def loads(text: str | bytes) -> Any:
    """``json.loads`` keeping the sign of ``-0``: Go's encoder (the Collector's) writes a double
    -0.0 as ``-0``, which ``json.loads`` reads as the integer 0, and the fast paths store "-0.0"."""
    return json.loads(text, parse_int=_parse_int)


def _double(value: Any) -> float:
    if value is _NEGATIVE_ZERO:
        return -0.0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise SpanRejected(f"doubleValue {value!r:.32} is not a number")


def _raw(value: Any, depth: int) -> Any:
    """An AnyValue as the plain value it carries (arrays and kvlists recursively)."""
    if not value:
        return None
    if not isinstance(value, dict):
        raise SpanRejected(f"attribute value must be an object, not {type(value).__name__}")
    if depth > _MAX_VALUE_DEPTH:
        raise SpanRejected("attribute value nested too deeply")
    for key, item in value.items():
        if item is None:
            continue
        if key in ("stringValue", "string_value", "bytesValue", "bytes_value"):
            if not isinstance(item, str):
                raise SpanRejected(f"{key} must be a string")
            return item
        if key in ("boolValue", "bool_value"):
            if not isinstance(item, bool):
                raise SpanRejected("boolValue must be true or false")
            return item
        if key in ("intValue", "int_value"):
            return _int(item)
        if key in ("doubleValue", "double_value"):
            return _double(item)
        if key in ("arrayValue", "array_value"):
            return [_raw(v, depth + 1) for v in _list(item, key)]
        if key in ("kvlistValue", "kvlist_value"):
            return {_key(kv): _raw(kv.get("value"), depth + 1) for kv in _list(item, key)}
    return None


def _list(container: Any, what: str) -> list[Any]:
    if not isinstance(container, dict):
        raise SpanRejected(f"{what} must be an object with 'values'")
    values = container.get("values") or []
    if not isinstance(values, list):
        raise SpanRejected(f"{what}.values must be a list")
    return values


def _key(kv: Any) -> str:
    if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
        raise SpanRejected("attribute must be an object with a string 'key'")
    return kv["key"]


def json_value_to_str(value: Any) -> str:
    """An OTLP/JSON AnyValue as the ClickHouse exporter's string form."""
    if isinstance(value, dict):
        plain = value.get("stringValue")
        if isinstance(plain, str):
            return plain  # the common case, first
    raw = _raw(value, 0)
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        return double_to_str(raw)
    return compact_json(raw)


def _attributes(kvs: Any) -> dict[str, str]:
    if not kvs:
        return {}
    if not isinstance(kvs, list):
        raise SpanRejected("attributes must be a list")
    return {_key(kv): json_value_to_str(kv.get("value")) for kv in kvs}


def _events(events: Any) -> tuple[list[int], list[str], list[dict[str, str]]]:
    if not isinstance(events, list):
        raise SpanRejected("events must be a list")
    times, names, attrs = [], [], []
    for event in events:
        if not isinstance(event, dict):
            raise SpanRejected("event must be an object")
        times.append(_nanos(_get(event, "timeUnixNano", "time_unix_nano"), "event timeUnixNano"))
        name = event.get("name") or ""
        if not isinstance(name, str):
            raise SpanRejected("event name must be a string")
        names.append(name)
        attrs.append(_attributes(event.get("attributes")))
    return times, names, attrs


def _links(links: Any) -> tuple[list[str], list[str], list[str], list[dict[str, str]]]:
    if not isinstance(links, list):
        raise SpanRejected("links must be a list")
    trace_ids, span_ids, states, attrs = [], [], [], []
    for link in links:
        if not isinstance(link, dict):
            raise SpanRejected("link must be an object")
        trace_ids.append(_hex_id(_get(link, "traceId", "trace_id"), 16, "link traceId", True))
        span_ids.append(_hex_id(_get(link, "spanId", "span_id"), 8, "link spanId", True))
        states.append(_string(_get(link, "traceState", "trace_state"), "link traceState"))
        attrs.append(_attributes(link.get("attributes")))
    return trace_ids, span_ids, states, attrs


def _string(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise SpanRejected(f"{what} must be a string")
    return value


_NO_EVENTS: tuple[list[Any], ...] = ([], [], [])
_SURROGATE_SOURCE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_NO_LINKS: tuple[list[Any], ...] = ([], [], [], [])


def _span_row(span: Any, resource: tuple[dict[str, str], str], scope: tuple[str, str],
              check_unicode: bool = True) -> tuple[Any, ...]:
    if not isinstance(span, dict):
        raise SpanRejected("span must be an object")
    start = _nanos(_get(span, "startTimeUnixNano", "start_time_unix_nano"), "startTimeUnixNano")
    end = _nanos(_get(span, "endTimeUnixNano", "end_time_unix_nano"), "endTimeUnixNano")
    status = span.get("status") or {}
    if not isinstance(status, dict):
        raise SpanRejected("status must be an object")
    events = span.get("events")
    links = span.get("links")
    e_times, e_names, e_attrs = _events(events) if events else _NO_EVENTS
    l_traces, l_spans, l_states, l_attrs = _links(links) if links else _NO_LINKS
    row = (
        start,
        _hex_id(_get(span, "traceId", "trace_id"), 16, "traceId", True),
        _hex_id(_get(span, "spanId", "span_id"), 8, "spanId", True),
        _hex_id(_get(span, "parentSpanId", "parent_span_id"), 8, "parentSpanId", False),
        _string(_get(span, "traceState", "trace_state"), "traceState"),
        _string(span.get("name"), "name"),
        _enum(span.get("kind"), _KIND_BY_NAME, KIND_NAMES, "kind"),
        resource[1],
        resource[0],
        scope[0],
        scope[1],
        _attributes(span.get("attributes")),
        end - start if end > start else 0,
        _enum(status.get("code"), _STATUS_BY_NAME, STATUS_NAMES, "status.code"),
        _string(status.get("message"), "status.message"),
        e_times,
        e_names,
        e_attrs,
        l_traces,
        l_spans,
        l_states,
        l_attrs,
    )
    if check_unicode:
        _check_unicode(row)
    return row


def _check_unicode(row: tuple[Any, ...]) -> None:
    """Reject a span holding a lone UTF-16 surrogate (JSON's "\ud800" escape decodes to one).

    Such a string is no Unicode: the store cannot encode it, and left in a batch it would fail
    every other span committed with it. One encode of all the span's strings finds it.
    """
    texts: list[str] = [row[4], row[5], row[7], row[9], row[10], row[14], *row[16], *row[20]]
    for mapping in (row[8], row[11], *row[17], *row[21]):
        texts.extend(mapping)
        texts.extend(mapping.values())
    try:
        "".join(texts).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end]
        raise SpanRejected(f"a string holds a lone surrogate ({bad.encode('unicode_escape').decode()}), "
                           "which is not Unicode") from None


def _objects(container: dict[str, Any], keys: tuple[str, ...], where: str) -> list[dict[str, Any]]:
    for key in keys:
        value = container.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise PayloadError(f"{where}{key} must be a list of objects")
        return value
    return []


def _scope(scope_spans: dict[str, Any], where: str) -> tuple[str, str]:
    scope = scope_spans.get("scope") or scope_spans.get("instrumentationLibrary") or {}
    if not isinstance(scope, dict):
        raise PayloadError(f"{where}scope must be an object")
    name, version = scope.get("name") or "", scope.get("version") or ""
    if not isinstance(name, str) or not isinstance(version, str):
        raise PayloadError(f"{where}scope name and version must be strings")
    return name, version


def may_hold_surrogates(raw: bytes) -> bool:
    """Whether JSON text ``raw`` can decode to a lone surrogate: a ``\\uD800``-``\\uDFFF`` escape, or
    the UTF-8 form of one (``json.loads`` decodes bytes with ``surrogatepass``). Most bodies hold
    neither, and their spans need no Unicode check."""
    return _SURROGATE_SOURCE.search(raw) is not None


def decode_traces_json(obj: Any, out: SpanRows, where: str = "", *, check_unicode: bool = True) -> None:
    """Append the spans of one TracesData / ExportTraceServiceRequest object to ``out``.

    ``where`` prefixes error messages (e.g. ``"spans.jsonl:12: "``). ``check_unicode=False`` skips
    the lone-surrogate check, for objects parsed from text that ``may_hold_surrogates`` cleared.
    """
    if not isinstance(obj, dict):
        raise PayloadError(f'expected a JSON object with "resourceSpans", found a JSON {type(obj).__name__}')
    if "batches" in obj and "resourceSpans" not in obj:
        raise PayloadError('legacy "batches" shape (Grafana/OTEP 0122); expected "resourceSpans"')
    for i, rs in enumerate(_objects(obj, ("resourceSpans", "resource_spans"), "")):
        at = f"resourceSpans[{i}]."
        resource = rs.get("resource") or {}
        if not isinstance(resource, dict):
            raise PayloadError(f"{at}resource must be an object")
        try:
            res_attrs = _attributes(resource.get("attributes"))
            resource_error = ""
        except (SpanRejected, RecursionError) as exc:
            res_attrs, resource_error = {}, f"resource: {exc}"
        res = (res_attrs, res_attrs.get(SERVICE_NAME, ""))
        keys = ("scopeSpans", "scope_spans", "deprecatedScopeSpans", "instrumentationLibrarySpans")
        for j, ss in enumerate(_objects(rs, keys, at)):
            scope = _scope(ss, f"{at}scopeSpans[{j}].")
            spans = ss.get("spans") or []
            if not isinstance(spans, list):
                raise PayloadError(f"{at}scopeSpans[{j}].spans must be a list")
            for k, span in enumerate(spans):
                try:
                    if resource_error:
                        raise SpanRejected(resource_error)
                    out.rows.append(_span_row(span, res, scope, check_unicode))
                except (SpanRejected, RecursionError) as exc:
                    out.reject(f"{where}{at}scopeSpans[{j}].spans[{k}]", str(exc) or "nested too deeply")
