-- Engine startup phases (docs/analysis.md, "Engine startup phases"): one row per span an engine exported
-- while it started for a wake, nested as the spans nest. The lifecycle starts the engine with a
-- TRACEPARENT naming the `modelclaim.wake` span, so the engine's startup spans are in the wake's
-- trace. The rule that finds them, by trace and service, never by name:
--   * a span of the wake's trace from a service other than the wake span's own;
--   * top level (depth 0) when its parent is the wake span, or when its parent is in no stored
--     span of the trace (an orphan: the engine did not export it, or it was lost);
--   * nested under a top-level span as the parent ids say (depth 1, 2, ...);
--   * not a SERVER span and not an `llm_request` (an inference request that arrived without a
--     traceparent lands in this trace too), nor anything under one;
--   * a top-level span that starts at or after engine ready (else after the wake span's end, when
--     the engine never became ready) is serving, not startup, and neither it nor its spans count.
-- The start window runs from process start (`engine.wake_called`, else the wake span's start) to
-- engine ready. Top-level spans are clipped to it: clipped_s is a span's time inside it, adds_s
-- the part no earlier top-level span (by start) already covered, so the sum of adds_s over an
-- episode is the union the engine's spans cover and ready - process start - that sum is the time
-- outside every span (wake_episodes). Time a span lies outside the window cannot be startup work
-- on one clock: before_start_s / after_ready_s name it per span (clock skew, never hidden).
-- Two starts in one trace (a failed start retried under the same wake): the spans of each engine
-- process are told apart by their resource's service.instance.id (else the service name), and
-- start_index numbers the processes by their first span.
with recursive

wakes as (

    select
        trace_key,
        span_key,
        trace_id,
        span_id,
        service_name,
        model,
        wake_path,
        pod,
        -- process start: the engine spawned (cold start, move); else the wake began
        coalesce(wake_called_ns, start_ns) as process_start_ns,
        ready_ns,
        -- startup work starts before this: engine ready, else (never ready) the wake's end
        coalesce(ready_ns, end_ns) as window_end_ns

    from typed_model_wakes

),

spans as (

    -- every span of a wake's trace, with integer keys
    select
        rl_trace_key(otel_traces."TraceId") as trace_key,
        rl_span_key(otel_traces."SpanId") as span_key,
        rl_span_key(otel_traces."ParentSpanId") as parent_key,
        otel_traces."SpanId" as span_id,
        otel_traces."ParentSpanId" as parent_span_id,
        otel_traces."SpanName" as name,
        otel_traces."SpanKind" as kind,
        otel_traces."ServiceName" as service_name,
        coalesce(otel_traces."ResourceAttributes"['service.instance.id'], otel_traces."ServiceName") as engine_instance,
        -- Timestamp is the span start; Duration is end - start in nanoseconds
        epoch_ns(otel_traces."Timestamp") as start_ns,
        epoch_ns(otel_traces."Timestamp") + otel_traces."Duration"::bigint as end_ns

    from otel_traces
    -- by the stored text: a semi-join on the ids, with no key computed for the other spans
    where otel_traces."TraceId" in (select trace_id from wakes)

),

engine as (

    -- the spans of other services than the wake's, each with whether its parent is stored
    select
        wakes.span_key as wake_key,
        spans.*,
        coalesce(spans.parent_key = wakes.span_key, false) as under_wake,
        stored.span_key is not null as parent_stored,
        spans.kind = 'Server' or spans.name = 'llm_request' as inference,
        wakes.window_end_ns

    from spans
    inner join wakes
        on spans.trace_key = wakes.trace_key
        and spans.service_name != wakes.service_name
    left join (select distinct trace_key, span_key from spans) as stored
        on spans.trace_key = stored.trace_key
        and spans.parent_key = stored.span_key

),

tree as (

    select
        engine.wake_key,
        engine.trace_key,
        engine.span_key,
        engine.span_key as top_key,
        0 as depth

    from engine
    where (engine.under_wake or not engine.parent_stored)
        and not engine.inference
        and engine.start_ns < engine.window_end_ns

    union all

    select
        child.wake_key,
        child.trace_key,
        child.span_key,
        tree.top_key,
        tree.depth + 1

    from engine as child
    inner join tree
        on child.parent_key = tree.span_key
        and child.trace_key = tree.trace_key
        and child.wake_key = tree.wake_key
    where not child.inference
        -- a bound no real startup nears (vLLM's is 6): ids reused within a trace cannot loop it
        and tree.depth < 64

),

placed as (

    select
        wakes.trace_id,
        wakes.span_id as wake_span_id,
        wakes.model,
        wakes.wake_path,
        wakes.pod,
        wakes.process_start_ns,
        wakes.ready_ns,
        engine.span_id,
        engine.parent_span_id,
        engine.name,
        engine.service_name,
        engine.engine_instance,
        tree.depth,
        tree.depth = 0 and not engine.under_wake as orphan,
        engine.start_ns,
        engine.end_ns,
        engine.span_key,
        wakes.span_key as wake_key,
        -- a top-level span's part inside the start window (null for nested spans; ready
        -- unknown: up to the span's end)
        case when tree.depth = 0 then greatest(engine.start_ns, wakes.process_start_ns) end as clip_start_ns,
        case when tree.depth = 0 then least(engine.end_ns, coalesce(wakes.ready_ns, engine.end_ns)) end as clip_end_ns,
        -- the engine process of the span's top-level ancestor: its spans stay together
        top.engine_instance as top_instance

    from tree
    inner join wakes
        on tree.wake_key = wakes.span_key
        and tree.trace_key = wakes.trace_key
    inner join engine
        on tree.span_key = engine.span_key
        and tree.wake_key = engine.wake_key
    inner join engine as top
        on tree.top_key = top.span_key
        and tree.wake_key = top.wake_key

),

starts as (

    -- each engine process of a wake, numbered by its first span's start
    select
        wake_key,
        top_instance,
        row_number() over (partition by wake_key order by min(start_ns), top_instance) as start_index

    from placed
    group by wake_key, top_instance

),

covered as (

    select
        placed.*,
        starts.start_index,
        -- the furthest end of the top-level spans before this one (by start): what is covered already
        max(placed.clip_end_ns) over (
            partition by placed.wake_key, placed.depth = 0
            order by placed.clip_start_ns, placed.span_key
            rows between unbounded preceding and 1 preceding
        ) as covered_until_ns

    from placed
    inner join starts
        on placed.wake_key = starts.wake_key
        and placed.top_instance = starts.top_instance

),

final as (

    select
        trace_id,
        wake_span_id,
        model,
        wake_path,
        pod,
        engine_instance,
        start_index,
        span_id,
        -- empty for a span whose parent is the wake span or was never stored (orphan)
        case when depth > 0 then parent_span_id end as parent_span_id,
        name,
        service_name,
        depth,
        orphan,
        -- all durations (and offsets, from process start): nanosecond differences / 1e9 -> seconds
        (start_ns - process_start_ns) / 1e9 as start_s,
        (end_ns - process_start_ns) / 1e9 as end_s,
        (end_ns - start_ns) / 1e9 as duration_s,
        -- top-level spans only (greatest skips nulls, so nested rows are kept null explicitly)
        case when depth = 0 then greatest(clip_end_ns - clip_start_ns, 0) / 1e9 end as clipped_s,
        case when depth = 0 then
            greatest(clip_end_ns - greatest(clip_start_ns, coalesce(covered_until_ns, clip_start_ns)), 0) / 1e9
        end as adds_s,
        greatest(process_start_ns - start_ns, 0) / 1e9 as before_start_s,
        case when ready_ns is not null then greatest(end_ns - ready_ns, 0) / 1e9 end as after_ready_s

    from covered

)

select * from final
