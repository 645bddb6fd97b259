"""restorelens.store: the span store both sides share: the ``otel_traces`` and ``engine_metrics``
table definitions (DuckDB, and the OpenTelemetry Collector ClickHouse exporter's DDL) and opening
a DuckDB store file that one writer and any number of readers share.

The collector writes the store and the analysis reads it; both import this package, and it
imports neither. See docs/collector.md.

Names are imported lazily (PEP 562) so that ``restorelens --help`` does not pay for DuckDB.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "COLUMNS": "schema",
    "DEFAULT_LOCK_TIMEOUT_S": "access",
    "ENGINE_METRICS_COLUMNS": "schema",
    "ENGINE_METRICS_TABLE": "schema",
    "EXPORTER_DDL": "schema",
    "StoreBusy": "access",
    "TABLE": "schema",
    "connect": "access",
    "create_schema": "schema",
    "engine_metrics_sql": "schema",
    "open_read_only": "access",
    "read_request_path": "access",
    "read_requested": "access",
    "schema_sql": "schema",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
