-- Lending episodes (docs/design.md, "Lending"): from t0, when protected demand returned while
-- capacity was lent, the three separate events of "capacity restored":
--   grant_restore_s   = grant restored - t0
--   drain_s           = borrowed occupancy drained - t0 (0 when nothing was borrowed at return)
--   engine_schedule_s = engine scheduled the returning request - grant restored
--   ttft_s            = first token of the returning request - t0
-- The returning request is found through the `gate.restore` span link. A negative
-- engine_schedule_s is real (the request was served before its grant came back) and marked
-- `served_before_grant`; an engine schedule before t0 can only be clock skew and is flagged.
-- Episodes without a restored grant or a drain are kept and marked censored. The engine's
-- pressure at t0 is the last scrape at or before t0 of the engines serving the returning request's
-- model (episode_pressure), with its age; null when none was scraped.
with

restores as (

    select * from typed_gate_restores

),

gates as (

    select * from gate_requests

),

clients as (

    -- the user's own attribute for a label before restorelens's, as the requests view reads
    -- them, so an episode's run is the run the dashboard's filter offers
    select * from labelled_client_requests

),

posts as (

    select * from typed_http_attempts

),

pressure as (

    select * from episode_pressure

),

joined as (

    select
        restores.*,
        gates.request_id as returning_request_id,
        gates.model,
        gates.slot as returning_slot,
        gates.engine_scheduled_ns,
        gates.engine_scheduled_lower_ns,
        gates.engine_scheduled_upper_ns,
        gates.engine_scheduled_point,
        gates.engine_clock_skew,
        -- first token: the engine's, else the gate's first upstream byte, else the client's chunk
        coalesce(
            gates.engine_first_token_ns,
            gates.upstream_first_byte_ns,
            clients.first_chunk_ns
        ) as first_token_ns,
        clients.workload,
        clients.seed,
        clients.run_id

    from restores
    left join gates
        on restores.returning_span_key = gates.span_key
        and restores.returning_trace_key = gates.trace_key
    -- the client's attempt that reached the gate, and the client request above it: only the
    -- client's first chunk and labels are needed, not the whole attempt history
    left join posts
        on gates.parent_key = posts.span_key
        and gates.trace_key = posts.trace_key
    left join clients
        on posts.parent_key = clients.span_key
        and posts.trace_key = clients.trace_key

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

    from joined
    -- the last scrape at or before t0 of the engines serving the episode's model
    asof left join pressure
        on joined.model = pressure.model_name
        and joined.t0_ns >= pressure.pressure_ns

)

select * from final
