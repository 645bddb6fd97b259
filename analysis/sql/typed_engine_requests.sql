-- Typed engine `llm_request` SERVER spans, exactly as vLLM (or the simulator) emits them, one row
-- per span of that name. Later layers take as engine spans those with vLLM's latency attributes
-- (`has_latency`), never by service name: real vLLM reports `unknown_service:python`. The span
-- starts at arrival; vLLM's latencies are seconds, converted to nanosecond instants so later
-- differences stay exact.
-- The schedule instant is an interval where vLLM's spans allow no more (docs/analysis.md,
-- "Engine schedule"): time_in_queue counts from the engine core's queue entry, which follows the
-- span's start (arrival at the API server) by up to a busy engine step, so arrival + time_in_queue
-- is a lower bound; the first token less the prefill time is an upper bound (the API server sees
-- the first token after the engine core made it). The point value is the upper bound when
-- there is one (the tighter of the two: output delivery takes milliseconds, a step seconds),
-- else the lower, and `scheduled_point` says which.
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
        "SpanAttributes"['gen_ai.request.model'] as request_model,
        map_contains("SpanAttributes", 'gen_ai.latency.time_in_queue')
            or map_contains("SpanAttributes", 'gen_ai.latency.e2e') as has_latency

    from source

),

instants as (

    select
        *,
        -- try(): a NaN, infinite or out-of-range latency gives no instant rather than failing
        -- the whole layer (and the collector's batch, which writes this layer with its spans).
        -- vLLM: time_in_queue = scheduled - queued, and queued >= arrival: arrival + it is the
        -- earliest the request can have been scheduled (seconds -> nanoseconds, rounded)
        try(arrival_ns + round(time_in_queue_s * 1e9)::bigint) as scheduled_lower_ns,
        -- time_to_first_token counts from arrival (seconds -> nanoseconds)
        try(arrival_ns + round(time_to_first_token_s * 1e9)::bigint) as first_token_ns

    from typed

),

bounded as (

    select
        *,
        -- vLLM: prefill = first token - scheduled, both engine-core instants, and the API server
        -- sees the first token no earlier: first token - prefill is the latest schedule instant
        -- (seconds -> nanoseconds, rounded)
        try(first_token_ns - round(prefill_s * 1e9)::bigint) as scheduled_upper_ns

    from instants

),

final as (

    select
        *,
        -- the bounds come from float seconds: an upper bound below the lower one by less than
        -- 1 us (1,000 ns) is rounding (a double near 1.7e9 epoch seconds resolves 0.24 us), and
        -- the interval is the lower instant; further below, the latencies disagree and only the
        -- lower bound, which rests on time_in_queue alone, is kept as the point
        case
            when scheduled_upper_ns >= scheduled_lower_ns - 1000 then greatest(scheduled_upper_ns, scheduled_lower_ns)
            -- without a queue time the upper bound is all there is
            when scheduled_lower_ns is null then scheduled_upper_ns
            else scheduled_lower_ns
        end as scheduled_ns,
        case
            when scheduled_upper_ns >= scheduled_lower_ns - 1000 then 'upper'
            when scheduled_lower_ns is null and scheduled_upper_ns is not null then 'upper'
            when scheduled_lower_ns is not null then 'lower'
        end as scheduled_point

    from bounded

)

select * from final
