"""restorelens.sim: a vLLM-compatible engine simulator (see docs/sim.md).

The sans-I/O ``EngineCore`` (scheduler with KV blocks, latency model, sleep/wake lifecycle) runs
in virtual time or behind the live Starlette shell ``create_app``; both emit vLLM's ``llm_request``
span through ``emit_llm_request_span``.
"""

from restorelens.sim.config import PRESETS, SCHEDULING_POLICIES, EngineConfig, get_preset
from restorelens.sim.core import EngineCore
from restorelens.sim.lifecycle import SLEEP_LEVELS, WAKE_TAGS
from restorelens.sim.records import (
    EngineNotReadyError,
    EngineStateEvent,
    FinishedEvent,
    FirstTokenEvent,
    RequestRecord,
    RequestRejectedError,
    SimRequest,
    TokenEvent,
)

# The live shell and span helper pull in Starlette and OpenTelemetry; load them on first use so that
# `restorelens --help` (which imports restorelens.sim.cli) and virtual-time runs stay light.
_LAZY = {
    "DEFAULT_MAX_BODY_BYTES": "restorelens.sim.app",
    "START_MODES": "restorelens.sim.app",
    "create_app": "restorelens.sim.app",
    "emit_llm_request_span": "restorelens.sim.tracing",
}


def __getattr__(name: str) -> object:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'restorelens.sim' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module_name), name)


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "EngineConfig",
    "EngineCore",
    "EngineNotReadyError",
    "EngineStateEvent",
    "FinishedEvent",
    "FirstTokenEvent",
    "PRESETS",
    "RequestRecord",
    "RequestRejectedError",
    "SCHEDULING_POLICIES",
    "SLEEP_LEVELS",
    "START_MODES",
    "SimRequest",
    "TokenEvent",
    "WAKE_TAGS",
    "create_app",
    "emit_llm_request_span",
    "get_preset",
]
