-- Gate requests with the engine span that served them: `gate.request` -> the gate's own
-- upstream `POST` -> the engine's `llm_request` in the same trace. When the gate retried upstream,
-- the last engine arrival is the one that answered. A child that starts before its parent means
-- the services' clocks disagree: flagged, never corrected.
with

gates as (

    select * from typed_gate_requests

),

posts as (

    select * from typed_http_attempts

),

-- read twice below: not materialised, since it is a scan of a table (the store's derived table,
-- or the materialised layer) and a materialised CTE would copy 1.25M rows per 10M spans first
engines as not materialized (

    select * from typed_engine_requests
    where has_latency

),

engine_calls as (

    select
        posts.trace_key,
        posts.parent_key as gate_key,
        posts.start_ns as upstream_start_ns,
        engines.span_key as engine_key,
        engines.arrival_ns

    from engines
    inner join posts
        on engines.parent_key = posts.span_key
        and engines.trace_key = posts.trace_key

),

last_engine_call as (

    -- narrow on purpose: the choice is made on keys, the engine's columns are joined after
    select
        trace_key,
        gate_key,
        arg_max(engine_key, arrival_ns) as engine_key,
        arg_max(upstream_start_ns, arrival_ns) as upstream_start_ns

    from engine_calls
    group by trace_key, gate_key

),

engine_via_upstream as (

    select
        last_engine_call.trace_key,
        last_engine_call.gate_key,
        last_engine_call.upstream_start_ns,
        engines.span_key as engine_span_key,
        engines.span_id as engine_span_id,
        engines.service_name as engine_service_name,
        engines.arrival_ns as engine_arrival_ns,
        engines.scheduled_ns as engine_scheduled_ns,
        engines.scheduled_lower_ns as engine_scheduled_lower_ns,
        engines.scheduled_upper_ns as engine_scheduled_upper_ns,
        engines.scheduled_point as engine_scheduled_point,
        engines.first_token_ns as engine_first_token_ns,
        engines.end_ns as engine_end_ns,
        engines.time_in_queue_s as engine_time_in_queue_s,
        engines.time_to_first_token_s as engine_ttft_s,
        engines.e2e_s as engine_e2e_s,
        engines.prompt_tokens,
        engines.completion_tokens

    from last_engine_call
    inner join engines
        on last_engine_call.engine_key = engines.span_key
        and last_engine_call.trace_key = engines.trace_key

),

final as (

    select
        gates.*,
        engine_via_upstream.* exclude (trace_key, gate_key),
        coalesce(
            engine_via_upstream.upstream_start_ns < gates.start_ns
            or engine_via_upstream.engine_arrival_ns < engine_via_upstream.upstream_start_ns,
            false
        ) as engine_clock_skew

    from gates
    left join engine_via_upstream
        on gates.span_key = engine_via_upstream.gate_key
        and gates.trace_key = engine_via_upstream.trace_key

)

select * from final
