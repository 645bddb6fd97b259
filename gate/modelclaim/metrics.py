"""Prometheus metrics for the lifecycle, collected from the core on each scrape.

=====================================================  =========================================
metric                                                  meaning
=====================================================  =========================================
``restorelens_modelclaim_phase{model,phase,reason}``    1 for the model's current phase and reason
``restorelens_modelclaim_wakes_total{model,path,outcome}``  wakes (starts, moves) by path and outcome
``restorelens_modelclaim_wake_duration_seconds{path}``  first wanted -> readiness observed (ready wakes)
``restorelens_modelclaim_wake_observe_lag_seconds``     engine ready -> readiness observed
``restorelens_modelclaim_wake_ready_seconds{model,path}``  the first 503 -> engine ready (wakes a request asked for)
``restorelens_modelclaim_ready_to_first_request_seconds{model,path}``  engine ready -> first request
                                                        routed to it (clients overshooting their hint)
``restorelens_modelclaim_gpu_memory_bytes{pod,gpu,kind}``  ``capacity`` and ``accounted`` per GPU
``restorelens_modelclaim_host_memory_bytes{node,kind}`` ``accounted`` (level-1 sleep weights), ``limit``
``restorelens_modelclaim_host_ram_refusals_total``      level-1 sleeps refused by the host-RAM limit
=====================================================  =========================================
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from prometheus_client import Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from restorelens.gate.modelclaim.actions import ServedAfterWake, StateInterval, WakeRecord
from restorelens.gate.modelclaim.core import ModelClaimCore

__all__ = ["OVERSHOOT_BUCKETS_S", "WAKE_DURATION_BUCKETS_S", "ModelClaimMetrics"]

WAKE_DURATION_BUCKETS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
#: Fine at the bottom, where calibrated hints and holds land, up to the fixed table's 30 s.
OVERSHOOT_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0)


class ModelClaimMetrics(Collector):
    """A lifecycle listener and a prometheus collector; ``register(registry)`` adds it."""

    def __init__(self, core: ModelClaimCore, lock: threading.Lock | None = None) -> None:
        self.core = core
        self._lock: AbstractContextManager[Any] = lock if lock is not None else nullcontext()
        # Not registered anywhere: this collector yields their samples itself.
        self.wakes = Counter(
            "restorelens_modelclaim_wakes", "Wakes, starts and moves by path and outcome",
            ["model", "path", "outcome"], registry=None,
        )
        self.wake_duration = Histogram(
            "restorelens_modelclaim_wake_duration_seconds", "Wake wanted -> readiness observed, by path",
            ["path"], buckets=WAKE_DURATION_BUCKETS_S, registry=None,
        )
        self.observe_lag = Histogram(
            "restorelens_modelclaim_wake_observe_lag_seconds", "Engine ready -> readiness observed",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0), registry=None,
        )
        self.wake_ready = Histogram(
            "restorelens_modelclaim_wake_ready_seconds", "Wake wanted (first 503) -> engine ready, by model and path",
            ["model", "path"], buckets=WAKE_DURATION_BUCKETS_S, registry=None,
        )
        self.ready_to_first_request = Histogram(
            "restorelens_modelclaim_ready_to_first_request_seconds",
            "Engine ready -> the first request routed to it, by model and path",
            ["model", "path"], buckets=OVERSHOOT_BUCKETS_S, registry=None,
        )

    def register(self, registry: Any) -> None:
        registry.register(self)

    def on_state_interval(self, interval: StateInterval) -> None:
        pass

    def on_wake_finished(self, record: WakeRecord) -> None:
        self.wakes.labels(record.model, record.path, record.outcome).inc()
        if record.outcome == "ready" and record.observed_s is not None:
            self.wake_duration.labels(record.path).observe(record.observed_s - record.requested_s)
            if record.ready_s is not None:
                self.observe_lag.observe(max(0.0, record.observed_s - record.ready_s))
                if record.triggers:  # a wake a request asked for: from its first 503
                    self.wake_ready.labels(record.model, record.path).observe(
                        max(0.0, record.ready_s - record.requested_s))

    def on_served_after_wake(self, served: ServedAfterWake) -> None:
        self.ready_to_first_request.labels(served.model, served.path).observe(max(0.0, served.routed_s - served.ready_s))

    def collect(self) -> Iterator[Metric]:
        phase = GaugeMetricFamily(
            "restorelens_modelclaim_phase", "1 for each model's current phase and reason", labels=["model", "phase", "reason"]
        )
        gpu = GaugeMetricFamily(
            "restorelens_modelclaim_gpu_memory_bytes", "GPU memory per device: capacity and accounted by claims",
            labels=["pod", "gpu", "kind"],
        )
        host = GaugeMetricFamily(
            "restorelens_modelclaim_host_memory_bytes", "Host RAM per node holding level-1 sleeping weights, and its limit",
            labels=["node", "kind"],
        )
        with self._lock:
            for model in self.core.models():
                status = self.core.status(model)
                phase.add_metric([model, status.phase, status.reason], 1.0)
            ledger = self.core.ledger
            for slot in ledger.gpu_slots():
                gpu.add_metric([slot.pod, str(slot.index), "capacity"], float(ledger.capacity_bytes(slot)))
                gpu.add_metric([slot.pod, str(slot.index), "accounted"], float(ledger.charged_bytes(slot)))
            for node in ledger.nodes():
                host.add_metric([node, "accounted"], float(ledger.host_bytes(node)))
                limit = ledger.host_ram_limit_bytes.get(node)
                if limit is not None:
                    host.add_metric([node, "limit"], float(limit))
            refusals = self.core.host_ram_refusals
        refused = CounterMetricFamily(
            "restorelens_modelclaim_host_ram_refusals", "Level-1 sleeps refused by the host-RAM limit"
        )
        refused.add_metric([], float(refusals))
        yield phase
        yield gpu
        yield host
        yield refused
        yield from self.wakes.collect()
        yield from self.wake_duration.collect()
        yield from self.observe_lag.collect()
        yield from self.wake_ready.collect()
        yield from self.ready_to_first_request.collect()
