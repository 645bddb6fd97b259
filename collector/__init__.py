"""restorelens.collector: the OTLP/HTTP receiver, file loaders and the durable DuckDB span store.

See docs/collector.md.
"""

from restorelens.collector.export import export_otlp_jsonl, export_parquet
from restorelens.collector.loader import LoadSummary, load_paths
from restorelens.collector.receiver import create_receiver_app
from restorelens.collector.rows import PayloadError, SpanRows
from restorelens.collector.store import InsertResult, SpanStore, StoreBusy, open_read_only, store_spans

__all__ = [
    "InsertResult",
    "LoadSummary",
    "PayloadError",
    "SpanRows",
    "SpanStore",
    "StoreBusy",
    "create_receiver_app",
    "export_otlp_jsonl",
    "export_parquet",
    "load_paths",
    "open_read_only",
    "store_spans",
]
