-- Typed `gate.request` SERVER spans: one request as the admission gate saw it (decision, slot,
-- wait, answer), with its grant and upstream-first-byte instants from the span's events.
with

source as (

    select * from otel_traces
    where "SpanName" = 'gate.request'

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

        -- list positions are 1-based and null when the event is absent, so the instant is null too
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'grant.acquired')]) as grant_ns,
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'upstream.first_byte')]) as upstream_first_byte_ns,

        "SpanAttributes"['restore.request_id'] as request_id,
        "SpanAttributes"['restore.run_id'] as run_id,
        "SpanAttributes"['restore.traffic_class'] as traffic_class,
        "SpanAttributes"['gen_ai.request.model'] as model,
        "SpanAttributes"['gate.policy'] as policy,
        "SpanAttributes"['gate.decision'] as decision,
        "SpanAttributes"['gate.slot'] as slot,
        try_cast("SpanAttributes"['gate.wait_s'] as double) as gate_wait_s,
        try_cast("SpanAttributes"['http.response.status_code'] as bigint) as status_code,
        try_cast("SpanAttributes"['restore.retry_after_s'] as double) as retry_after_attr_s,
        -- string[] attributes are stored as a JSON list and the first header value is the one used;
        -- a plain string (another instrumentation's) is taken as it is; neither is ever an error
        case
            when starts_with("SpanAttributes"['http.response.header.retry-after'], '[')
                then try(json_extract_string("SpanAttributes"['http.response.header.retry-after'], '$[0]'))
            else "SpanAttributes"['http.response.header.retry-after']
        end as retry_after_raw,
        "SpanAttributes"['modelclaim.phase'] as modelclaim_phase,
        "SpanAttributes"['modelclaim.reason'] as modelclaim_reason

    from source

),

final as (

    select
        * exclude (retry_after_attr_s),
        coalesce(
            retry_after_attr_s,
            try_cast(retry_after_raw as double),
            -- an HTTP-date counts from the response, i.e. the end of the gate span (ns -> s)
            -- (try: a date past 2262 does not fit nanoseconds, and gives no value rather than an error)
            (try(epoch_ns(try_strptime(retry_after_raw, '%a, %d %b %Y %H:%M:%S GMT'))) - end_ns) / 1e9
        ) as retry_after_s

    from typed

)

select * from final
