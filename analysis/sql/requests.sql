-- Requests: one row per logical request (one `client.request` trace), joining the client's view
-- (TTFT and e2e as the user saw them, over all attempts) with the last attempt's gate decision
-- and the engine span that finally served it. Outcome `rejected` and `gave_up` are kept. The
-- policy is the client's arm label when it has one (arms without a gate have no other), else
-- the gate's; a request that passed no gate and has no label has none (null). Labels the user
-- mapped onto their own attribute names come first (labelled_client_requests).
with

clients as (

    select * from labelled_client_requests

),

attempts as (

    select * from request_attempts

),

per_request as (

    select
        trace_key,
        parent_key as client_key,
        count(*) as attempts,
        max(policy) as any_policy,
        bool_or(clock_skew) as clock_skew

    from attempts
    group by trace_key, parent_key

),

last_attempt as (

    select * from attempts
    where is_last

),

final as (

    select
        clients.trace_id,
        clients.request_id,
        clients.run_id,
        clients.scenario,
        clients.workload,
        clients.seed,
        clients.traffic_class,
        clients.model,
        clients.retry_policy,
        clients.arrival_phase,
        clients.arrival_phase_start_s,
        clients.arrival_phase_window_s,
        clients.outcome,
        coalesce(clients.client_policy, last_attempt.policy, per_request.any_policy) as policy,
        make_timestamp_ns(clients.start_ns) as start,
        make_timestamp_ns(clients.end_ns) as "end",
        -- all durations: nanosecond differences / 1e9 -> seconds
        (clients.end_ns - clients.start_ns) / 1e9 as e2e_s,
        -- what the user saw: the first chunk, else the engine's first token
        (coalesce(clients.first_chunk_ns, last_attempt.engine_first_token_ns) - clients.start_ns) / 1e9 as ttft_s,
        coalesce(per_request.attempts, 0) as attempts,
        clients.attempts_reported,
        last_attempt.status_code as final_status_code,
        last_attempt.decision,
        last_attempt.slot,
        last_attempt.gate_wait_s,
        last_attempt.engine_span_key is not null as reached_engine,
        last_attempt.engine_service_name,
        last_attempt.engine_time_in_queue_s,
        last_attempt.engine_ttft_s,
        last_attempt.engine_e2e_s,
        (last_attempt.engine_scheduled_ns - last_attempt.start_ns) / 1e9 as engine_schedule_s,
        (last_attempt.engine_scheduled_lower_ns - last_attempt.start_ns) / 1e9 as engine_schedule_lower_s,
        (last_attempt.engine_scheduled_upper_ns - last_attempt.start_ns) / 1e9 as engine_schedule_upper_s,
        last_attempt.engine_scheduled_point as engine_schedule_point,
        last_attempt.prompt_tokens,
        last_attempt.completion_tokens,
        coalesce(per_request.clock_skew, false) as clock_skew,
        clients.span_id

    from clients
    left join per_request
        on clients.span_key = per_request.client_key
        and clients.trace_key = per_request.trace_key
    left join last_attempt
        on clients.span_key = last_attempt.parent_key
        and clients.trace_key = last_attempt.trace_key

)

select * from final
