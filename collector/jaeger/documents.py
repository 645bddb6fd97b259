"""Jaeger's JSON documents into span rows: the query API's answer (``GET /api/traces?...`` and
``/api/traces/<id>``: ``{"data": [trace, ...], "total", "limit", "offset", "errors"}``), the UI's
downloads (the same ``data`` array), a bare list of traces, and one trace (``{"traceID", "spans",
"processes"}``). Each span becomes OTLP/JSON (``spans``) and is decoded by ``decode_json``."""

from __future__ import annotations

import json
import re
from typing import Any

from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.jaeger.spans import otlp_span
from restorelens.collector.jaeger.values import SHOWN_CHARS, json_type, shown
from restorelens.collector.rows import PayloadError, SpanRejected, SpanRows

__all__ = ["decode_jaeger_json", "is_jaeger_json"]

_SPAN_AT = re.compile(r"resourceSpans\[(\d+)\]\.scopeSpans\[0\]\.spans\[0\]: ")
#: Keys that make a document OTLP's or Tempo's: such a document is not Jaeger's, whatever else it holds.
_OTHER_FORMATS_KEYS = ("resourceSpans", "resource_spans", "batches", "trace")


def is_jaeger_json(obj: Any) -> bool:
    """Whether a parsed JSON document has one of Jaeger's shapes (checked before OTLP's); one
    holding OTLP's or Tempo's keys too is not (the loader refuses it as ambiguous)."""
    if isinstance(obj, list):
        return bool(obj) and all(isinstance(t, dict) and "spans" in t for t in obj)
    if not isinstance(obj, dict) or any(key in obj for key in _OTHER_FORMATS_KEYS):
        return False
    return "data" in obj or ("spans" in obj and ("traceID" in obj or "processes" in obj))


def _error_text(error: Any) -> str:
    """One of the query API's ``errors`` (``{"code", "msg"}``; anything else as it is) as a few words."""
    if isinstance(error, dict) and ("code" in error or "msg" in error):
        parts = [error.get("code"), error.get("msg")]
        words = " ".join(p if isinstance(p, str) else _compact(p) for p in parts if p not in (None, ""))
    else:
        words = error if isinstance(error, str) else _compact(error)
    return words if len(words) <= SHOWN_CHARS else words[: SHOWN_CHARS - 1] + "\u2026"


def _compact(value: Any) -> str:
    try:
        return json.dumps(value, separators=(",", ":"))
    except (ValueError, RecursionError):
        return shown(value)


def _traces(obj: Any) -> tuple[list[Any], str, str]:
    """The traces of a document, the path they sit at (for messages), and a note (Jaeger's errors)."""
    if isinstance(obj, list):
        return obj, "", ""
    if "data" not in obj:
        return [obj], "", ""
    data, errors = obj.get("data"), obj.get("errors")
    if errors is None:
        errors = []
    elif not isinstance(errors, list):  # Jaeger writes a list; a lone error is still one
        errors = [errors]
    messages = [text for text in map(_error_text, errors) if text]
    note = "Jaeger reported: " + "; ".join(messages) if messages else ""
    if data is None:
        data = []
    if not isinstance(data, list):
        raise PayloadError(f'"data" must be a list of traces, not a JSON {json_type(data)}')
    if not data and note:
        raise PayloadError(f"no traces: {note}")
    return data, "data", note


def decode_jaeger_json(obj: Any, out: SpanRows, where: str = "", *, check_unicode: bool = True) -> str:
    """Append the spans of one Jaeger JSON document to ``out``; returns a note for the user ('' if none).

    A malformed envelope raises :class:`PayloadError`; a malformed span is rejected alone, with its
    position (``data[0].spans[3]``) and the reason.
    """
    traces, at, note = _traces(obj)
    places = [f"{at}[{i}]" if at else f"[{i}]" if isinstance(obj, list) else "" for i in range(len(traces))]
    for here, trace in zip(places, traces, strict=True):  # the whole envelope first: a bad one stores nothing
        if not isinstance(trace, dict) or not isinstance(trace.get("spans"), list):
            raise PayloadError(f"{here or 'the document'} is not a Jaeger trace (an object with a 'spans' list)")
        if not isinstance(trace.get("processes") or {}, dict):
            raise PayloadError(f"{here}.processes must be an object".lstrip("."))
    for here, trace in zip(places, traces, strict=True):
        processes = trace.get("processes") or {}
        converted, positions = [], []
        for k, span in enumerate(trace["spans"]):
            position = f"{here}.spans[{k}]".lstrip(".")
            try:
                converted.append(otlp_span(span, trace.get("traceID"), processes))
                positions.append(position)
            except (SpanRejected, RecursionError) as exc:
                out.reject(f"{where}{position}", str(exc) or "nested too deeply")
        scratch = SpanRows()
        decode_traces_json({"resourceSpans": converted}, scratch, check_unicode=check_unicode)
        out.rows.extend(scratch.rows)
        for message in scratch.errors:  # each names its one-span resourceSpans[n]: say the Jaeger position
            match = _SPAN_AT.match(message)
            position = positions[int(match.group(1))] if match else ""
            out.reject(f"{where}{position}", message[match.end():] if match else message)
        out.rejected += scratch.rejected - len(scratch.errors)  # rejections beyond the kept messages
    return note
