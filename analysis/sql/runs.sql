-- The runs a store holds: one row per run id x its labels (scenario, workload, policy, seed), with
-- how many client requests carry them, for the dashboard's run filter. Cheap on purpose (it is read
-- on every page): the client requests under the user's own labels (labelled_client_requests) and
-- the policy of any gate the request's trace passed; requests without a run id are no run. The
-- policy is the client's (its label or arm label), else the gate's, as the requests view reads it.
with

clients as (

    select * from labelled_client_requests

),

gates as (

    select trace_key, max(policy) as policy
    from typed_gate_requests
    group by trace_key

),

labelled as (

    select
        clients.run_id,
        clients.scenario,
        clients.workload,
        coalesce(clients.client_policy, gates.policy) as policy,
        clients.seed

    from clients
    left join gates
        on clients.trace_key = gates.trace_key

),

final as (

    select run_id, scenario, workload, policy, seed, count(*) as requests
    from labelled
    where run_id is not null
    group by all
    order by run_id, scenario, workload, policy, seed

)

select * from final
