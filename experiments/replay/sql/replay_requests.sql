-- Replayable requests: one row per request a recorded store shows arriving, for `restorelens
-- experiment --replay` (experiments/replay/ makes a workload of them). Read over the analysis'
-- views, so a label the user mapped onto their own attribute (`--replay-label`) comes first.
-- A request the restorelens client recorded (a `client.request`: the `requests` view) arrives
-- when the client started it, with its run, traffic class, arrival phase and that phase's window;
-- its tokens are those of the engine span that served its last attempt (vLLM's
-- `gen_ai.usage.*`), else the prompt tokens the client's own span holds, and its max_tokens the
-- engine span's `gen_ai.request.max_tokens`. An engine request that no client request led to
-- (vLLM's `llm_request` in traces of another client, or of the engine alone: the
-- `engine_requests` view) arrives when its attempt started (its caller's HTTP span, else the
-- engine's own arrival), labelled as that view labels it, with the engine's tokens. Requests whose
-- arrival phase is in $excluded_phases (the ModelClaim wake scenarios') are no lending traffic:
-- left out. Rows are unordered; the caller sorts them.
with

clients as (

    select * from requests

),

client_attempts as (

    select * from request_attempts

),

engines as (

    select * from engine_requests

),

-- attributes the views do not carry: the engine's max_tokens, and prompt tokens a client span may
-- record itself (an instrumented app's; restorelens's client does not)
token_attributes as (

    select
        rl_trace_key("TraceId") as trace_key,
        rl_span_key("SpanId") as span_key,
        try_cast("SpanAttributes"['gen_ai.request.max_tokens'] as bigint) as max_tokens,
        try_cast("SpanAttributes"['gen_ai.usage.prompt_tokens'] as bigint) as prompt_tokens

    from otel_traces
    where "SpanName" in ('client.request', 'llm_request')

),

last_attempts as (

    select
        trace_key,
        parent_key as client_key,
        engine_span_key

    from client_attempts
    where is_last

),

client_keyed as (

    select
        clients.*,
        rl_trace_key(clients.trace_id) as trace_key,
        rl_span_key(clients.span_id) as span_key

    from clients
    where not coalesce(list_contains($excluded_phases, clients.arrival_phase), false)

),

from_clients as (

    select
        client_keyed.run_id,
        coalesce(client_keyed.request_id, client_keyed.span_id) as request_id,
        'client' as source,
        -- `start` is the client span's start as a timestamp; epoch_ns gives back its nanoseconds
        epoch_ns(client_keyed.start) as arrival_ns,
        client_keyed.traffic_class,
        client_keyed.arrival_phase,
        client_keyed.arrival_phase_start_s,
        client_keyed.arrival_phase_window_s,
        coalesce(client_keyed.prompt_tokens, client_span.prompt_tokens) as prompt_tokens,
        client_keyed.completion_tokens,
        engine_span.max_tokens,
        client_keyed.model

    from client_keyed
    left join last_attempts
        on client_keyed.span_key = last_attempts.client_key
        and client_keyed.trace_key = last_attempts.trace_key
    left join token_attributes as client_span
        on client_keyed.span_key = client_span.span_key
        and client_keyed.trace_key = client_span.trace_key
    left join token_attributes as engine_span
        on last_attempts.engine_span_key = engine_span.span_key
        and last_attempts.trace_key = engine_span.trace_key

),

engine_keyed as (

    select
        engines.*,
        rl_trace_key(engines.trace_id) as trace_key,
        rl_span_key(engines.span_id) as span_key,
        rl_span_key(engines.attempt_span_id) as attempt_key

    from engines

),

-- engine requests a recorded client request led to are that request's, counted above
engines_alone as (

    select engine_keyed.*
    from engine_keyed
    anti join client_attempts
        on engine_keyed.attempt_key = client_attempts.span_key
        and engine_keyed.trace_key = client_attempts.trace_key

),

from_engines as (

    select
        engines_alone.run_id,
        engines_alone.span_id as request_id,
        'engine' as source,
        -- `attempt_start`: the caller's HTTP span start, else the engine's arrival; a timestamp,
        -- epoch_ns gives back its nanoseconds
        epoch_ns(engines_alone.attempt_start) as arrival_ns,
        engines_alone.traffic_class,
        null::varchar as arrival_phase,
        null::double as arrival_phase_start_s,
        null::double as arrival_phase_window_s,
        engines_alone.prompt_tokens,
        engines_alone.completion_tokens,
        engine_span.max_tokens,
        engines_alone.model

    from engines_alone
    left join token_attributes as engine_span
        on engines_alone.span_key = engine_span.span_key
        and engines_alone.trace_key = engine_span.trace_key

),

final as (

    select * from from_clients
    union all by name
    select * from from_engines

)

select * from final
