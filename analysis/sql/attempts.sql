-- Attempts: one row per HTTP attempt of a logical request, in order, with its answer (status,
-- Retry-After raw and in seconds, resend count), what the gate decided, whether it reached the
-- engine, and how long the client waited before its next attempt.
with

attempts as (

    select * from request_attempts

),

final as (

    select
        -- the ids as stored: 32 and 16 lower-case hex digits of the keys
        printf('%032x', trace_key) as trace_id,
        request_id,
        attempt_index,
        attempt_count,
        is_last,
        make_timestamp_ns(start_ns) as start,
        make_timestamp_ns(end_ns) as "end",
        -- all durations: nanosecond differences / 1e9 -> seconds
        (end_ns - start_ns) / 1e9 as duration_s,
        status_code,
        method,
        url,
        resend_count,
        retry_after_raw,
        coalesce(retry_after_s, gate_retry_after_s) as retry_after_s,
        retry_after_invalid,
        error_type,
        policy,
        decision,
        slot,
        gate_wait_s,
        modelclaim_phase,
        modelclaim_reason,
        gate_hold_s,
        engine_span_key is not null as reached_engine,
        engine_service_name,
        (engine_scheduled_ns - start_ns) / 1e9 as engine_schedule_s,
        (next_start_ns - end_ns) / 1e9 as wait_before_next_s,
        negative_gaps,
        clock_skew,
        printf('%016x', span_key) as span_id,
        gate_span_id,
        engine_span_id

    from attempts

)

select * from final
