-- Retry links from the gate's own spans (docs/analysis.md, "Attempts any client made"): one row per
-- `gate.request` answered 503 or 429, with the `gate.request` that is its retry, so a wake is
-- decomposed whoever the client is, with or without restorelens's client spans. The retry is the
-- first request starting once the refusal was answered that shares, in this order of preference:
--   trace        its trace and model, when the refused request carried a `traceparent`
--                (`gate.client.traced`): restorelens's client, any W3C-propagating client with
--                an enclosing span;
--   request_key  its `gate.client.request_key` and model (the client's x-request-id or
--                idempotency-key);
--   client       its `gate.client.identity` (credential hash or peer address) and model, starting
--                within the link window: hint_s + max(hint_s, link_floor_s) after the answer;
--   none         no such request: the client did not come back (or not in time to tell).
-- A request the client marks as its first (`gate.client.retry_count` = 0) is never a retry. A request
-- is the retry of one refusal at most: when several claim it, the strongest link wins, then the
-- earliest refusal (the one that started the chain); the others keep no link. Each kind is one
-- sort-merge (ASOF) join of the refusals against the gate's requests of the same key, never a
-- cross join, and only the keys some refusal has are sorted.
with

parameters as (

    -- link_floor_s: the least slack the client link allows past the hint (seconds). A client
    -- honouring the hint comes back after hint_s; one with its own backoff (the OpenAI SDK: 0.5 to
    -- 8 s with jitter; curl --retry: 1 s, doubling) may come back later or, with no hint, at any
    -- moment up to its backoff. hint + max(hint, 10 s) admits both, and a doubled hint, yet stays
    -- short enough that the same client's next, unrelated request is not taken for a retry.
    select 10.0 as link_floor_s

),

gates as (

    select
        trace_key,
        span_key,
        start_ns,
        end_ns,
        status_code,
        -- a request whose model the gate could not read is linked among the model-less ones
        coalesce(model, '') as model_key,
        client_identity,
        client_request_key,
        client_retry_count,
        client_traced,
        -- milliseconds / 1e3 -> seconds; the gate's own hint, else its Retry-After
        coalesce(gate_retry_after_ms / 1e3, retry_after_s, 0) as hint_s

    from typed_gate_requests

),

refused as (

    select
        *,
        -- answered at its end; a zero-length span one nanosecond later, so it is not its own retry
        greatest(end_ns, start_ns + 1) as answered_ns

    from gates
    where status_code in (503, 429)

),

candidates as (

    -- the client's first attempt of a request is no retry
    select * from gates
    where coalesce(client_retry_count, 1) > 0

),

trace_candidates as (

    select trace_key, model_key, span_key as next_span_key, start_ns as next_start_ns
    from candidates
    where trace_key in (select trace_key from refused)

),

key_candidates as (

    select client_request_key, model_key, trace_key as next_trace_key, span_key as next_span_key,
        start_ns as next_start_ns
    from candidates
    where client_request_key in (select client_request_key from refused)

),

client_candidates as (

    select client_identity, model_key, trace_key as next_trace_key, span_key as next_span_key,
        start_ns as next_start_ns
    from candidates
    where client_identity in (select client_identity from refused)

),

by_trace as (

    -- a request without the attribute (a gate before it was recorded) is taken as traced: an
    -- untraced request's trace is its own, so nothing else shares it
    select
        refused.trace_key,
        refused.span_key,
        refused.trace_key as next_trace_key,
        trace_candidates.next_span_key,
        trace_candidates.next_start_ns

    from refused
    asof join trace_candidates
        on refused.trace_key = trace_candidates.trace_key
        and refused.model_key = trace_candidates.model_key
        and trace_candidates.next_start_ns >= refused.answered_ns
    where coalesce(refused.client_traced, true)

),

by_key as (

    select
        refused.trace_key,
        refused.span_key,
        key_candidates.next_trace_key,
        key_candidates.next_span_key,
        key_candidates.next_start_ns

    from refused
    asof join key_candidates
        on refused.client_request_key = key_candidates.client_request_key
        and refused.model_key = key_candidates.model_key
        and key_candidates.next_start_ns >= refused.answered_ns

),

by_client as (

    select
        refused.trace_key,
        refused.span_key,
        client_candidates.next_trace_key,
        client_candidates.next_span_key,
        client_candidates.next_start_ns

    from refused
    asof join client_candidates
        on refused.client_identity = client_candidates.client_identity
        and refused.model_key = client_candidates.model_key
        and client_candidates.next_start_ns >= refused.answered_ns
    cross join parameters
    -- the window: seconds * 1e9 -> ns; the first later request outside it means no later one is in it
    where client_candidates.next_start_ns - refused.answered_ns
        <= round((refused.hint_s + greatest(refused.hint_s, parameters.link_floor_s)) * 1e9)::bigint

),

chosen as (

    select
        refused.trace_key,
        refused.span_key,
        refused.start_ns,
        refused.answered_ns,
        refused.status_code,
        refused.hint_s,
        case
            when by_trace.next_span_key is not null then 'trace'
            when by_key.next_span_key is not null then 'request_key'
            when by_client.next_span_key is not null then 'client'
        end as candidate_link,
        -- 1 trace, 2 request key, 3 client: the lower, the more certain
        case
            when by_trace.next_span_key is not null then 1
            when by_key.next_span_key is not null then 2
            when by_client.next_span_key is not null then 3
        end as link_rank,
        coalesce(by_trace.next_trace_key, by_key.next_trace_key, by_client.next_trace_key) as next_trace_key,
        coalesce(by_trace.next_span_key, by_key.next_span_key, by_client.next_span_key) as next_span_key,
        coalesce(by_trace.next_start_ns, by_key.next_start_ns, by_client.next_start_ns) as next_start_ns

    from refused
    left join by_trace
        on refused.span_key = by_trace.span_key
        and refused.trace_key = by_trace.trace_key
    left join by_key
        on refused.span_key = by_key.span_key
        and refused.trace_key = by_key.trace_key
    left join by_client
        on refused.span_key = by_client.span_key
        and refused.trace_key = by_client.trace_key

),

claimed as (

    select
        *,
        -- the one refusal a request is the retry of: the strongest link, then the earliest refusal
        row_number() over (
            partition by next_trace_key, next_span_key order by link_rank, start_ns, span_key
        ) as claim

    from chosen

),

final as (

    select
        trace_key,
        span_key,
        status_code,
        hint_s,
        case when next_span_key is not null and claim = 1 then candidate_link else 'none' end as attempt_link,
        case when next_span_key is not null and claim = 1 then link_rank end as link_rank,
        case when next_span_key is not null and claim = 1 then next_trace_key end as next_trace_key,
        case when next_span_key is not null and claim = 1 then next_span_key end as next_span_key,
        -- how long the client waited after the answer before its retry: nanosecond difference / 1e9 -> seconds
        case when next_span_key is not null and claim = 1 then (next_start_ns - answered_ns) / 1e9 end as wait_s

    from claimed

)

select * from final
