-- The `gate.restore` and `modelclaim.wake` spans that link to one trace ($trace_id): the
-- restorations and wakes a request started, found from the request's side (the other direction
-- of the span links `trace_spans` returns). One row per linking span, oldest first, with the
-- span of $trace_id it links to (its first link into that trace).
with

source as (

    select * from otel_traces
    where "SpanName" in ('gate.restore', 'modelclaim.wake')
        and list_contains("Links.TraceId", $trace_id)

),

final as (

    select
        "TraceId" as trace_id,
        "SpanId" as span_id,
        "SpanName" as name,
        "Timestamp" as start,
        -- lists are 1-based: the span id beside the first link into $trace_id
        "Links.SpanId"[list_position("Links.TraceId", $trace_id)] as linked_span_id

    from source

)

select * from final
order by start, span_id
