-- Policy summary, with the MoFlux study's own definitions: per policy x workload x seed,
--   interactive_slo_goodput_rps: interactive requests that arrived in phase $contention_phase
--     and met the SLO (outcome ok, TTFT <= $slo_ttft_s and e2e <= $slo_e2e_s), divided by that
--     phase's window; a rejection counts as zero;
--   batch_borrow_goodput_rps: batch requests that arrived in phase $borrow_phase and completed
--     (outcome ok), divided by that phase's window.
-- A phase's window is what the client labelled its requests with
-- (restore.arrival_phase_window_s), so a run recorded by any harness that labels its requests
-- the same way is summarised the same; a run without the label has no goodput (null), never one
-- divided by some other length. Several runs of one policy x workload x seed add their counts
-- and their windows. Requests that passed no gate and carry no arm label (the engine alone) have
-- no policy: their row's policy is null (shown as "no gate"), never a made-up name. Requests whose arrival phase is in $excluded_phases (by
-- default the ModelClaim wake scenarios') are no policy arm: left out.
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
        policy,
        workload,
        seed,
        run_id,
        traffic_class,
        outcome,
        arrival_phase_window_s,
        coalesce(outcome = 'ok' and ttft_s <= $slo_ttft_s and e2e_s <= $slo_e2e_s, false) as meets_slo,
        coalesce(outcome = 'rejected' or decision = 'rejected', false) as rejected,
        coalesce(arrival_phase = $contention_phase, false) as contention_arrival,
        coalesce(arrival_phase = $borrow_phase, false) as borrow_arrival

    from policy_arms

),

runs as (

    select
        policy,
        workload,
        seed,
        run_id,
        -- one window per phase and run: every request of the phase carries the same label
        max(arrival_phase_window_s) filter (where contention_arrival) as contention_window_s,
        max(arrival_phase_window_s) filter (where borrow_arrival) as borrow_window_s,
        count(*) filter (where traffic_class = 'interactive') as interactive_requests,
        count(*) filter (where traffic_class = 'interactive' and contention_arrival)
            as interactive_contention_arrivals,
        count(*) filter (where traffic_class = 'interactive' and contention_arrival and meets_slo)
            as interactive_slo_met,
        count(*) filter (where traffic_class = 'interactive' and contention_arrival and rejected)
            as interactive_rejected,
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
        sum(contention_window_s) as contention_window_s,
        sum(borrow_window_s) as borrow_window_s,
        sum(interactive_requests)::bigint as interactive_requests,
        sum(interactive_contention_arrivals)::bigint as interactive_contention_arrivals,
        sum(interactive_slo_met)::bigint as interactive_slo_met,
        sum(interactive_rejected)::bigint as interactive_rejected,
        sum(interactive_slo_met) / nullif(sum(contention_window_s), 0) as interactive_slo_goodput_rps,
        sum(batch_requests)::bigint as batch_requests,
        sum(batch_borrow_arrivals)::bigint as batch_borrow_arrivals,
        sum(batch_borrow_completed)::bigint as batch_borrow_completed,
        sum(batch_borrow_completed) / nullif(sum(borrow_window_s), 0) as batch_borrow_goodput_rps

    from runs
    group by policy, workload, seed

)

select * from final
