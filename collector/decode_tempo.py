"""Decode Grafana Tempo's trace-by-ID JSON into span rows.

Tempo answers ``GET /api/traces/<id>`` with ``{"batches": [ResourceSpans, ...]}`` (its ``Trace``
message, whose field is named ``batches``; Grafana's "Download traces" writes the same) and
``GET /api/v2/traces/<id>`` with ``{"trace": {"resourceSpans": [...]}, "status": "COMPLETE" |
"PARTIAL", "message": ...}``. Inside, it is OTLP/JSON as protobuf's JSON mapping writes it: base64
IDs, enum names (``SPAN_KIND_SERVER``, ``STATUS_CODE_ERROR``), int64 as strings, and
``scopeSpans`` or, from older Tempo, ``instrumentationLibrarySpans``. All of that is what
``decode_json`` already reads, so this module only finds the resource spans and says where they
were in its messages.
"""

from __future__ import annotations

from typing import Any

from restorelens.collector.jaeger import SHOWN_CHARS
from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.rows import PayloadError, SpanRows

__all__ = ["decode_tempo_json", "is_tempo_json"]


def is_tempo_json(obj: Any) -> bool:
    """Whether a parsed JSON document is one of Tempo's trace-by-ID answers."""
    if not isinstance(obj, dict) or "resourceSpans" in obj or "resource_spans" in obj:
        return False
    return "batches" in obj or isinstance(obj.get("trace"), dict)


def _resource_spans(obj: dict[str, Any]) -> tuple[Any, str]:
    if "batches" in obj:
        return obj["batches"], "batches"
    trace = obj["trace"]
    for key in ("resourceSpans", "batches"):
        if key in trace:
            return trace[key], f"trace.{key}"
    return [], "trace.resourceSpans"  # v2 answers a trace it does not hold with {"trace": {}}


def decode_tempo_json(obj: dict[str, Any], out: SpanRows, where: str = "", *, check_unicode: bool = True) -> str:
    """Append the spans of one Tempo answer to ``out``; returns a note for the user ('' if none).

    Messages name positions as the document has them (``batches[0].scopeSpans[1].spans[2]``).
    """
    spans, at = _resource_spans(obj)
    mark = len(out.errors)
    try:
        decode_traces_json({"resourceSpans": spans}, out, where, check_unicode=check_unicode)
    except PayloadError as exc:
        raise PayloadError(_renamed(str(exc), "", at)) from None
    finally:
        out.errors[mark:] = [_renamed(message, where, at) for message in out.errors[mark:]]
    status = obj.get("status")
    if isinstance(status, str) and status.upper() == "PARTIAL":
        message = obj.get("message") or "no reason given"
        if not isinstance(message, str):
            message = "a reason that is not text"
        elif len(message) > SHOWN_CHARS:  # shown after the file's line: a few words, not a whole page
            message = message[: SHOWN_CHARS - 1] + "\u2026"
        return f"Tempo returned a partial trace: {message}"
    return ""


def _renamed(message: str, where: str, at: str) -> str:
    """``message`` with the leading ``resourceSpans`` (after ``where``) named as in the document."""
    rest = message[len(where):]
    for name in ("resourceSpans[", "resourceSpans "):
        if rest.startswith(name):
            return f"{where}{at}{rest[len('resourceSpans'):]}"
    return message
