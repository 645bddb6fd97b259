"""Jaeger's JSON traces decoded into span rows.

Read: the query API's answer (``GET /api/traces?...`` and ``/api/traces/<id>``:
``{"data": [trace, ...], "total", "limit", "offset", "errors"}``), the UI's downloads (the same
``data`` array), a bare list of traces, and one trace (``{"traceID", "spans", "processes"}``).
The shapes are Jaeger's ``model/json`` (what ``model/converter/json/from_domain.go`` writes).

Each span is rewritten as the OTLP/JSON span that the OpenTelemetry Collector's Jaeger translator
(``pkg/translator/jaeger``, ``jaegerproto_to_traces.go``) makes of it, then decoded by
``decode_json``, so IDs, timestamps, attribute values and rejections follow the OTLP rules
(``documents``: the envelopes; ``spans``: one span; ``values``: IDs, times and tags):

- IDs are hex with leading zeros dropped by older Jaeger (``%x``): padded to 32 / 16 digits;
- ``startTime``, ``duration`` and log ``timestamp`` are microseconds;
- tags keep their types (``string``, ``bool``, ``int64``, ``float64``, ``binary`` as base64);
  ``span.kind`` becomes the kind, ``error``/``otel.status_code``/``otel.status_description`` the
  status, ``otel.scope.name``/``otel.scope.version`` the scope, ``w3c.tracestate`` the trace
  state, each removed from the attributes as the translator removes it;
- logs become events (the ``event`` field is the name), ``process.serviceName`` and
  ``process.tags`` the resource.

Two choices differ from the translator, both so that an OTLP span exported to Jaeger reads back
unchanged: only a ``CHILD_OF`` reference of the same trace is the parent (Jaeger's
``Span.ParentSpanID`` falls back to a ``FOLLOWS_FROM`` one, which is what an OTLP link becomes),
and a ``FOLLOWS_FROM`` link gets no ``opentracing.ref_type`` attribute (a further ``CHILD_OF``
reference, which OTLP cannot say otherwise, gets ``opentracing.ref_type=child_of``). The
translator's fallback from ``http.status_code`` to an error status is not applied: the status is
what the instrumentation set.

Names are imported lazily (PEP 562), as in the collector package.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "MAX_MICROS": "values",
    "SHOWN_CHARS": "values",
    "decode_jaeger_json": "documents",
    "is_jaeger_json": "documents",
    "shown": "values",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
