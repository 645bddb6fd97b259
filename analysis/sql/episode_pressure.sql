-- Episode pressure: the engine's pressure as a lending or wake episode reads it at its t0, one row
-- per model and scrape instant (model_pressure: that instant's engines together), named as the
-- episode views name it. Each episode takes the last row at or before its t0 for its model (an
-- asof join on model_name and pressure_ns), so one instant is always one answer.
with

pressure as (

    select * from model_pressure

),

final as (

    select
        model_name,
        at_ns as pressure_ns,
        running as engine_running_at_t0,
        waiting as engine_waiting_at_t0,
        kv_cache_usage_fraction as engine_kv_cache_usage_at_t0

    from pressure

)

select * from final
