"""restorelens.loadgen: the client side — the retrying traced client, retry policies, workloads, the probe.

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
    "ExponentialBackoff": "retry",
    "FixedInterval": "retry",
    "HonourRetryAfter": "retry",
    "NO_HINT": "retry_after",
    "POLICY_NAMES": "retry",
    "Phase": "workloads",
    "ProbeReport": "probe",
    "RETRYABLE_STATUSES": "retry",
    "RequestResult": "request",
    "RequestShape": "workloads",
    "RequestSpan": "tracing",
    "RetryAfter": "retry_after",
    "RetryDecision": "retry",
    "RetryLoop": "request",
    "RetryPolicy": "retry",
    "RunLabels": "request",
    "Slo": "workloads",
    "TRACER_NAME": "tracing",
    "TracedClient": "client",
    "Workload": "workloads",
    "approx_tokens": "prompts",
    "decompose": "probe",
    "emit_attempt_span": "tracing",
    "end_attempt_span": "tracing",
    "filler_prompt": "prompts",
    "make_policy": "retry",
    "moflux_workload": "workloads",
    "parse_http_date": "retry_after",
    "parse_retry_after": "retry_after",
    "retry_after_of": "retry",
    "run_probe": "probe",
    "start_attempt_span": "tracing",
    "traces_endpoint": "cli",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
