-- Typed `modelclaim.state` spans: the time a model spent in one ModelClaim phase/reason on one
-- pod, one span per state the lifecycle driver left, with the memory the model held in it. The
-- run is the span's own `restore.run_id`, else its resource's (an experiment run puts it on every
-- service); a deployed gate's states belong to no run (null).
with

source as (

    select * from otel_traces
    where "SpanName" = 'modelclaim.state'

),

final as (

    select
        "TraceId" as trace_id,
        "SpanId" as span_id,

        -- the ids as integer keys: every join between layers compares these, not strings
        rl_trace_key("TraceId") as trace_key,
        rl_span_key("SpanId") as span_key,

        coalesce("SpanAttributes"['restore.run_id'], "ResourceAttributes"['restore.run_id']) as run_id,
        "SpanAttributes"['gen_ai.request.model'] as model,
        "SpanAttributes"['modelclaim.pod'] as pod,
        "SpanAttributes"['modelclaim.phase'] as phase,
        "SpanAttributes"['modelclaim.reason'] as reason,

        -- bytes as the span carries them (no conversion); null when the lifecycle accounted none
        try_cast("SpanAttributes"['modelclaim.gpu_bytes'] as bigint) as gpu_bytes,
        try_cast("SpanAttributes"['modelclaim.host_ram_bytes'] as bigint) as host_ram_bytes,

        -- Timestamp is the span start (timestamp_ns); Duration is end - start in nanoseconds
        epoch_ns("Timestamp") as start_ns,
        epoch_ns("Timestamp") + "Duration"::bigint as end_ns

    from source

)

select * from final
