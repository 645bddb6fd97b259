"""The ``otel_traces`` table definition (``schema.sql``) and a helper that creates it."""

from __future__ import annotations

from importlib import resources
from typing import Any

__all__ = ["COLUMNS", "TABLE", "create_schema", "schema_sql"]

TABLE = "otel_traces"

#: Column names in table order (ClickHouse exporter layout, Nested flattened with dots).
COLUMNS = (
    "Timestamp",
    "TraceId",
    "SpanId",
    "ParentSpanId",
    "TraceState",
    "SpanName",
    "SpanKind",
    "ServiceName",
    "ResourceAttributes",
    "ScopeName",
    "ScopeVersion",
    "SpanAttributes",
    "Duration",
    "StatusCode",
    "StatusMessage",
    "Events.Timestamp",
    "Events.Name",
    "Events.Attributes",
    "Links.TraceId",
    "Links.SpanId",
    "Links.TraceState",
    "Links.Attributes",
)


def schema_sql() -> str:
    return resources.files(__package__).joinpath("schema.sql").read_text(encoding="utf-8")


def create_schema(con: Any) -> None:
    """Create ``otel_traces`` on a DuckDB connection if it does not exist."""
    con.execute(schema_sql())
