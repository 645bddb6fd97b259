-- The runs a store holds: one row per run id x its labels (scenario, workload, policy, seed), with
-- how many client requests carry them, for the dashboard's run filter. Cheap on purpose (it is read
-- on every page): the typed client requests, the user's own labels (span_labels, no rows without a
-- mapping) and the policy of any gate the request's trace passed; requests without a run id are no
-- run. The policy is the client's arm label, else the gate's, as the requests view reads it.
with

clients as (

    select * from typed_client_requests

),

labels as (

    select * from span_labels

),

gates as (

    select trace_key, max(policy) as policy
    from typed_gate_requests
    group by trace_key

),

labelled as (

    select
        coalesce(labels.run_id, clients.run_id) as run_id,
        clients.scenario,
        coalesce(labels.workload, clients.workload) as workload,
        coalesce(labels.policy, clients.client_policy, gates.policy) as policy,
        coalesce(labels.seed, clients.seed) as seed

    from clients
    left join labels
        on clients.span_key = labels.span_key
        and clients.trace_key = labels.trace_key
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
