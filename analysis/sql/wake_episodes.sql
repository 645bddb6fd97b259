-- Wake episodes (docs/design.md, "Wake"): from t0, the start of the first attempt answered
-- 503 for a not-ready model (the request the `modelclaim.wake` span links to):
--   retry_after_s     = the Retry-After in that first 503 (whole seconds)
--   hint_s            = the precise hint (x-restorelens-retry-after-ms) when the gate sent one,
--                       else retry_after_s; hint_mode / hint_source: how the gate answered
--                       (fixed, calibrated, hold) and where that hint came from (fixed, calibrated, prior)
--   hold_s            = how long the gate held the first attempt (hold mode) before answering it
--   ready_s           = engine ready - t0;  observed_s = readiness observed - t0
--   predicted_ready_s = when the gate predicted the model would serve, from t0 (calibrated hints)
--   hint_error_s      = hint_s - ready_s
--   overshoot_s       = the moment the successful attempt was let through - engine ready: its
--                       start, or when the gate held it, the gate's `hold.released` (else the
--                       gate's start of it plus its hold)
--   attempts          = attempts from the first 503 through the success (or the last one)
--   attempt_link      = how those attempts were tied to the first: `trace` (restorelens's client
--                       spans, or the gate's requests of one trace), `request_key`, `client` (the
--                       sender's identity and model within the hint's window: inferred), or `none`
--                       (one attempt); the weakest link of the chain (gate_retry_links)
--   engine_schedule_s = engine scheduled the successful attempt - the moment it was let through
--   total_s           = first token of the successful attempt - t0
--   process_started_s = the engine process started (`engine.wake_called`) - t0
-- The engine's own startup spans (wake_phases) split process start -> engine ready in two:
--   engine_spans_s         = the union of the top-level startup spans, clipped to that stretch
--   outside_engine_spans_s = engine ready - process start - engine_spans_s (imports before the
--                            first span, API bring-up after the last: one named stretch)
--   engine_spans_share     = engine_spans_s / (engine ready - process start)
--   engine_spans, engine_starts = startup spans (every depth) and engine processes they came from
--   engine_skew_s          = the furthest any startup span reaches before process start or past
--                            engine ready (clock skew between the engine and the lifecycle)
-- All null when the wake has no engine spans (and the outside stretch when it never became ready).
-- The attempts are the client's own (`client.request` -> `POST`) when the first 503 went through
-- restorelens's client; else, whoever the client is, the chain of the gate's requests linked retry
-- by retry from the first 503 (gate_retry_links), counted from the gate's side.
-- A wake that never became ready, or whose request was never served, is kept and censored, with
-- the reason: never_ready, no_later_attempt (the only attempt was refused: the client did not come
-- back, or no later request could be linked to it) or not_served (it came back, never answered 2xx).
-- Gaps that causality says cannot be negative are listed when they are (clock skew). The
-- engine's pressure at t0 is the last scrape at or before t0 of the engines serving the model
-- (episode_pressure), with its age; null when none was scraped.
with recursive

wakes as (

    select * from typed_model_wakes

),

gates as (

    select * from gate_requests

),

clients as (

    -- the user's own attribute for a label before restorelens's, as the requests view reads
    -- them, so an episode's run is the run the dashboard's filter offers
    select * from labelled_client_requests

),

attempts as (

    select * from request_attempts

),

links as materialized (

    -- read at every step of the chain below: computed once
    select trace_key, span_key, link_rank, next_trace_key, next_span_key
    from gate_retry_links
    where next_span_key is not null

),

pressure as (

    select * from episode_pressure

),

phases as (

    -- per wake: the top-level spans' union, the sum of what each adds
    select
        trace_id,
        wake_span_id,
        count(*) as engine_spans,
        count(distinct start_index) as engine_starts,
        -- seconds * 1e9 -> the integer nanoseconds each was computed from: the two stretches add up exactly
        sum(round(adds_s * 1e9)::bigint) filter (where depth = 0) as covered_ns,
        max(greatest(before_start_s, coalesce(after_ready_s, 0))) as engine_skew_s

    from wake_phases
    group by trace_id, wake_span_id

),

triggered as (

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
        trigger_gate.hold_s,
        trigger_gate.trace_key as trigger_gate_trace_key,
        trigger_gate.run_id as trigger_gate_run_id

    from wakes
    left join gates as trigger_gate
        on wakes.trigger_span_key = trigger_gate.span_key
        and wakes.trigger_trace_key = trigger_gate.trace_key
    left join attempts as trigger_attempt
        on trigger_gate.parent_key = trigger_attempt.span_key
        and trigger_gate.trace_key = trigger_attempt.trace_key

),

successes as (

    -- the first 2xx attempt from the trigger on, by aggregate rather than a window (cheaper);
    -- arg_min_null keeps that attempt's nulls instead of skipping to another attempt's values
    select
        triggered.trace_key as wake_trace_key,
        triggered.span_key as wake_span_key,
        min(attempts.attempt_index) as attempt_index,
        arg_min_null(attempts.start_ns, attempts.attempt_index) as start_ns,
        -- when a held attempt was let through: the gate's hold.released, else the gate's start of
        -- it plus its hold (seconds * 1e9 -> ns); null when it was not held
        arg_min_null(
            coalesce(attempts.gate_hold_released_ns, attempts.gate_start_ns + round(attempts.gate_hold_s * 1e9)::bigint),
            attempts.attempt_index
        ) as let_through_ns,
        arg_min_null(attempts.engine_scheduled_ns, attempts.attempt_index) as engine_scheduled_ns,
        arg_min_null(attempts.engine_scheduled_lower_ns, attempts.attempt_index) as engine_scheduled_lower_ns,
        arg_min_null(attempts.engine_scheduled_upper_ns, attempts.attempt_index) as engine_scheduled_upper_ns,
        arg_min_null(attempts.engine_scheduled_point, attempts.attempt_index) as engine_scheduled_point,
        arg_min_null(
            coalesce(attempts.engine_first_token_ns, attempts.upstream_first_byte_ns, attempts.client_first_chunk_ns),
            attempts.attempt_index
        ) as first_token_ns,
        arg_min_null(attempts.clock_skew, attempts.attempt_index) as clock_skew

    from triggered
    inner join attempts
        on triggered.client_key = attempts.parent_key
        and triggered.request_trace_key = attempts.trace_key
        and attempts.attempt_index >= triggered.trigger_attempt_index
        and attempts.status_code between 200 and 299

    group by triggered.trace_key, triggered.span_key

),

chain as (

    -- without restorelens's client spans: the gate's requests from the first 503, retry by retry;
    -- link_rank is the weakest link so far (0 for the first attempt, then 1 trace, 2 request
    -- key, 3 client). Each step moves to a later request, so the chain ends.
    select
        trace_key as wake_trace_key,
        span_key as wake_span_key,
        trigger_gate_trace_key as gate_trace_key,
        trigger_span_key as gate_span_key,
        1 as attempt_index,
        0 as link_rank

    from triggered
    where trigger_attempt_index is null and trigger_gate_ns is not null

    union all

    select
        chain.wake_trace_key,
        chain.wake_span_key,
        links.next_trace_key,
        links.next_span_key,
        chain.attempt_index + 1,
        greatest(chain.link_rank, links.link_rank)

    from chain
    inner join links
        on chain.gate_span_key = links.span_key
        and chain.gate_trace_key = links.trace_key

),

chain_attempts as (

    select
        chain.wake_trace_key,
        chain.wake_span_key,
        chain.attempt_index,
        chain.link_rank,
        gates.status_code,
        gates.start_ns,
        -- when a held attempt was let through: the gate's hold.released, else its start plus its
        -- hold (seconds * 1e9 -> ns); null when it was not held
        coalesce(gates.hold_released_ns, gates.start_ns + round(gates.hold_s * 1e9)::bigint) as let_through_ns,
        gates.engine_scheduled_ns,
        gates.engine_scheduled_lower_ns,
        gates.engine_scheduled_upper_ns,
        gates.engine_scheduled_point,
        coalesce(gates.engine_first_token_ns, gates.upstream_first_byte_ns) as first_token_ns,
        gates.engine_clock_skew as clock_skew

    from chain
    inner join gates
        on chain.gate_span_key = gates.span_key
        and chain.gate_trace_key = gates.trace_key

),

chain_successes as (

    -- per wake: the first 2xx attempt of the chain (arg_min_null: that attempt's nulls, not another's)
    select
        wake_trace_key,
        wake_span_key,
        min(attempt_index) as success_attempt_index,
        arg_min_null(link_rank, attempt_index) as success_link_rank,
        arg_min_null(coalesce(let_through_ns, start_ns), attempt_index) as success_start_ns,
        arg_min_null(engine_scheduled_ns, attempt_index) as engine_scheduled_ns,
        arg_min_null(engine_scheduled_lower_ns, attempt_index) as engine_scheduled_lower_ns,
        arg_min_null(engine_scheduled_upper_ns, attempt_index) as engine_scheduled_upper_ns,
        arg_min_null(engine_scheduled_point, attempt_index) as engine_scheduled_point,
        arg_min_null(first_token_ns, attempt_index) as first_token_ns,
        arg_min_null(clock_skew, attempt_index) as clock_skew

    from chain_attempts
    where status_code between 200 and 299
    group by wake_trace_key, wake_span_key

),

gate_chains as (

    select
        ends.*,
        chain_successes.* exclude (wake_trace_key, wake_span_key)

    from (
        select wake_trace_key, wake_span_key, count(*) as attempt_count, max(link_rank) as chain_link_rank
        from chain_attempts
        group by wake_trace_key, wake_span_key
    ) as ends
    left join chain_successes
        on ends.wake_span_key = chain_successes.wake_span_key
        and ends.wake_trace_key = chain_successes.wake_trace_key

),

joined as (

    -- one of the two is there: the client's attempts (successes) or the gate's chain (gate_chains)
    select
        triggered.* exclude (trigger_attempt_index, attempt_count, trigger_gate_run_id, trigger_gate_trace_key),
        coalesce(triggered.trigger_attempt_index, 1) as trigger_attempt_index,
        coalesce(triggered.attempt_count, gate_chains.attempt_count) as attempt_count,
        coalesce(successes.attempt_index, gate_chains.success_attempt_index) as success_attempt_index,
        -- let through at its start, or when the gate stopped holding it
        coalesce(successes.let_through_ns, successes.start_ns, gate_chains.success_start_ns) as success_start_ns,
        coalesce(successes.engine_scheduled_ns, gate_chains.engine_scheduled_ns) as engine_scheduled_ns,
        coalesce(successes.engine_scheduled_lower_ns, gate_chains.engine_scheduled_lower_ns)
            as engine_scheduled_lower_ns,
        coalesce(successes.engine_scheduled_upper_ns, gate_chains.engine_scheduled_upper_ns)
            as engine_scheduled_upper_ns,
        coalesce(successes.engine_scheduled_point, gate_chains.engine_scheduled_point) as engine_scheduled_point,
        coalesce(successes.first_token_ns, gate_chains.first_token_ns) as first_token_ns,
        coalesce(successes.clock_skew, gate_chains.clock_skew) as success_clock_skew,
        -- the client's attempts are one trace (rank 1); the gate's chain its weakest link up to the
        -- success, or over all of it
        case
            when triggered.trigger_attempt_index is not null then 1
            else coalesce(gate_chains.success_link_rank, gate_chains.chain_link_rank)
        end as link_rank,
        coalesce(clients.request_id, triggered.trigger_request_id) as request_id,
        clients.retry_policy,
        clients.outcome,
        clients.workload,
        clients.seed,
        -- without a client span, the run the gate's request carries
        case when triggered.client_key is null then triggered.trigger_gate_run_id else clients.run_id end as run_id,
        phases.engine_spans,
        phases.engine_starts,
        phases.covered_ns,
        phases.engine_skew_s

    from triggered
    left join successes
        on triggered.span_key = successes.wake_span_key
        and triggered.trace_key = successes.wake_trace_key
    left join gate_chains
        on triggered.span_key = gate_chains.wake_span_key
        and triggered.trace_key = gate_chains.wake_trace_key
    left join clients
        on triggered.client_key = clients.span_key
        and triggered.request_trace_key = clients.trace_key
    left join phases
        on triggered.span_id = phases.wake_span_id
        and triggered.trace_id = phases.trace_id

),

final as (

    select
        model,
        wake_path,
        pod,
        from_pod,
        neighbour,
        retry_policy,
        workload,
        seed,
        run_id,
        make_timestamp_ns(t0_ns) as t0,
        first_status,
        retry_after_s,
        hint_mode,
        hint_source,
        -- milliseconds / 1e3 -> seconds
        coalesce(gate_retry_after_ms / 1e3, retry_after_s) as hint_s,
        hold_s,
        -- all durations: nanosecond differences / 1e9 -> seconds
        (ready_ns - t0_ns) / 1e9 as ready_s,
        (observed_ns - t0_ns) / 1e9 as observed_s,
        (trigger_gate_ns - t0_ns) / 1e9 + predicted_ready_in_s as predicted_ready_s,
        coalesce(gate_retry_after_ms / 1e3, retry_after_s) - (ready_ns - t0_ns) / 1e9 as hint_error_s,
        (success_start_ns - ready_ns) / 1e9 as overshoot_s,
        coalesce(success_attempt_index, attempt_count) - trigger_attempt_index + 1 as attempts,
        case
            when coalesce(success_attempt_index, attempt_count) - trigger_attempt_index + 1 = 1 then 'none'
            when link_rank = 1 then 'trace'
            when link_rank = 2 then 'request_key'
            when link_rank = 3 then 'client'
        end as attempt_link,
        (engine_scheduled_ns - success_start_ns) / 1e9 as engine_schedule_s,
        -- the schedule instant's bounds (typed_engine_requests) and which one is the point value
        (engine_scheduled_lower_ns - success_start_ns) / 1e9 as engine_schedule_lower_s,
        (engine_scheduled_upper_ns - success_start_ns) / 1e9 as engine_schedule_upper_s,
        engine_scheduled_point as engine_schedule_point,
        (first_token_ns - t0_ns) / 1e9 as total_s,
        (wake_called_ns - t0_ns) / 1e9 as process_started_s,
        engine_spans,
        engine_starts,
        covered_ns / 1e9 as engine_spans_s,
        (ready_ns - coalesce(wake_called_ns, start_ns) - covered_ns) / 1e9 as outside_engine_spans_s,
        covered_ns / nullif(ready_ns - coalesce(wake_called_ns, start_ns), 0) as engine_spans_share,
        engine_skew_s,
        success_attempt_index is not null as served,
        ready_ns is null or success_attempt_index is null as censored,
        case
            when ready_ns is null then 'never_ready'
            when success_attempt_index is not null then null
            when attempt_count - trigger_attempt_index + 1 = 1 then 'no_later_attempt'
            else 'not_served'
        end as censored_reason,
        outcome,
        -- the list only when some gap is negative (rare): building and filtering it costs a
        -- lambda call per row
        case when (ready_ns < t0_ns)
            or (observed_ns < ready_ns)
            or (success_start_ns < ready_ns)
            or (engine_scheduled_ns < success_start_ns)
            or (engine_skew_s > 0)
        then
            list_filter([
                case when ready_ns < t0_ns then 'ready_s' end,
                case when observed_ns < ready_ns then 'observed_before_ready' end,
                case when success_start_ns < ready_ns then 'overshoot_s' end,
                case when engine_scheduled_ns < success_start_ns then 'engine_schedule_s' end,
                case when engine_skew_s > 0 then 'engine_skew_s' end
            ], lambda gap: gap is not null)
        else []::varchar[] end as negative_gaps,
        coalesce(trigger_clock_skew, false)
            or coalesce(success_clock_skew, false)
            or coalesce(success_start_ns < ready_ns, false)
            or coalesce(engine_scheduled_ns < success_start_ns, false)
            or coalesce(engine_skew_s > 0, false) as clock_skew,
        engine_running_at_t0,
        engine_waiting_at_t0,
        engine_kv_cache_usage_at_t0,
        -- how old that scrape was at t0: nanosecond difference / 1e9 -> seconds
        (t0_ns - pressure_ns) / 1e9 as engine_pressure_age_s,
        request_id,
        -- the ids as stored: 32 lower-case hex digits of the key
        printf('%032x', request_trace_key) as request_trace_id,
        trigger_span_id,
        trace_id,
        span_id

    from joined
    -- the last scrape at or before t0 of the engines serving the episode's model
    asof left join pressure
        on joined.model = pressure.model_name
        and joined.t0_ns >= pressure.pressure_ns

)

select * from final
