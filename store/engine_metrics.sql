-- Engine pressure beside the spans: samples of an engine's Prometheus /metrics scraped by
-- `restorelens collect --scrape URL` (collector/scrape/; docs/collector.md, "Engine metrics").
-- One row per sample kept; no key (two scrapes may share a timestamp on a coarse clock).
create table if not exists engine_metrics (
    "Timestamp" timestamp_ns not null,   -- when the scrape's answer arrived, UTC wall clock (time.time_ns(), the spans' clock)
    "Target" varchar not null,           -- the scraped URL as given to --scrape
    "MetricName" varchar not null,       -- e.g. 'vllm:kv_cache_usage_perc'
    "Labels" map(varchar, varchar) not null,
    "Value" double not null
);
