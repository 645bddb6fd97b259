-- Policy summary, as the MoFlux benchmark reports it: per policy x workload x seed,
--   interactive_slo_goodput_rps: interactive requests that met the SLO (outcome ok, TTFT <=
--     $slo_ttft_s and e2e <= $slo_e2e_s) per second of the run; a rejection counts as zero;
--   batch_borrow_goodput_rps: batch requests that arrived in phase $borrow_phase and completed
--     (outcome ok) per second of the run.
-- A run's window is its first request start to its last request end (per run_id); several runs
-- of one policy x workload x seed add their counts and their windows. Requests that passed no
-- gate (the engine alone) are summarised under the policy 'none'. Requests whose arrival phase is
-- in $excluded_phases (by default the ModelClaim wake scenarios') are no policy arm: left out.
with

requests as (

    select * from requests

),

policy_arms as (

    select * from requests
    where not coalesce(list_contains($excluded_phases, arrival_phase), false)

),

scored as (

    select
        coalesce(policy, 'none') as policy,
        workload,
        seed,
        run_id,
        traffic_class,
        outcome,
        epoch_ns(start) as start_ns,
        epoch_ns("end") as end_ns,
        coalesce(outcome = 'ok' and ttft_s <= $slo_ttft_s and e2e_s <= $slo_e2e_s, false) as meets_slo,
        coalesce(outcome = 'rejected' or decision = 'rejected', false) as rejected,
        coalesce(arrival_phase = $borrow_phase, false) as borrow_arrival

    from policy_arms

),

runs as (

    select
        policy,
        workload,
        seed,
        run_id,
        -- nanoseconds -> seconds
        (max(end_ns) - min(start_ns)) / 1e9 as window_s,
        count(*) filter (where traffic_class = 'interactive') as interactive_requests,
        count(*) filter (where traffic_class = 'interactive' and meets_slo) as interactive_slo_met,
        count(*) filter (where traffic_class = 'interactive' and rejected) as interactive_rejected,
        count(*) filter (where traffic_class = 'batch') as batch_requests,
        count(*) filter (where traffic_class = 'batch' and borrow_arrival) as batch_borrow_arrivals,
        count(*) filter (where traffic_class = 'batch' and borrow_arrival and outcome = 'ok')
            as batch_borrow_completed

    from scored
    group by policy, workload, seed, run_id

),

final as (

    select
        policy,
        workload,
        seed,
        count(*) as runs,
        sum(window_s) as window_s,
        sum(interactive_requests)::bigint as interactive_requests,
        sum(interactive_slo_met)::bigint as interactive_slo_met,
        sum(interactive_rejected)::bigint as interactive_rejected,
        sum(interactive_slo_met) / nullif(sum(window_s), 0) as interactive_slo_goodput_rps,
        sum(batch_requests)::bigint as batch_requests,
        sum(batch_borrow_arrivals)::bigint as batch_borrow_arrivals,
        sum(batch_borrow_completed)::bigint as batch_borrow_completed,
        sum(batch_borrow_completed) / nullif(sum(window_s), 0) as batch_borrow_goodput_rps

    from runs
    group by policy, workload, seed

)

select * from final
