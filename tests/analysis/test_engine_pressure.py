"""The engine's pressure beside its spans: scrapes of /metrics as one row each, and each episode
carrying the last scrape at or before its t0 of an engine serving its model."""

from __future__ import annotations

import polars as pl
from builders import Traces
from test_lending_episodes import returning_request

from restorelens.analysis import Analysis

RUNNING, WAITING, KV, PREEMPTIONS = ("vllm:num_requests_running", "vllm:num_requests_waiting",
                                     "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total")


def scrape(running: float, waiting: float, kv: float, preemptions: float = 0.0) -> dict[str, float]:
    return {RUNNING: running, WAITING: waiting, KV: kv, PREEMPTIONS: preemptions}


def lending(traces: Traces) -> None:
    link = returning_request(traces, t0=60.0, grant=61.0, engine_arrival=61.125, queue=3.5, ttft=3.75)
    traces.gate_restore(60.0, 64.5, link=link, borrowed_at_return=2, grant_restored_s=61.0, drained_s=64.5)


def test_each_scrape_is_one_row_with_the_metrics_side_by_side() -> None:
    traces = Traces()
    traces.engine_samples("http://e:8000/metrics", "tiny", [(1.0, scrape(1, 0, 0.25)), (1.25, scrape(1, 3, 0.5, 2))])
    rows = Analysis(traces.store()).engine_pressure()
    assert rows["waiting"].to_list() == [0.0, 3.0]
    assert rows["kv_cache_usage_fraction"].to_list() == [0.25, 0.5]
    assert rows["preemptions_total"].to_list() == [0.0, 2.0]
    assert rows["model_name"].to_list() == ["tiny", "tiny"]


def test_older_vllm_kv_gauge_is_read_as_the_same_usage() -> None:
    traces = Traces()
    traces.engine_samples("http://e:8000/metrics", "tiny", [(1.0, {"vllm:gpu_cache_usage_perc": 0.75})])
    assert Analysis(traces.store()).engine_pressure()["kv_cache_usage_fraction"].to_list() == [0.75]


def test_a_lending_episode_carries_the_last_scrape_before_its_t0() -> None:
    traces = Traces()
    lending(traces)
    traces.engine_samples("http://e:8000/metrics", "tiny", [
        (59.5, scrape(2, 1, 0.5)),
        (59.75, scrape(3, 4, 0.875)),   # the last one at or before t0 = 60.0
        (60.25, scrape(0, 0, 0.0)),     # after t0: not the pressure the request met
    ])
    episode = Analysis(traces.store()).lending_episodes().row(0, named=True)
    assert (episode["engine_running_at_t0"], episode["engine_waiting_at_t0"]) == (3.0, 4.0)
    assert episode["engine_kv_cache_usage_at_t0"] == 0.875
    assert episode["engine_pressure_age_s"] == 0.25
    assert episode["model"] == "tiny"


def test_another_models_engine_is_not_this_episodes_pressure() -> None:
    traces = Traces()
    lending(traces)
    traces.engine_samples("http://other:8000/metrics", "qwen", [(59.75, scrape(3, 4, 0.875))])
    episode = Analysis(traces.store()).lending_episodes().row(0, named=True)
    assert episode["engine_waiting_at_t0"] is None and episode["engine_pressure_age_s"] is None


def test_a_wake_episode_carries_its_models_pressure_too() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 12.0, first_chunk_s=11.0)
    first = traces.attempt(trace, client, 0.0, 0.125, status=503, retry_after_header="10", retry_after_s=10.0)
    gate = traces.gate_request(trace, first, 0.03125, 0.09375, status=503, decision="not_ready", retry_after_s=10.0)
    traces.model_wake(0.0625, 5.0, link=(trace, gate), ready_s=4.0, observed_s=4.5)
    traces.engine_samples("http://e:8000/metrics", "tiny", [(-0.5, scrape(0, 2, 0.0))])
    episode = Analysis(traces.store()).wake_episodes().row(0, named=True)
    assert (episode["engine_waiting_at_t0"], episode["engine_pressure_age_s"]) == (2.0, 0.5)


def test_a_store_written_before_engines_were_scraped_reads_as_no_samples() -> None:
    traces = Traces()
    lending(traces)
    con = traces.store()
    con.execute("drop table engine_metrics")
    analysis = Analysis(con)
    assert analysis.engine_pressure().is_empty()
    episode = analysis.lending_episodes().row(0, named=True)
    assert episode["drain_s"] == 4.5 and episode["engine_waiting_at_t0"] is None
    assert analysis.engine_pressure().schema["kv_cache_usage_fraction"] == pl.Float64


def test_engines_of_one_model_scraped_at_one_instant_are_one_answer_in_any_stored_order() -> None:
    # a data-parallel vLLM's one /metrics answer: engine "0" idle, engine "1" saturated
    results = set()
    for order in ((0, 1), (1, 0)):
        traces = Traces()
        lending(traces)
        con = traces.store()
        values = {0: (0.0, 0.0, 0.0), 1: (8.0, 50.0, 0.75)}
        for index in order:
            running, waiting, kv = values[index]
            for name, value in ((RUNNING, running), (WAITING, waiting), (KV, kv)):
                con.execute("insert into engine_metrics values (make_timestamp_ns($at), 'http://e/metrics', $name, "
                            "map(['model_name', 'engine'], ['tiny', $engine]), $value)",
                            {"at": 59_750_000_000 + traces_base(), "name": name, "engine": str(index), "value": value})
        episode = Analysis(con).lending_episodes().row(0, named=True)
        results.add((episode["engine_running_at_t0"], episode["engine_waiting_at_t0"],
                     episode["engine_kv_cache_usage_at_t0"]))
    # summed queues, the fullest KV cache: the same whatever order the rows were stored in
    assert results == {(8.0, 50.0, 0.75)}


def traces_base() -> int:
    from builders import BASE_NS

    return BASE_NS
