-- Lending episodes (docs/design.md, "Lending"): from t0, when protected demand returned while
-- capacity was lent, the three separate events of "capacity restored":
--   grant_restore_s   = grant restored - t0
--   drain_s           = borrowed occupancy drained - t0 (0 when nothing was borrowed at return)
--   engine_schedule_s = engine scheduled the returning request - grant restored
--   ttft_s            = first token of the returning request - t0
-- The returning request is found through the `gate.restore` span link (lending_returns). A negative
-- engine_schedule_s is real (the request was served before its grant came back) and marked
-- `served_before_grant`; an engine schedule before t0 can only be clock skew and is flagged.
-- Episodes without a restored grant or a drain are kept and marked censored. The engine's
-- pressure at t0 is the last scrape at or before t0 of the engines serving the returning request's
-- model (episode_pressure), with its age; null when none was scraped.
with

returns as (

    select * from lending_returns

),

pressure as (

    select * from episode_pressure

),

final as (

    select
        policy,
        model,
        workload,
        seed,
        run_id,
        make_timestamp_ns(t0_ns) as t0,
        borrowed_at_return,
        -- all durations: nanosecond differences / 1e9 -> seconds
        (grant_restored_ns - t0_ns) / 1e9 as grant_restore_s,
        case
            when drained_ns is not null then (drained_ns - t0_ns) / 1e9
            -- nothing borrowed at return: occupancy is drained at t0
            when borrowed_at_return = 0 then 0.0
        end as drain_s,
        (engine_scheduled_ns - grant_restored_ns) / 1e9 as engine_schedule_s,
        -- the schedule instant's bounds (typed_engine_requests) and which one is the point value
        (engine_scheduled_lower_ns - grant_restored_ns) / 1e9 as engine_schedule_lower_s,
        (engine_scheduled_upper_ns - grant_restored_ns) / 1e9 as engine_schedule_upper_s,
        engine_scheduled_point as engine_schedule_point,
        (first_token_ns - t0_ns) / 1e9 as ttft_s,
        coalesce(engine_scheduled_ns < grant_restored_ns, false) as served_before_grant,
        grant_restored_ns is null
            or (drained_ns is null and coalesce(borrowed_at_return, 1) <> 0) as censored,
        case
            when grant_restored_ns is null then 'grant_not_restored'
            when drained_ns is null and coalesce(borrowed_at_return, 1) <> 0 then 'not_drained'
        end as censored_reason,
        -- the list only when some gap is negative (rare): building and filtering it costs a
        -- lambda call per row
        case when (grant_restored_ns < t0_ns)
            or (drained_ns < t0_ns)
            or (engine_scheduled_ns < t0_ns)
            or (first_token_ns < t0_ns)
        then
            list_filter([
                case when grant_restored_ns < t0_ns then 'grant_restore_s' end,
                case when drained_ns < t0_ns then 'drain_s' end,
                case when engine_scheduled_ns < t0_ns then 'engine_before_t0' end,
                case when first_token_ns < t0_ns then 'ttft_s' end
            ], lambda gap: gap is not null)
        else []::varchar[] end as negative_gaps,
        coalesce(engine_clock_skew, false) or coalesce(engine_scheduled_ns < t0_ns, false) as clock_skew,
        engine_running_at_t0,
        engine_waiting_at_t0,
        engine_kv_cache_usage_at_t0,
        -- how old that scrape was at t0: nanosecond difference / 1e9 -> seconds
        (t0_ns - pressure_ns) / 1e9 as engine_pressure_age_s,
        returning_request_id,
        returning_slot,
        returning_trace_id,
        returning_span_id,
        trace_id,
        span_id

    -- the engine's pressure at the episode's t0 (its model's)
    from returns
    left join pressure using (model, t0_ns)

)

select * from final
