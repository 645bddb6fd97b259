"""The overshoot histograms: wake wanted -> engine ready, and engine ready -> first routed request."""

from __future__ import annotations

from opentelemetry.trace import SpanContext, TraceFlags
from prometheus_client import CollectorRegistry

from restorelens.gate.modelclaim.backends import FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.metrics import ModelClaimMetrics
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy
from restorelens.gate.modelclaim.virtual import VirtualLifecycle
from restorelens.gate.routing import NotReady, Routed

GIB = 2**30
REQUEST = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def test_wake_and_first_request_histograms_per_model_and_path() -> None:
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=GIB)],
                          PoolPolicy(sleep_after_s=3600))
    metrics = ModelClaimMetrics(core)
    core.listeners.append(metrics)
    registry = CollectorRegistry()
    metrics.register(registry)
    life = VirtualLifecycle(core, InProcessBackend(lambda m, p: FixedLatencyEngine(cold_start_s=30.0, wake_s=4.0)))
    life.start(0.0)
    life.advance_to(30.0)
    assert isinstance(life.route("m", 31.0), Routed)  # the start's first request (no 503 asked for it)
    life.sleep("m", 100.0)
    life.advance_to(110.0)
    assert isinstance(life.route("m", 200.0, trigger=REQUEST), NotReady)  # wants the wake; ready at 204
    life.advance_to(204.0)
    assert isinstance(life.route("m", 210.0), Routed)  # the client came back 6 s after ready
    assert isinstance(life.route("m", 211.0), Routed)  # not the first any more: not counted

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    wake = {"model": "m", "path": "in-place"}
    assert sample("restorelens_modelclaim_wake_ready_seconds_count", **wake) == 1.0
    assert sample("restorelens_modelclaim_wake_ready_seconds_sum", **wake) == 4.0
    assert sample("restorelens_modelclaim_ready_to_first_request_seconds_count", **wake) == 1.0
    assert sample("restorelens_modelclaim_ready_to_first_request_seconds_sum", **wake) == 6.0
    assert sample("restorelens_modelclaim_ready_to_first_request_seconds_bucket", **wake, le="5.0") == 0.0
    assert sample("restorelens_modelclaim_ready_to_first_request_seconds_bucket", **wake, le="10.0") == 1.0
    # The start at 0 s was no request's wake: the gate's own start-up is not a client's overshoot.
    start = {"model": "m", "path": "cold-start"}
    assert sample("restorelens_modelclaim_ready_to_first_request_seconds_count", **start) is None
    assert sample("restorelens_modelclaim_wake_ready_seconds_count", **start) is None
