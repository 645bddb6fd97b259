-- Client requests under the user's labels: `typed_client_requests` with each label the user mapped
-- onto their own span or resource attribute (span_labels) before restorelens's own, so every layer
-- that reads a request's run, workload, seed, traffic class, model or policy reads the labels the
-- dashboard's filter offers. `client_policy` is the user's policy attribute, else the client's arm
-- label. Without a mapping span_labels has no rows and these are the typed client requests.
with

clients as (

    select * from typed_client_requests

),

labels as (

    select * from span_labels

),

final as (

    select
        clients.* replace (
            coalesce(labels.run_id, clients.run_id) as run_id,
            coalesce(labels.workload, clients.workload) as workload,
            coalesce(labels.seed, clients.seed) as seed,
            coalesce(labels.traffic_class, clients.traffic_class) as traffic_class,
            coalesce(labels.model, clients.model) as model,
            coalesce(labels.policy, clients.client_policy) as client_policy
        )

    from clients
    left join labels
        on clients.span_key = labels.span_key
        and clients.trace_key = labels.trace_key

)

select * from final
