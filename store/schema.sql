-- The span store: the column layout of the OpenTelemetry Collector's ClickHouse exporter table
-- `otel_traces` (the exporter's published DDL; docs/collector.md), mapped to DuckDB types.
-- ClickHouse Map(String,String) -> MAP(VARCHAR, VARCHAR); Nested(...) -> parallel LIST columns
-- keeping ClickHouse's flattened names ("Events.Name", ...), so the same SQL reads both stores.
-- IDs are lower-case hex; absent IDs are ''. All attribute values are strings (arrays as JSON).
create table if not exists otel_traces (
    "Timestamp" timestamp_ns not null,          -- span start
    "TraceId" varchar not null,
    "SpanId" varchar not null,
    "ParentSpanId" varchar not null,
    "TraceState" varchar not null,
    "SpanName" varchar not null,
    "SpanKind" varchar not null,                -- Server, Client, Internal, Producer, Consumer, Unspecified
    "ServiceName" varchar not null,
    "ResourceAttributes" map(varchar, varchar) not null,
    "ScopeName" varchar not null,
    "ScopeVersion" varchar not null,
    "SpanAttributes" map(varchar, varchar) not null,
    "Duration" ubigint not null,                -- nanoseconds, end - start
    "StatusCode" varchar not null,              -- Unset, Ok, Error
    "StatusMessage" varchar not null,
    "Events.Timestamp" timestamp_ns[] not null,
    "Events.Name" varchar[] not null,
    "Events.Attributes" map(varchar, varchar)[] not null,
    "Links.TraceId" varchar[] not null,
    "Links.SpanId" varchar[] not null,
    "Links.TraceState" varchar[] not null,
    "Links.Attributes" map(varchar, varchar)[] not null,
    -- Idempotent loads: a span seen again (re-sent batch, overlapping files) is ignored, not duplicated.
    primary key ("TraceId", "SpanId")
);
