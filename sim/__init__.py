"""restorelens.sim: a vLLM-compatible engine simulator (see docs/sim.md).

The sans-I/O ``EngineCore`` (scheduler with KV blocks, latency model, sleep/wake lifecycle) runs
in virtual time or behind the live Starlette shell ``create_app``; both emit vLLM's ``llm_request``
span through ``emit_llm_request_span`` and its cold-start spans through ``emit_startup_spans``.

Names are imported lazily (PEP 562) so that ``restorelens --help`` and virtual-time runs do not
pay for Starlette and OpenTelemetry.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "ASLEEP_REQUEST_MODES": "config",
    "DEFAULT_MAX_BODY_BYTES": "app",
    "EngineConfig": "config",
    "EngineCore": "core",
    "EngineNotReadyError": "records",
    "EngineStateEvent": "records",
    "FinishedEvent": "records",
    "FirstTokenEvent": "records",
    "PRESETS": "config",
    "RequestRecord": "records",
    "RequestRejectedError": "records",
    "SCHEDULING_POLICIES": "config",
    "SLEEP_LEVELS": "lifecycle",
    "START_MODES": "app",
    "SimRequest": "records",
    "TokenEvent": "records",
    "WAKE_TAGS": "lifecycle",
    "create_app": "app",
    "emit_llm_request_span": "tracing",
    "emit_startup_spans": "tracing",
    "get_preset": "config",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
