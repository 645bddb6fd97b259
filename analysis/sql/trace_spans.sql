-- Every span of one trace ($trace_id), for a waterfall: offsets from the trace's first span,
-- durations, the raw attribute map and the events with their offsets.
with

source as (

    select * from otel_traces
    where "TraceId" = $trace_id

),

timed as (

    select
        *,
        epoch_ns("Timestamp") as start_ns,
        min(epoch_ns("Timestamp")) over () as trace_start_ns

    from source

),

final as (

    select
        "SpanId" as span_id,
        "ParentSpanId" as parent_span_id,
        "SpanName" as name,
        "SpanKind" as kind,
        "ServiceName" as service_name,
        "Timestamp" as start,
        -- nanoseconds -> seconds, from the trace's first span start
        (start_ns - trace_start_ns) / 1e9 as offset_s,
        -- Duration is stored in nanoseconds
        "Duration" / 1e9 as duration_s,
        "StatusCode" as status_code,
        "SpanAttributes" as attributes,
        "Events.Name" as event_names,
        list_transform("Events.Timestamp", lambda event_time: (epoch_ns(event_time) - trace_start_ns) / 1e9)
            as event_offsets_s,
        "Links.TraceId" as link_trace_ids,
        "Links.SpanId" as link_span_ids

    from timed

)

select * from final
order by offset_s, span_id
