-- The trace(s) holding one logical request ($request_id), as the client or the gate named it.
with

source as (

    select * from otel_traces
    where "SpanName" in ('client.request', 'gate.request')
        and "SpanAttributes"['restore.request_id'] = $request_id

),

final as (

    select
        "TraceId" as trace_id,
        min("Timestamp") as start

    from source
    group by "TraceId"

)

select * from final
order by start
