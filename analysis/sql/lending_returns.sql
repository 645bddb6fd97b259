-- Lending returns: one row per lending episode (`gate.restore` span) with the returning request
-- that began it, found through the span link: the gate's view of it (model, slot, the engine's
-- schedule instant and its bounds), its first token (the engine's, else the gate's first upstream
-- byte, else the client's first chunk) and the client's labels, the user's own attribute for a
-- label before restorelens's (labelled_client_requests), as the requests view reads them. The
-- layer under `lending_episodes` and, with `wake_triggers`, `episode_pressure`.
with

restores as (

    select * from typed_gate_restores

),

gates as (

    select * from gate_requests

),

clients as (

    select * from labelled_client_requests

),

posts as (

    select * from typed_http_attempts

),

final as (

    select
        restores.*,
        gates.request_id as returning_request_id,
        gates.model,
        gates.slot as returning_slot,
        gates.engine_scheduled_ns,
        gates.engine_scheduled_lower_ns,
        gates.engine_scheduled_upper_ns,
        gates.engine_scheduled_point,
        gates.engine_clock_skew,
        -- first token: the engine's, else the gate's first upstream byte, else the client's chunk
        coalesce(
            gates.engine_first_token_ns,
            gates.upstream_first_byte_ns,
            clients.first_chunk_ns
        ) as first_token_ns,
        clients.workload,
        clients.seed,
        clients.run_id

    from restores
    left join gates
        on restores.returning_span_key = gates.span_key
        and restores.returning_trace_key = gates.trace_key
    -- the client's attempt that reached the gate, and the client request above it: only the
    -- client's first chunk and labels are needed, not the whole attempt history
    left join posts
        on gates.parent_key = posts.span_key
        and gates.trace_key = posts.trace_key
    left join clients
        on posts.parent_key = clients.span_key
        and posts.trace_key = clients.trace_key

)

select * from final
