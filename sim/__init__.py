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

__all__ = [
    "PRESETS",
    "SCHEDULING_POLICIES",
    "SLEEP_LEVELS",
    "WAKE_TAGS",
    "EngineConfig",
    "EngineCore",
    "EngineNotReadyError",
    "EngineStateEvent",
    "FinishedEvent",
    "FirstTokenEvent",
    "RequestRecord",
    "RequestRejectedError",
    "SimRequest",
    "TokenEvent",
    "get_preset",
]
