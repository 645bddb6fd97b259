-- Every span of one trace ($trace_id), for a waterfall: in tree order (each span after its
-- parent, siblings by start), with its depth, offsets from the trace's first span, durations,
-- the raw attribute map and the events with their offsets.
with recursive

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

tree as (

    -- roots: no parent, or a parent outside this store (e.g. a span that was never exported)
    select
        "SpanId" as span_id,
        [struct_pack(start_ns := start_ns, span_id := "SpanId")] as tree_path,
        0 as depth

    from timed
    where "ParentSpanId" not in (select "SpanId" from timed)

    union all

    select
        child."SpanId",
        list_append(tree.tree_path, struct_pack(start_ns := child.start_ns, span_id := child."SpanId")),
        tree.depth + 1

    from timed as child
    inner join tree
        on child."ParentSpanId" = tree.span_id

),

final as (

    select
        row_number() over (order by tree.tree_path) as waterfall_row,
        tree.depth,
        timed."SpanId" as span_id,
        timed."ParentSpanId" as parent_span_id,
        timed."SpanName" as name,
        timed."SpanKind" as kind,
        timed."ServiceName" as service_name,
        timed."Timestamp" as start,
        -- nanoseconds -> seconds, from the trace's first span start
        (timed.start_ns - timed.trace_start_ns) / 1e9 as offset_s,
        -- Duration is stored in nanoseconds
        timed."Duration" / 1e9 as duration_s,
        timed."StatusCode" as status_code,
        timed."SpanAttributes" as attributes,
        timed."Events.Name" as event_names,
        list_transform(
            timed."Events.Timestamp",
            -- each event's offset from the trace's first span start: nanoseconds -> seconds
            lambda event_time: (epoch_ns(event_time) - timed.trace_start_ns) / 1e9
        ) as event_offsets_s,
        timed."Links.TraceId" as link_trace_ids,
        timed."Links.SpanId" as link_span_ids

    from timed
    inner join tree
        on timed."SpanId" = tree.span_id

)

select * from final
order by waterfall_row
