-- Typed engine `llm_request` SERVER spans, exactly as vLLM (or the simulator) emits them, one row
-- per span of that name. Later layers take as engine spans those with vLLM's latency attributes
-- (`has_latency`), never by service name: real vLLM reports `unknown_service:python`. The span
-- starts at arrival; vLLM's latencies are seconds, converted to nanosecond instants so later
-- differences stay exact.
with

source as (

    select * from otel_traces
    where "SpanName" = 'llm_request'

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

        -- Timestamp is the span start = arrival (timestamp_ns); Duration is in nanoseconds
        epoch_ns("Timestamp") as arrival_ns,
        epoch_ns("Timestamp") + "Duration"::bigint as end_ns,

        try_cast("SpanAttributes"['gen_ai.latency.time_in_queue'] as double) as time_in_queue_s,
        try_cast("SpanAttributes"['gen_ai.latency.time_to_first_token'] as double) as time_to_first_token_s,
        try_cast("SpanAttributes"['gen_ai.latency.e2e'] as double) as e2e_s,
        try_cast("SpanAttributes"['gen_ai.latency.time_in_model_prefill'] as double) as prefill_s,
        try_cast("SpanAttributes"['gen_ai.latency.time_in_model_decode'] as double) as decode_s,
        try_cast("SpanAttributes"['gen_ai.usage.prompt_tokens'] as bigint) as prompt_tokens,
        try_cast("SpanAttributes"['gen_ai.usage.completion_tokens'] as bigint) as completion_tokens,
        "SpanAttributes"['gen_ai.request.id'] as engine_request_id,
        "SpanAttributes"['gen_ai.response.model'] as response_model,
        map_contains("SpanAttributes", 'gen_ai.latency.time_in_queue')
            or map_contains("SpanAttributes", 'gen_ai.latency.e2e') as has_latency

    from source

),

final as (

    select
        *,
        -- try(): a NaN, infinite or out-of-range latency gives no instant rather than failing
        -- the whole layer (and the collector's batch, which writes this layer with its spans).
        -- vLLM: time_in_queue = scheduled - queued, so the schedule instant is arrival + it
        -- (seconds -> nanoseconds, rounded to the nanosecond)
        try(arrival_ns + round(time_in_queue_s * 1e9)::bigint) as scheduled_ns,
        -- time_to_first_token counts from arrival (seconds -> nanoseconds)
        try(arrival_ns + round(time_to_first_token_s * 1e9)::bigint) as first_token_ns

    from typed

)

select * from final
