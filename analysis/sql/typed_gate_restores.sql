-- Typed `gate.restore` spans: one lending episode per span, starting when protected demand
-- returned while capacity was lent (t0). The first span link names the returning request's
-- `gate.request`. A span without `grant.restored` / `borrowed.drained` events is censored.
with

source as (

    select * from otel_traces
    where "SpanName" = 'gate.restore'

),

final as (

    select
        "TraceId" as trace_id,
        "SpanId" as span_id,
        "ServiceName" as service_name,

        -- the ids as integer keys: every join between layers compares these, not strings
        rl_trace_key("TraceId") as trace_key,
        rl_span_key("SpanId") as span_key,

        -- Timestamp is the span start = t0 (timestamp_ns); Duration is end - start in nanoseconds
        epoch_ns("Timestamp") as t0_ns,
        epoch_ns("Timestamp") + "Duration"::bigint as end_ns,

        -- list positions are 1-based and null when the event is absent, so the instant is null too
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'grant.restored')]) as grant_restored_ns,
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'borrowed.drained')]) as drained_ns,

        "SpanAttributes"['gate.policy'] as policy,
        try_cast("SpanAttributes"['gate.borrowed_at_return'] as bigint) as borrowed_at_return,

        -- the returning request; lists are 1-based and an absent link gives null
        "Links.TraceId"[1] as returning_trace_id,
        "Links.SpanId"[1] as returning_span_id,
        rl_trace_key("Links.TraceId"[1]) as returning_trace_key,
        rl_span_key("Links.SpanId"[1]) as returning_span_key

    from source

)

select * from final
