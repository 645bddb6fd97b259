"""restorelens.experiments: scenarios composed of the gate, the engine and the client, played live or in virtual time.

The one package that composes the others: a scenario (a workload, the gate's policy, the engine's
shape; or a ModelClaim deployment and its wake) runs in virtual time on one event loop
(``run_virtual``: the same sans-I/O cores the servers run) or live on loopback, time-scaled
(``run_live``: the real servers), and both emit the same spans. ``record`` writes the sample traces;
``run_demo`` is ``restorelens demo``. Names are imported lazily (PEP 562) so that ``restorelens
--help`` does not pay for the cores and the OpenTelemetry SDK.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "EventLoop": "event_loop",
    "ExpectedWake": "modelclaim.scenarios",
    "MODELCLAIM_SCENARIOS": "modelclaim.scenarios",
    "ModelClaimScenario": "modelclaim.scenarios",
    "MofluxScenario": "moflux.scenarios",
    "ProtocolTimeline": "protocol_time",
    "RescaledExporter": "protocol_time",
    "RunReport": "run_report",
    "RunTelemetry": "run_telemetry",
    "SCENARIOS": "moflux.scenarios",
    "ServiceProviders": "providers",
    "SetupDirector": "modelclaim.deployment",
    "TimeSource": "event_loop",
    "VIRTUAL_UPSTREAM_URL": "moflux.virtual",
    "VirtualModelClaimRun": "modelclaim.virtual",
    "VirtualMofluxRun": "moflux.virtual",
    "WAKE_PHASE": "modelclaim.scenarios",
    "WAKE_WORKLOAD": "modelclaim.scenarios",
    "deployment_table": "modelclaim.deployment",
    "expected_wake": "modelclaim.scenarios",
    "get_modelclaim_scenario": "modelclaim.scenarios",
    "get_scenario": "catalog",
    "run_demo": "demo",
    "run_live": "runner",
    "run_virtual": "runner",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
