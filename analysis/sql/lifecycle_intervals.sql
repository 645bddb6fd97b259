-- Lifecycle state intervals: one row per `modelclaim.state` span, the time a model spent in one
-- ModelClaim phase/reason on one pod, with the GPU and host RAM bytes it held there, numbered in
-- order per (run, model, pod). The run is the user's own attribute for it (span_labels) when one
-- is mapped, else the state's `restore.run_id` (span, then resource); null outside an experiment.
with

states as (

    select * from typed_model_states

),

labels as (

    select * from span_labels

),

labelled as (

    select
        states.*,
        -- the user's own attribute for a label (span_labels) before restorelens's
        coalesce(labels.run_id, states.run_id) as labelled_run_id

    from states
    left join labels
        on states.span_key = labels.span_key
        and states.trace_key = labels.trace_key

),

final as (

    select
        labelled_run_id as run_id,
        model,
        pod,
        phase,
        reason,
        make_timestamp_ns(start_ns) as start,
        make_timestamp_ns(end_ns) as "end",
        -- nanoseconds -> seconds
        (end_ns - start_ns) / 1e9 as duration_s,
        gpu_bytes,
        host_ram_bytes,
        row_number() over (partition by labelled_run_id, model, pod order by start_ns, end_ns) as interval_index,
        trace_id,
        span_id

    from labelled

)

select * from final
