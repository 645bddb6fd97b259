-- Every HTTP attempt of every logical request, in nanoseconds (the internal layer under
-- `attempts`, `requests` and the episodes): the client's `POST` under its `client.request`, the
-- `gate.request` it reached, and the engine span that served it (through the gate, or directly
-- when there is no gate). Gaps that causality says cannot be negative are listed when they are.
with

clients as (

    select * from typed_client_requests

),

posts as (

    select * from typed_http_attempts

),

gates as (

    select * from gate_requests

),

engines as (

    select * from typed_engine_requests
    where has_latency

),

client_attempts as (

    -- the attempt's own string ids stay behind: every row below is carried through a window
    -- and two joins; `attempts` formats them from the keys (printf gives the same hex)
    select
        posts.* exclude (trace_id, span_id, parent_span_id, service_name),
        clients.request_id,
        clients.first_chunk_ns as client_first_chunk_ns

    from posts
    inner join clients
        on posts.parent_key = clients.span_key
        and posts.trace_key = clients.trace_key

),

ordered as (

    select
        *,
        row_number() over by_request as attempt_index,
        count(*) over whole_request as attempt_count,
        lead(start_ns) over by_request as next_start_ns

    from client_attempts

    window
        by_request as (partition by trace_key, parent_key order by start_ns, span_key),
        whole_request as (
            partition by trace_key, parent_key order by start_ns, span_key
            rows between unbounded preceding and unbounded following
        )

),

joined as (

    select
        ordered.*,
        gates.span_id as gate_span_id,
        gates.start_ns as gate_start_ns,
        gates.policy,
        gates.decision,
        gates.slot,
        gates.gate_wait_s,
        gates.status_code as gate_status_code,
        gates.retry_after_s as gate_retry_after_s,
        gates.modelclaim_phase,
        gates.modelclaim_reason,
        gates.hold_s as gate_hold_s,
        gates.hold_released_ns as gate_hold_released_ns,
        gates.upstream_first_byte_ns,
        coalesce(gates.engine_clock_skew, false) as engine_clock_skew,
        coalesce(gates.engine_span_key, direct.span_key) as engine_span_key,
        coalesce(gates.engine_span_id, direct.span_id) as engine_span_id,
        coalesce(gates.engine_service_name, direct.service_name) as engine_service_name,
        coalesce(gates.engine_arrival_ns, direct.arrival_ns) as engine_arrival_ns,
        coalesce(gates.engine_scheduled_ns, direct.scheduled_ns) as engine_scheduled_ns,
        coalesce(gates.engine_scheduled_lower_ns, direct.scheduled_lower_ns) as engine_scheduled_lower_ns,
        coalesce(gates.engine_scheduled_upper_ns, direct.scheduled_upper_ns) as engine_scheduled_upper_ns,
        coalesce(gates.engine_scheduled_point, direct.scheduled_point) as engine_scheduled_point,
        coalesce(gates.engine_first_token_ns, direct.first_token_ns) as engine_first_token_ns,
        coalesce(gates.engine_time_in_queue_s, direct.time_in_queue_s) as engine_time_in_queue_s,
        coalesce(gates.engine_ttft_s, direct.time_to_first_token_s) as engine_ttft_s,
        coalesce(gates.engine_e2e_s, direct.e2e_s) as engine_e2e_s,
        coalesce(gates.prompt_tokens, direct.prompt_tokens) as prompt_tokens,
        coalesce(gates.completion_tokens, direct.completion_tokens) as completion_tokens

    from ordered
    left join gates
        on ordered.span_key = gates.parent_key
        and ordered.trace_key = gates.trace_key
    left join engines as direct
        on ordered.span_key = direct.parent_key
        and ordered.trace_key = direct.trace_key

),

final as (

    select
        *,
        attempt_index = attempt_count as is_last,
        -- a server span starting before the client span that called it: the clocks disagree
        coalesce(gate_start_ns < start_ns, false)
            or engine_clock_skew
            or coalesce(gate_span_id is null and engine_arrival_ns < start_ns, false) as clock_skew,
        -- a child span starting before its parent, or a retry sent before the previous answer
        -- the list only when some gap is negative (rare): building and filtering it costs a
        -- lambda call per row
        case when (gate_start_ns < start_ns)
            or (engine_clock_skew)
            or (gate_span_id is null and engine_arrival_ns < start_ns)
            or (next_start_ns < end_ns)
        then
            list_filter([
                case when gate_start_ns < start_ns then 'gate_before_attempt' end,
                case when engine_clock_skew then 'engine_before_upstream' end,
                case when gate_span_id is null and engine_arrival_ns < start_ns then 'engine_before_attempt' end,
                case when next_start_ns < end_ns then 'next_attempt_before_response' end
            ], lambda gap: gap is not null)
        else []::varchar[] end as negative_gaps

    from joined

)

select * from final
