-- Lifecycle state intervals: one row per `modelclaim.state` span, the time a model spent in one
-- ModelClaim phase/reason on one pod, in order per model.
with

source as (

    select * from otel_traces
    where "SpanName" = 'modelclaim.state'

),

typed as (

    select
        "TraceId" as trace_id,
        "SpanId" as span_id,
        "SpanAttributes"['gen_ai.request.model'] as model,
        "SpanAttributes"['modelclaim.pod'] as pod,
        "SpanAttributes"['modelclaim.phase'] as phase,
        "SpanAttributes"['modelclaim.reason'] as reason,

        -- Timestamp is the span start (timestamp_ns); Duration is end - start in nanoseconds
        epoch_ns("Timestamp") as start_ns,
        epoch_ns("Timestamp") + "Duration"::bigint as end_ns

    from source

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

    from typed

)

select * from final
