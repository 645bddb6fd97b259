"""restorelens.collector: the OTLP/HTTP receiver, file loaders and the writer of the durable DuckDB
span store (its schema and opening it are ``restorelens.store``'s).

See docs/collector.md.

Names are imported lazily (PEP 562) so that ``restorelens --help`` does not pay for DuckDB,
pyarrow and Starlette.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "NOT_A_TRACE_FILE": "files",
    "SNIFF_BYTES": "files",
    "DecompressedTooLarge": "files",
    "StreamFormat": "files",
    "sniff_format": "files",
    "FileRead": "summary",
    "InsertResult": "store",
    "LoadSummary": "summary",
    "OutputExists": "export",
    "PayloadError": "rows",
    "SpanRows": "rows",
    "SpanStore": "store",
    "create_receiver_app": "receiver",
    "decompressed": "files",
    "export_otlp_jsonl": "export",
    "export_parquet": "export",
    "load_paths": "loader",
    "store_spans": "store",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
