-- Typed HTTP `POST` CLIENT spans (httpx instrumentation), from the client and from the gate's
-- upstream calls alike; later layers tell them apart by their parent. Retry-After is kept raw
-- (a JSON list of header values) and parsed: delta-seconds, or an HTTP-date taken relative to
-- the response (the span end).
with

source as (

    select * from otel_traces
    where "SpanName" = 'POST'

),

typed as (

    select
        "TraceId" as trace_id,
        "SpanId" as span_id,
        "ParentSpanId" as parent_span_id,
        "ServiceName" as service_name,

        -- the ids as integer keys: every join between layers compares these, not strings
        rl_trace_key("TraceId") as trace_key,
        rl_span_key("SpanId") as span_key,
        rl_span_key("ParentSpanId") as parent_key,

        -- Timestamp is the span start (timestamp_ns); Duration is end - start in nanoseconds
        epoch_ns("Timestamp") as start_ns,
        epoch_ns("Timestamp") + "Duration"::bigint as end_ns,

        -- each the stable semconv name, else the older one that opentelemetry-instrumentation-httpx
        -- writes unless OTEL_SEMCONV_STABILITY_OPT_IN says otherwise (both present with http/dup)
        coalesce(
            try_cast("SpanAttributes"['http.response.status_code'] as bigint),
            try_cast("SpanAttributes"['http.status_code'] as bigint)
        ) as status_code,
        coalesce("SpanAttributes"['http.request.method'], "SpanAttributes"['http.method']) as method,
        coalesce("SpanAttributes"['url.full'], "SpanAttributes"['http.url']) as url,
        try_cast("SpanAttributes"['http.request.resend_count'] as bigint) as resend_count,
        "SpanAttributes"['error.type'] as error_type,
        try_cast("SpanAttributes"['restore.retry_after_s'] as double) as retry_after_attr_s,
        "SpanAttributes"['restore.retry_after_invalid'] as retry_after_invalid,

        rl_retry_after_raw("SpanAttributes"['http.response.header.retry-after']) as retry_after_raw

    from source

),

final as (

    select
        * exclude (retry_after_attr_s),
        rl_retry_after_s(retry_after_attr_s, retry_after_raw, end_ns) as retry_after_s

    from typed

)

select * from final
