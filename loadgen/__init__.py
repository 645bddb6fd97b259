"""restorelens.loadgen: the retrying traced client, workloads, scenarios, the runner and the probe.

Names are imported lazily (PEP 562) so that ``restorelens --help`` does not pay for httpx and the
OpenTelemetry SDK; ``from restorelens.loadgen import X`` works for every name in ``__all__``.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Arrival": "workloads",
    "AttemptRecord": "request",
    "ClientRequest": "request",
    "CountingExporter": "export_failures",
    "EngineShape": "workloads",
    "EventLoop": "event_loop",
    "ExpectedWake": "modelclaim_scenarios",
    "ExponentialBackoff": "retry",
    "FixedInterval": "retry",
    "HonourRetryAfter": "retry",
    "MODELCLAIM_SCENARIOS": "modelclaim_scenarios",
    "ModelClaimScenario": "modelclaim_scenarios",
    "MofluxScenario": "scenarios",
    "POLICY_NAMES": "retry",
    "Phase": "workloads",
    "ProbeReport": "probe",
    "ProtocolTimeline": "protocol_time",
    "RETRYABLE_STATUSES": "retry",
    "RequestResult": "request",
    "RequestShape": "workloads",
    "RequestSpan": "tracing",
    "RescaledExporter": "protocol_time",
    "RetryAfter": "retry_after",
    "RetryDecision": "retry",
    "RetryLoop": "request",
    "RetryPolicy": "retry",
    "RunLabels": "request",
    "RunReport": "runner",
    "RunTelemetry": "runner",
    "SCENARIOS": "scenarios",
    "ScaledClock": "timebase",
    "ServiceProviders": "virtual_moflux",
    "SetupDirector": "modelclaim_deployment",
    "Slo": "workloads",
    "TimeSource": "event_loop",
    "TracedClient": "client",
    "VirtualModelClaimRun": "virtual_modelclaim",
    "VirtualMofluxRun": "virtual_moflux",
    "WAKE_PHASE": "modelclaim_scenarios",
    "WAKE_WORKLOAD": "modelclaim_scenarios",
    "Workload": "workloads",
    "approx_tokens": "prompts",
    "decompose": "probe",
    "deployment_table": "modelclaim_deployment",
    "emit_attempt_span": "tracing",
    "end_attempt_span": "tracing",
    "expected_wake": "modelclaim_scenarios",
    "filler_prompt": "prompts",
    "get_modelclaim_scenario": "modelclaim_scenarios",
    "get_scenario": "scenarios",
    "make_policy": "retry",
    "moflux_workload": "workloads",
    "parse_http_date": "retry_after",
    "parse_retry_after": "retry_after",
    "retry_after_of": "retry",
    "run_live": "runner",
    "run_probe": "probe",
    "run_virtual": "runner",
    "start_attempt_span": "tracing",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
