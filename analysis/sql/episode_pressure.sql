-- Episode pressure: the engine's pressure when an episode began, one row per model and t0 of any
-- lending (lending_returns) or wake (wake_triggers) episode: the last scrape at or before t0 of
-- the engines serving that model (model_pressure: that scrape's engines together), and when that
-- scrape was taken; null when none was. Episodes join it on their model and t0.
with

starts as (

    select model, t0_ns from lending_returns
    union
    select model, t0_ns from wake_triggers

),

pressure as (

    select * from model_pressure

),

final as (

    select
        starts.model,
        starts.t0_ns,
        pressure.at_ns as pressure_ns,
        pressure.running as engine_running_at_t0,
        pressure.waiting as engine_waiting_at_t0,
        pressure.kv_cache_usage_fraction as engine_kv_cache_usage_at_t0

    from starts
    asof left join pressure
        on starts.model = pressure.model_name
        and starts.t0_ns >= pressure.at_ns

)

select * from final
