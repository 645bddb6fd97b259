-- Typed `modelclaim.wake` spans: one wake (or start, or move) of a model's engine with the
-- instants the lifecycle recorded as events. The first span link names the triggering request's
-- `gate.request` (the first 503). A wake without `engine.ready` never became ready (censored).
with

source as (

    select * from otel_traces
    where "SpanName" = 'modelclaim.wake'

),

final as (

    select
        "TraceId" as trace_id,
        "SpanId" as span_id,
        "ServiceName" as service_name,

        -- the ids as integer keys: every join between layers compares these, not strings
        rl_trace_key("TraceId") as trace_key,
        rl_span_key("SpanId") as span_key,

        -- Timestamp is the span start (timestamp_ns); Duration is end - start in nanoseconds
        epoch_ns("Timestamp") as start_ns,
        epoch_ns("Timestamp") + "Duration"::bigint as end_ns,

        -- list positions are 1-based and null when the event is absent, so the instant is null too
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'room.found')]) as room_found_ns,
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'engine.wake_called')]) as wake_called_ns,
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'engine.ready')]) as ready_ns,
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'ready.observed')]) as observed_ns,

        "SpanAttributes"['gen_ai.request.model'] as model,
        "SpanAttributes"['modelclaim.wake_path'] as wake_path,
        "SpanAttributes"['modelclaim.pod'] as pod,
        "SpanAttributes"['modelclaim.from_pod'] as from_pod,
        "SpanAttributes"['modelclaim.neighbour'] as neighbour,

        -- the triggering request; lists are 1-based and an absent link gives null
        "Links.TraceId"[1] as trigger_trace_id,
        "Links.SpanId"[1] as trigger_span_id,
        rl_trace_key("Links.TraceId"[1]) as trigger_trace_key,
        rl_span_key("Links.SpanId"[1]) as trigger_span_key

    from source

)

select * from final
