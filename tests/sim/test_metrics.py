from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from restorelens.collector.scrape import kept_samples, parse_exposition
from restorelens.sim import EngineConfig, EngineCore, FinishedEvent, SimRequest
from restorelens.sim.metrics import EngineMetrics


def scrape(metrics: EngineMetrics) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(metrics.render().decode())
        for sample in family.samples
        if not sample.name.endswith("_bucket") and "sleep_state" not in sample.labels
    }


def test_preemptions_queue_and_kv_gauges_are_reported() -> None:
    # Two 8-token prompts fill 4 of 5 blocks; the first decode preempts one of them.
    core = EngineCore(EngineConfig(max_num_seqs=4, num_blocks=5, block_size=4, max_model_len=20))
    metrics = EngineMetrics(core, "m")
    core.add_request(SimRequest("a", 8, 3), 0.0)
    core.add_request(SimRequest("b", 8, 3), 0.0)
    core.advance_to(0.0)
    assert scrape(metrics)["vllm:kv_cache_usage_perc"] == 4 / 5
    assert scrape(metrics)["vllm:num_requests_running"] == 2
    while (t := core.next_event_s()) is not None:
        for event in core.advance_to(t):
            if isinstance(event, FinishedEvent):
                metrics.observe_finished(event.record)
    values = scrape(metrics)
    assert values["vllm:num_preemptions_total"] == 1
    assert values["vllm:request_queue_time_seconds_count"] == 2
    assert values["vllm:generation_tokens_total"] == 6
    assert values["vllm:num_requests_running"] == 0 and values["vllm:kv_cache_usage_perc"] == 0


def test_sleep_state_gauge_follows_the_weights() -> None:
    core = EngineCore(EngineConfig())
    metrics = EngineMetrics(core, "m")

    def state() -> str:
        families = text_string_to_metric_families(metrics.render().decode())
        family = next(f for f in families if f.name == "vllm:engine_sleep_state")
        return next(s.labels["sleep_state"] for s in family.samples if s.value == 1)

    assert state() == "awake"
    core.sleep(1, 0.0)
    assert state() == "weights_offloaded"
    core.advance_to(10.0)
    core.sleep(2, 10.0)
    assert state() == "discard_all"


REAL_VLLM_METRICS = Path(__file__).parents[1] / "collector" / "data" / "vllm-0.32.0-cpu-metrics.txt"


def test_the_collectors_scraper_reads_every_kept_metric_from_the_sim_under_real_vllms_names() -> None:
    core = EngineCore(EngineConfig(max_num_seqs=1, num_blocks=5, block_size=4, max_model_len=20))
    metrics = EngineMetrics(core, "tiny")
    core.add_request(SimRequest("a", 8, 3), 0.0)
    core.add_request(SimRequest("b", 8, 3), 0.0)
    core.advance_to(0.0)
    exposed = parse_exposition(metrics.render().decode())
    kept = {s.name: (dict(s.labels), s.value) for s in kept_samples(exposed)}
    assert kept == {
        "vllm:num_requests_running": ({"model_name": "tiny", "engine": "0"}, 1.0),
        "vllm:num_requests_waiting": ({"model_name": "tiny", "engine": "0"}, 1.0),
        "vllm:kv_cache_usage_perc": ({"model_name": "tiny", "engine": "0"}, 2 / 5),  # the 8-token prompt
        "vllm:num_preemptions_total": ({"model_name": "tiny", "engine": "0"}, 0.0),
    }
    # every vllm: series the sim exposes is one real vLLM 0.32 exposes, with the same label names
    real = {(s.name, frozenset(k for k, _ in s.labels)) for s in parse_exposition(REAL_VLLM_METRICS.read_text())}
    sim = {(s.name, frozenset(k for k, _ in s.labels)) for s in exposed if s.name.startswith("vllm:")}
    assert sim <= real
