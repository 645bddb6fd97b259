-- Paired differences between policies: for every workload x seed that two policies both ran,
-- policy minus baseline of each goodput (the MoFlux hypotheses compare these, e.g. lend minus
-- priority interactive SLO goodput, lend minus static batch borrow goodput). Reads the
-- `policy_summary` relation, materialised with the SLO parameters the caller chose.
with

summary as (

    select * from policy_summary

),

final as (

    select
        policy_side.workload,
        policy_side.seed,
        policy_side.policy,
        baseline_side.policy as baseline,
        policy_side.interactive_slo_goodput_rps - baseline_side.interactive_slo_goodput_rps
            as interactive_slo_goodput_diff_rps,
        policy_side.batch_borrow_goodput_rps - baseline_side.batch_borrow_goodput_rps
            as batch_borrow_goodput_diff_rps,
        policy_side.interactive_slo_goodput_rps,
        baseline_side.interactive_slo_goodput_rps as baseline_interactive_slo_goodput_rps,
        policy_side.batch_borrow_goodput_rps,
        baseline_side.batch_borrow_goodput_rps as baseline_batch_borrow_goodput_rps

    from summary as policy_side
    inner join summary as baseline_side
        on policy_side.workload is not distinct from baseline_side.workload
        and policy_side.seed is not distinct from baseline_side.seed
        -- a null policy (no gate) is an arm of its own: compared, never dropped
        and policy_side.policy is distinct from baseline_side.policy

)

select * from final
