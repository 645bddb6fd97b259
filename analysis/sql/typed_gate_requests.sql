-- Typed `gate.request` SERVER spans: one request as the admission gate saw it (decision, slot,
-- wait, answer), with its grant and upstream-first-byte instants from the span's events, for
-- a model that could not serve yet the lifecycle's hint (mode, source, prediction) and any hold,
-- and who sent it (`gate.client.*`: what links a retry to the answer before it, gate_retry_links).
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

        -- the ids as integer keys: every join between layers compares these, not strings
        rl_trace_key("TraceId") as trace_key,
        rl_span_key("SpanId") as span_key,
        rl_span_key("ParentSpanId") as parent_key,

        -- Timestamp is the span start (timestamp_ns); Duration is end - start in nanoseconds
        epoch_ns("Timestamp") as start_ns,
        epoch_ns("Timestamp") + "Duration"::bigint as end_ns,

        -- list positions are 1-based and null when the event is absent, so the instant is null too
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'grant.acquired')]) as grant_ns,
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'upstream.first_byte')]) as upstream_first_byte_ns,
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'hold.released')]) as hold_released_ns,

        "SpanAttributes"['restore.request_id'] as request_id,
        -- the span's own run id, else its resource's (an experiment run puts it on every service)
        coalesce("SpanAttributes"['restore.run_id'], "ResourceAttributes"['restore.run_id']) as run_id,
        "SpanAttributes"['restore.traffic_class'] as traffic_class,
        "SpanAttributes"['gen_ai.request.model'] as model,
        "SpanAttributes"['gate.policy'] as policy,
        "SpanAttributes"['gate.decision'] as decision,
        "SpanAttributes"['gate.slot'] as slot,
        try_cast("SpanAttributes"['gate.wait_s'] as double) as gate_wait_s,
        try_cast("SpanAttributes"['http.response.status_code'] as bigint) as status_code,
        try_cast("SpanAttributes"['restore.retry_after_s'] as double) as retry_after_attr_s,
        rl_retry_after_raw("SpanAttributes"['http.response.header.retry-after']) as retry_after_raw,
        "SpanAttributes"['modelclaim.phase'] as modelclaim_phase,
        "SpanAttributes"['modelclaim.reason'] as modelclaim_reason,
        "SpanAttributes"['modelclaim.hint_mode'] as hint_mode,
        "SpanAttributes"['modelclaim.hint_source'] as hint_source,
        try_cast("SpanAttributes"['gate.retry_after_ms'] as bigint) as gate_retry_after_ms,
        try_cast("SpanAttributes"['modelclaim.predicted_ready_in_s'] as double) as predicted_ready_in_s,
        try_cast("SpanAttributes"['gate.hold_s'] as double) as hold_s,
        "SpanAttributes"['gate.client.identity'] as client_identity,
        "SpanAttributes"['gate.client.request_key'] as client_request_key,
        try_cast("SpanAttributes"['gate.client.retry_count'] as bigint) as client_retry_count,
        try_cast("SpanAttributes"['gate.client.traced'] as boolean) as client_traced

    from source

),

final as (

    select
        * exclude (retry_after_attr_s),
        rl_retry_after_s(retry_after_attr_s, retry_after_raw, end_ns) as retry_after_s

    from typed

)

select * from final
