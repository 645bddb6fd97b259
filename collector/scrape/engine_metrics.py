"""What ``engine_metrics`` keeps of a scrape: vLLM's pressure metrics, one row per sample."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence

import pyarrow as pa

from restorelens.collector.scrape.exposition import Sample

__all__ = ["ENGINE_METRICS_SCHEMA", "KEPT_METRICS", "kept_samples", "metrics_table"]

#: vLLM's engine pressure, as its /metrics names it (vllm/v1/metrics/loggers.py; prometheus_client
#: exposes the counter ``vllm:num_preemptions`` as ``..._total``). ``vllm:gpu_cache_usage_perc`` is
#: the older name of ``vllm:kv_cache_usage_perc``; each is stored under the name the engine used.
KEPT_METRICS = frozenset(
    {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
        "vllm:num_preemptions_total",
    }
)

ENGINE_METRICS_SCHEMA = pa.schema(
    [
        pa.field("Timestamp", pa.timestamp("ns"), nullable=False),
        pa.field("Target", pa.string(), nullable=False),
        pa.field("MetricName", pa.string(), nullable=False),
        pa.field("Labels", pa.map_(pa.string(), pa.string()), nullable=False),
        pa.field("Value", pa.float64(), nullable=False),
    ]
)


def kept_samples(samples: Iterable[Sample], keep: Collection[str] = KEPT_METRICS) -> list[Sample]:
    """The samples named in ``keep``; a series given twice in one exposition keeps its first
    sample (Prometheus refuses the second), and NaN is dropped (a value never measured)."""
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    kept: list[Sample] = []
    for sample in samples:
        if sample.name not in keep or math.isnan(sample.value):
            continue
        series = (sample.name, frozenset(sample.labels))
        if series not in seen:
            seen.add(series)
            kept.append(sample)
    return kept


def metrics_table(target: str, timestamp_ns: int, samples: Sequence[Sample]) -> pa.Table:
    """The ``engine_metrics`` rows of one scrape of ``target`` answered at ``timestamp_ns``."""
    return pa.table(
        [
            pa.array([timestamp_ns] * len(samples), pa.timestamp("ns")),
            pa.array([target] * len(samples), pa.string()),
            pa.array([s.name for s in samples], pa.string()),
            pa.array([list(s.labels) for s in samples], pa.map_(pa.string(), pa.string())),
            pa.array([s.value for s in samples], pa.float64()),
        ],
        schema=ENGINE_METRICS_SCHEMA,
    )
