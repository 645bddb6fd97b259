-- Typed `modelclaim.state` spans: the time a model spent in one ModelClaim phase/reason on one
-- pod, one span per state the lifecycle driver left.
with

source as (

    select * from otel_traces
    where "SpanName" = 'modelclaim.state'

),

final as (

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

)

select * from final
