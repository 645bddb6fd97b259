"""The span store's table definitions: ``schema.sql`` (``otel_traces`` in DuckDB),
``engine_metrics.sql`` (``engine_metrics``) and ``otel_traces_clickhouse.sql`` (``otel_traces`` as
the OpenTelemetry Collector's ClickHouse exporter creates it), and a helper that creates the
DuckDB ones."""

from __future__ import annotations

from importlib import resources
from typing import Any

__all__ = ["COLUMNS", "ENGINE_METRICS_COLUMNS", "ENGINE_METRICS_TABLE", "EXPORTER_DDL", "TABLE", "create_schema",
           "engine_metrics_sql", "schema_sql"]

TABLE = "otel_traces"
#: Samples scraped from engines' Prometheus /metrics (collector/scrape/), beside the spans.
ENGINE_METRICS_TABLE = "engine_metrics"
#: ``engine_metrics``' column names in table order (the ClickHouse layers expand a star to them).
ENGINE_METRICS_COLUMNS = ("Timestamp", "Target", "MetricName", "Labels", "Value")

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


def _sql(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def schema_sql() -> str:
    """``otel_traces``'s definition."""
    return _sql("schema.sql")


def engine_metrics_sql() -> str:
    """``engine_metrics``'s definition: one ``create table if not exists`` statement, which a
    reader of a store written before it existed runs as a temporary table (``Analysis``)."""
    return _sql("engine_metrics.sql")


#: ``otel_traces`` as the OpenTelemetry Collector's ClickHouse exporter creates it (one ``CREATE
#: TABLE IF NOT EXISTS``): what ``restorelens export --format clickhouse`` writes into.
EXPORTER_DDL = _sql("otel_traces_clickhouse.sql")


def create_schema(con: Any) -> None:
    """Create ``otel_traces`` and ``engine_metrics`` on a DuckDB connection where they do not exist."""
    con.execute(schema_sql())
    con.execute(engine_metrics_sql())
