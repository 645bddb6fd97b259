-- Engine pressure: one row per scrape of an engine's Prometheus /metrics by
-- `restorelens collect --scrape` (table engine_metrics), with vLLM's kept metrics side by side:
-- requests running and waiting, KV-cache usage, the preemption counter. A sample's instant is the
-- collector's wall clock when the answer arrived, the clock the spans are stamped with.
with

samples as (

    select * from engine_metrics

),

typed as (

    select
        -- Timestamp is timestamp_ns: its epoch nanoseconds, like every instant of the span layers
        epoch_ns("Timestamp") as at_ns,
        "Target" as target,
        "Labels"['model_name'] as model_name,
        "Labels"['engine'] as engine_index,
        "MetricName" as metric_name,
        "Value" as value

    from samples

),

final as (

    select
        make_timestamp_ns(at_ns) as at,
        at_ns,
        target,
        model_name,
        engine_index,
        max(value) filter (where metric_name = 'vllm:num_requests_running') as running,
        max(value) filter (where metric_name = 'vllm:num_requests_waiting') as waiting,
        -- a fraction, 1 = full; older vLLM names the same gauge gpu_cache_usage_perc
        max(value) filter (
            where metric_name in ('vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc')
        ) as kv_cache_usage_fraction,
        max(value) filter (where metric_name = 'vllm:num_preemptions_total') as preemptions_total

    from typed
    group by at_ns, target, model_name, engine_index

)

select * from final
