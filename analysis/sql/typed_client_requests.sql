-- Typed `client.request` spans: one logical request as the retrying client saw it, over all of
-- its attempts. Instants are integer nanoseconds since the epoch so that every difference taken
-- later is exact; attributes are cast from the string map as docs/spans.md types them.
with

source as (

    select * from otel_traces
    where "SpanName" = 'client.request'

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
        epoch_ns("Events.Timestamp"[list_position("Events.Name", 'response.first_chunk')]) as first_chunk_ns,

        "SpanAttributes"['restore.request_id'] as request_id,
        -- the span's own run id, else its resource's (an experiment run puts it on every service)
        coalesce("SpanAttributes"['restore.run_id'], "ResourceAttributes"['restore.run_id']) as run_id,
        "SpanAttributes"['restore.scenario'] as scenario,
        "SpanAttributes"['restore.workload'] as workload,
        try_cast("SpanAttributes"['restore.seed'] as bigint) as seed,
        "SpanAttributes"['restore.traffic_class'] as traffic_class,
        "SpanAttributes"['gen_ai.request.model'] as model,
        "SpanAttributes"['restore.retry_policy'] as retry_policy,
        "SpanAttributes"['restore.arrival_phase'] as arrival_phase,
        -- protocol seconds from the run's start (the client's labels, not span times)
        try_cast("SpanAttributes"['restore.arrival_phase_start_s'] as double) as arrival_phase_start_s,
        try_cast("SpanAttributes"['restore.arrival_phase_window_s'] as double) as arrival_phase_window_s,
        "SpanAttributes"['restore.policy'] as client_policy,
        "SpanAttributes"['restore.outcome'] as outcome,
        try_cast("SpanAttributes"['restore.attempts'] as bigint) as attempts_reported

    from source

)

select * from final
