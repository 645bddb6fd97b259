-- Labels under the user's own attribute names: `rl_label_map` (label, attribute), which the
-- analysis fills from `[analysis.labels]` or `--label LABEL=ATTR`, names for a label the span or
-- resource attribute that carries it in the user's traces. One row per span holding any mapped
-- attribute, the span's own attribute before its resource's. With no mapping there are no rows,
-- and the spans are not read at all.
with

mapping as (

    select
        max(attribute) filter (where label = 'traffic_class') as traffic_class_attr,
        max(attribute) filter (where label = 'policy') as policy_attr,
        max(attribute) filter (where label = 'workload') as workload_attr,
        max(attribute) filter (where label = 'run_id') as run_id_attr,
        max(attribute) filter (where label = 'seed') as seed_attr,
        max(attribute) filter (where label = 'model') as model_attr

    from rl_label_map

),

source as (

    select "TraceId", "SpanId", "SpanAttributes", "ResourceAttributes"
    from otel_traces
    where exists (select 1 from rl_label_map)

),

typed as (

    select
        -- the ids as integer keys: every join between layers compares these, not strings
        rl_trace_key(source."TraceId") as trace_key,
        rl_span_key(source."SpanId") as span_key,

        -- a null attribute name (that label is not mapped) looks up nothing
        coalesce(source."SpanAttributes"[mapping.traffic_class_attr],
                 source."ResourceAttributes"[mapping.traffic_class_attr]) as traffic_class,
        coalesce(source."SpanAttributes"[mapping.policy_attr],
                 source."ResourceAttributes"[mapping.policy_attr]) as policy,
        coalesce(source."SpanAttributes"[mapping.workload_attr],
                 source."ResourceAttributes"[mapping.workload_attr]) as workload,
        coalesce(source."SpanAttributes"[mapping.run_id_attr],
                 source."ResourceAttributes"[mapping.run_id_attr]) as run_id,
        try_cast(coalesce(source."SpanAttributes"[mapping.seed_attr],
                          source."ResourceAttributes"[mapping.seed_attr]) as bigint) as seed,
        coalesce(source."SpanAttributes"[mapping.model_attr],
                 source."ResourceAttributes"[mapping.model_attr]) as model

    from source
    cross join mapping

),

final as (

    select * from typed
    where traffic_class is not null
        or policy is not null
        or workload is not null
        or run_id is not null
        or seed is not null
        or model is not null

)

select * from final
