-- Engine requests: one row per request an engine served (an `llm_request` span with vLLM's
-- latencies), whoever sent it and whether or not a restorelens gate was in the path. The attempt
-- is the client's HTTP call that led to the engine: the engine span's caller (an HTTP `POST`), or
-- through a gate (`POST` > `gate.request` > the gate's upstream `POST` > engine) the client's call
-- to the gate; without a recorded caller, the engine's arrival. Labels come from the span above
-- the attempt (`client.request`, or the user's own span) under the mapped attribute names
-- (`span_labels`), then the attempt span's, then restorelens's own attributes; the engine is the
-- service name, or the model when the service has none (vLLM reports `unknown_service:python`).
with

engines as (

    select * from typed_engine_requests
    where has_latency

),

posts as (

    select * from typed_http_attempts

),

gates as (

    select * from typed_gate_requests

),

clients as (

    select * from typed_client_requests

),

labels as (

    select * from span_labels

),

called as (

    select
        engines.*,
        caller.span_key as caller_key,
        caller.parent_key as caller_parent_key,
        caller.start_ns as caller_start_ns,
        gates.span_key as gate_key,
        gates.parent_key as gate_parent_key,
        gates.start_ns as gate_start_ns,
        gates.policy as gate_policy,
        gates.traffic_class as gate_traffic_class,
        gates.run_id as gate_run_id,
        gates.model as gate_model

    from engines
    left join posts as caller
        on engines.parent_key = caller.span_key
        and engines.trace_key = caller.trace_key
    left join gates
        on caller.parent_key = gates.span_key
        and caller.trace_key = gates.trace_key

),

attempted as (

    select
        called.*,
        client_post.span_key as client_post_key,
        -- through a gate the attempt is the client's call to it, else the engine's own caller
        case when gate_key is not null then client_post.span_key else caller_key end as attempt_key,
        case when gate_key is not null then client_post.parent_key else caller_parent_key end as origin_key,
        coalesce(
            case when gate_key is not null then coalesce(client_post.start_ns, gate_start_ns) else caller_start_ns end,
            arrival_ns
        ) as attempt_start_ns,
        case
            when gate_key is not null and client_post.span_key is not null then 'client via gate'
            when gate_key is not null then 'gate'
            when caller_key is not null then 'client'
            else 'engine arrival'
        end as attempt_source

    from called
    left join posts as client_post
        on called.gate_parent_key = client_post.span_key
        and called.trace_key = client_post.trace_key

),

labelled as (

    select
        attempted.*,
        coalesce(origin_labels.traffic_class, attempt_labels.traffic_class, clients.traffic_class,
                 gate_traffic_class) as traffic_class,
        coalesce(origin_labels.policy, attempt_labels.policy, clients.client_policy, gate_policy) as policy,
        coalesce(origin_labels.workload, attempt_labels.workload, clients.workload) as workload,
        coalesce(origin_labels.run_id, attempt_labels.run_id, clients.run_id, gate_run_id) as run_id,
        coalesce(origin_labels.seed, attempt_labels.seed, clients.seed) as seed,
        coalesce(response_model, request_model, origin_labels.model, attempt_labels.model, clients.model,
                 gate_model) as model

    from attempted
    left join clients
        on attempted.origin_key = clients.span_key
        and attempted.trace_key = clients.trace_key
    left join labels as origin_labels
        on attempted.origin_key = origin_labels.span_key
        and attempted.trace_key = origin_labels.trace_key
    left join labels as attempt_labels
        on attempted.attempt_key = attempt_labels.span_key
        and attempted.trace_key = attempt_labels.trace_key

),

final as (

    select
        case
            when service_name is null or starts_with(service_name, 'unknown_service') then coalesce(model, service_name)
            else service_name
        end as engine,
        service_name as engine_service_name,
        model,
        traffic_class,
        policy,
        workload,
        run_id,
        seed,
        gate_key is not null as via_gate,
        attempt_source,
        make_timestamp_ns(attempt_start_ns) as attempt_start,
        make_timestamp_ns(arrival_ns) as arrival,
        time_in_queue_s as queue_s,
        -- all durations: nanosecond differences / 1e9 -> seconds
        (scheduled_ns - attempt_start_ns) / 1e9 as schedule_delay_s,
        (scheduled_lower_ns - attempt_start_ns) / 1e9 as schedule_delay_lower_s,
        (scheduled_upper_ns - attempt_start_ns) / 1e9 as schedule_delay_upper_s,
        scheduled_point as schedule_point,
        -- vLLM's own latencies, in seconds, from its arrival
        time_to_first_token_s as ttft_s,
        prefill_s,
        decode_s,
        e2e_s,
        prompt_tokens,
        completion_tokens,
        -- the engine's span starting before the attempt that led to it: the clocks disagree
        arrival_ns < attempt_start_ns as clock_skew,
        trace_id,
        span_id,
        -- the attempt's id as stored: 16 lower-case hex digits of its key
        case when attempt_key is not null then printf('%016x', attempt_key) end as attempt_span_id

    from labelled

)

select * from final
