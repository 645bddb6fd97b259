"""restorelens.gate.modelclaim: the ModelClaim lifecycle driver behind the gate (docs/modelclaim.md).

AIBrix's ModelClaim semantics over engines with vLLM's sleep mode: ``ModelClaimCore`` is the
sans-I/O state machine (placement, wake paths, idle sleep, restarts); ``ModelClaimRouter`` runs it
live behind the gate's ``ModelRouter`` seam, ``VirtualLifecycle`` in virtual time; the backends do
the engine I/O. Names are imported lazily (PEP 562) so that ``restorelens gate --help`` does not
pay for httpx and the OpenTelemetry SDK.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Action": "actions",
    "BackendByModel": "backends",
    "ClaimControlError": "core",
    "ClaimSpec": "placement",
    "DeclaredDurations": "estimates",
    "DurationPrior": "estimates",
    "EngineAnswer": "backends",
    "EngineBackend": "backends",
    "EngineCommand": "process_backend",
    "EngineOperationError": "vllm_backend",
    "FixedLatencyEngine": "backends",
    "HINT_MARGIN_S": "hints",
    "InProcessBackend": "backends",
    "LifecycleListener": "actions",
    "MIN_HINT_S": "hints",
    "ModelClaimCore": "core",
    "ModelClaimMetrics": "metrics",
    "ModelClaimRouter": "router",
    "ModelClaimSpans": "spans",
    "Pod": "placement",
    "PollSchedule": "polls",
    "PoolPolicy": "policy",
    "ProcessBackend": "process_backend",
    "SleepEngine": "actions",
    "StartEngine": "actions",
    "StateInterval": "actions",
    "StopEngine": "actions",
    "VirtualLifecycle": "virtual",
    "VllmSleepBackend": "vllm_backend",
    "WakeEnds": "actions",
    "WakeEngine": "actions",
    "WakeEstimates": "estimates",
    "WakeRecord": "actions",
    "build_core": "config",
    "build_router": "config",
    "check_table": "config",
    "load_calibration": "config",
    "poll_health": "vllm_backend",
    "read_wakes": "calibration_file",
    "seed_calibration": "calibration_file",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
