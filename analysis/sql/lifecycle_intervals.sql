-- Lifecycle state intervals: one row per `modelclaim.state` span, the time a model spent in one
-- ModelClaim phase/reason on one pod, in order per model.
with

states as (

    select * from typed_model_states

),

final as (

    select
        model,
        pod,
        phase,
        reason,
        make_timestamp_ns(start_ns) as start,
        make_timestamp_ns(end_ns) as "end",
        -- nanoseconds -> seconds
        (end_ns - start_ns) / 1e9 as duration_s,
        row_number() over (partition by model order by start_ns, end_ns) as interval_index,
        trace_id,
        span_id

    from states

)

select * from final
