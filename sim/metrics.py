"""vLLM's Prometheus metrics for one simulated engine, in a registry of its own.

Names, label names (``model_name``, ``engine``) and histogram buckets follow vLLM's
``vllm/v1/metrics/loggers.py``; gauges are read from the core at scrape time.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from restorelens.sim.core import EngineCore
from restorelens.sim.records import RequestRecord

__all__ = ["EngineMetrics"]

_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
_REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
_SLEEP_STATES = {"resident": "awake", "offloaded": "weights_offloaded", "discarded": "discard_all"}


class EngineMetrics:
    """The metrics of one engine; ``observe_finished`` per finished request, ``render`` per scrape."""

    CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self, core: EngineCore, model_name: str, engine: str = "0") -> None:
        self.core = core
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"model_name": model_name, "engine": engine}
        names = list(labels)

        def gauge(name: str, doc: str, read: object) -> None:
            metric = Gauge(name, doc, names, registry=self.registry)
            metric.labels(**labels).set_function(read)  # type: ignore[arg-type]

        gauge("vllm:num_requests_running", "Number of requests in model execution batches.", lambda: core.num_running)
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", lambda: core.num_waiting)
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lambda: core.kv_cache_usage)
        sleep_state = Gauge(
            "vllm:engine_sleep_state", "Engine sleep state (1 for the current one).", [*names, "sleep_state"], registry=self.registry
        )
        for weights_state, label in _SLEEP_STATES.items():
            sleep_state.labels(**labels, sleep_state=label).set_function(
                lambda ws=weights_state: 1.0 if core.weights_state == ws else 0.0
            )

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*names, *extra], registry=self.registry)

        self._preemptions = counter("vllm:num_preemptions", "Cumulative number of preemptions.").labels(**labels)
        self._preemptions_seen = 0
        self._prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.").labels(**labels)
        self._generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens.").labels(**labels)
        self._success = counter("vllm:request_success", "Count of successfully processed requests.", ("finished_reason",))
        self._labels = labels
        self._success_by_reason: dict[str, Counter] = {}

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=self.registry)

        self._queue = histogram("vllm:request_queue_time_seconds", "Time spent in WAITING phase.", _REQUEST_LATENCY_BUCKETS)
        self._ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token.", _TTFT_BUCKETS)
        self._e2e = histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency.", _REQUEST_LATENCY_BUCKETS)
        self._inference = histogram(
            "vllm:request_inference_time_seconds", "Time spent in RUNNING phase.", _REQUEST_LATENCY_BUCKETS
        )
        self._prefill = histogram("vllm:request_prefill_time_seconds", "Time spent in PREFILL phase.", _REQUEST_LATENCY_BUCKETS)
        self._decode = histogram("vllm:request_decode_time_seconds", "Time spent in DECODE phase.", _REQUEST_LATENCY_BUCKETS)
        self._children = [h.labels(**labels) for h in (self._queue, self._ttft, self._e2e, self._inference, self._prefill, self._decode)]

    def observe_finished(self, record: RequestRecord) -> None:
        if record.finish_reason == "abort":
            return  # vLLM counts and times successful requests only
        queue, ttft, e2e, inference, prefill, decode = self._children
        queue.observe(record.queue_time_s)
        if record.ttft_s is not None:
            ttft.observe(record.ttft_s)
        e2e.observe(record.e2e_s)
        inference.observe(record.inference_time_s)
        prefill.observe(record.prefill_time_s)
        decode.observe(record.decode_time_s)
        self._prompt_tokens.inc(record.prompt_tokens)
        self._generation_tokens.inc(record.completion_tokens)
        success = self._success_by_reason.get(record.finish_reason)
        if success is None:  # labels() parses its arguments on every call: keep the child per reason
            success = self._success_by_reason[record.finish_reason] = self._success.labels(
                **self._labels, finished_reason=record.finish_reason
            )
        success.inc()

    def render(self) -> bytes:
        total = self.core.num_preemptions_total
        if total > self._preemptions_seen:
            self._preemptions.inc(total - self._preemptions_seen)
            self._preemptions_seen = total
        return generate_latest(self.registry)
