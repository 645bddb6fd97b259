"""restorelens.gate: the admission gate (the lending story of docs/design.md) and the ModelRouter seam.

The sans-I/O core (``Admission`` + an ``AdmissionPolicy``) runs live behind ``create_gate_app`` or
in virtual time; ``GateSpans`` emits the gate's spans with explicit timestamps either way.

Names are imported lazily (PEP 562) so that ``restorelens --help`` does not pay for Starlette,
httpx and prometheus.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Admission": "admission",
    "AdmissionPolicy": "policies",
    "BATCH": "policies",
    "Decision": "admission",
    "FcfsPolicy": "policies",
    "GateSettings": "settings",
    "GateSpans": "gate_spans",
    "Grant": "admission",
    "GrantError": "admission",
    "INTERACTIVE": "policies",
    "LendPolicy": "policies",
    "LendingPeriod": "restoration",
    "Occupancy": "policies",
    "POLICIES": "policies",
    "PriorityPolicy": "policies",
    "Rejection": "admission",
    "RestorationEpisode": "restoration",
    "RestorationListener": "restoration",
    "RestorationTracker": "restoration",
    "RetryHint": "retry_hint",
    "StaticPolicy": "policies",
    "Waiter": "admission",
    "build_policy": "policies",
    "create_gate_app": "app",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
