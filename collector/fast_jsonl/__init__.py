"""The fast path for Collector JSON-lines files: a compiled decoder, then Arrow's JSON reader.

Parsing with ``json.loads`` and converting span by span in Python is the loader's bottleneck. Files
written by the Collector have one exact shape (lower-case hex, int64 as strings, integer enums), so
they are read here straight into ``otel_traces`` columns: first by the compiled decoder
(``native``: :func:`read_collector_jsonl_native`, ``_otlp_native.decode_json``, a third of the
CPU), and a file it declines by Arrow's multithreaded reader with an explicit schema, flattened
column-wise (``arrow``: :func:`read_collector_jsonl`; ``columns``: the schema and the flattening).
Both take the same shape; anything outside it (enum names, numbers for strings,
array/kvlist/bytes values, bad IDs, a pretty-printed document) raises :class:`Unsupported` from
Arrow's reader, and the caller loads that file with the lenient span-by-span decoder instead,
which also reports file:line reasons.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "BLOCK_BYTES": "blocks",
    "LONG_LINE_BLOCK_BYTES": "blocks",
    "LineTooLong": "blocks",
    "NativeDeclined": "blocks",
    "READ_AHEAD_BLOCKS": "arrow",
    "Unsupported": "blocks",
    "native_table": "native",
    "read_collector_jsonl": "arrow",
    "read_collector_jsonl_native": "native",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
