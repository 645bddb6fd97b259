-- Model pressure: one row per model and scrape instant, the engines of that model sampled at
-- that instant taken together (a data-parallel vLLM's one /metrics answer holds every engine:
-- `engine` "0", "1", ...): requests running and waiting summed, KV-cache usage the highest of
-- them (the returning request's own engine is not known; the fullest bounds what it met).
-- Episodes read the last row at or before their t0, so one instant is always one answer,
-- whatever order the samples were stored in.
with

pressure as (

    select * from engine_pressure

),

final as (

    select
        model_name,
        at_ns,
        count(*) as engines,
        sum(running) as running,
        sum(waiting) as waiting,
        max(kv_cache_usage_fraction) as kv_cache_usage_fraction

    from pressure
    where model_name is not null
    group by model_name, at_ns

)

select * from final
