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

        -- the ids as numbers (hex -> 128-bit trace, 64-bit span; lossless for the collector's
        -- lower-case hex): joins between layers compare fixed-width integers, not strings.
        -- A root span's '' parent gives a null parent_key, which joins nothing.
        try_cast('0x' || "TraceId" as uhugeint) as trace_key,
        try_cast('0x' || "SpanId" as ubigint) as span_key,
        try_cast('0x' || "ParentSpanId" as ubigint) as parent_key,

        -- Timestamp is the span start (timestamp_ns); Duration is end - start in nanoseconds
        epoch_ns("Timestamp") as start_ns,
        epoch_ns("Timestamp") + "Duration"::bigint as end_ns,

        try_cast("SpanAttributes"['http.response.status_code'] as bigint) as status_code,
        try_cast("SpanAttributes"['http.request.resend_count'] as bigint) as resend_count,
        "SpanAttributes"['error.type'] as error_type,
        try_cast("SpanAttributes"['restore.retry_after_s'] as double) as retry_after_attr_s,
        "SpanAttributes"['restore.retry_after_invalid'] as retry_after_invalid,

        -- string[] attributes are stored as a JSON list and the first header value is the one used;
        -- a plain string (another instrumentation's) is taken as it is; neither is ever an error
        case
            when starts_with("SpanAttributes"['http.response.header.retry-after'], '[')
                then try(json_extract_string("SpanAttributes"['http.response.header.retry-after'], '$[0]'))
            else "SpanAttributes"['http.response.header.retry-after']
        end as retry_after_raw

    from source

),

final as (

    select
        * exclude (retry_after_attr_s),
        coalesce(
            retry_after_attr_s,
            try_cast(retry_after_raw as double),
            -- an HTTP-date (IMF-fixdate) counts from the response, i.e. the end of the attempt;
            -- epoch_ns gives nanoseconds, hence / 1e9 for seconds
            -- (try: a date past 2262 does not fit nanoseconds, and gives no value rather than an error)
            (try(epoch_ns(try_strptime(retry_after_raw, '%a, %d %b %Y %H:%M:%S GMT'))) - end_ns) / 1e9
        ) as retry_after_s

    from typed

)

select * from final
