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
    "AdmissionPolicy": "policies.interface",
    "Admit": "decision",
    "ClientFacts": "client_identity",
    "BATCH": "policies.interface",
    "DEFAULTS": "policies.registry",
    "DEFAULT_POLICY": "policies.registry",
    "Decision": "grants",
    "FcfsPolicy": "policies.shared_cap",
    "Forward": "decision",
    "GateAssembly": "assembly",
    "GateSettings": "settings",
    "GateSpans": "gate_spans",
    "Grant": "grants",
    "GrantError": "grants",
    "Hold": "decision",
    "INTERACTIVE": "policies.interface",
    "LendPolicy": "policies.floors",
    "LendingPeriod": "restoration",
    "NotReady": "routing",
    "OPTIONS": "policies.registry",
    "Occupancy": "policies.interface",
    "POLICIES": "policies.registry",
    "PriorityPolicy": "policies.shared_cap",
    "Rejection": "grants",
    "RequestSize": "policies.interface",
    "Respond": "decision",
    "RestorationEpisode": "restoration",
    "RestorationListener": "restoration",
    "RestorationTracker": "restoration",
    "RetryHint": "retry_hint",
    "Routed": "routing",
    "StaticPolicy": "policies.floors",
    "VLLM_PRIORITY": "policies.interface",
    "Waiter": "grants",
    "arm_names": "policies.registry",
    "assemble_gate": "assembly",
    "build_policy": "policies.build",
    "client_facts": "client_identity",
    "check_option": "policies.registry",
    "create_gate_app": "app",
    "decide": "decision",
    "named_in_prose": "policies.registry",
    "policy_named": "policies.registry",
    "preempted": "decision",
    "request_size": "policies.interface",
    "study_policies": "policies.registry",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
