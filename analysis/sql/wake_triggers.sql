-- Wake triggers: one row per wake episode (`modelclaim.wake` span) with the request whose first
-- attempt answered 503 for a not-ready model began it (the span links to that attempt's
-- `gate.request`): t0, the start of that attempt as the client sent it, else as the gate saw it,
-- else the wake's own start; the 503's Retry-After and the gate's hint for it (mode, source,
-- precise milliseconds, predicted readiness, hold). The layer under `wake_episodes` and, with
-- `lending_returns`, `episode_pressure`.
with

wakes as (

    select * from typed_model_wakes

),

gates as (

    select * from gate_requests

),

attempts as (

    select * from request_attempts

),

final as (

    select
        wakes.*,
        trigger_attempt.trace_key as request_trace_key,
        trigger_attempt.parent_key as client_key,
        trigger_attempt.attempt_index as trigger_attempt_index,
        trigger_attempt.attempt_count,
        trigger_attempt.clock_skew as trigger_clock_skew,
        -- t0: the first attempt as the client sent it; else as the gate saw it; else the wake
        coalesce(trigger_attempt.start_ns, trigger_gate.start_ns, wakes.start_ns) as t0_ns,
        coalesce(trigger_attempt.status_code, trigger_gate.status_code) as first_status,
        coalesce(trigger_attempt.retry_after_s, trigger_gate.retry_after_s) as retry_after_s,
        trigger_gate.request_id as trigger_request_id,
        trigger_gate.start_ns as trigger_gate_ns,
        trigger_gate.hint_mode,
        trigger_gate.hint_source,
        trigger_gate.gate_retry_after_ms,
        trigger_gate.predicted_ready_in_s,
        trigger_gate.hold_s

    from wakes
    left join gates as trigger_gate
        on wakes.trigger_span_key = trigger_gate.span_key
        and wakes.trigger_trace_key = trigger_gate.trace_key
    left join attempts as trigger_attempt
        on trigger_gate.parent_key = trigger_attempt.span_key
        and trigger_gate.trace_key = trigger_attempt.trace_key

)

select * from final
