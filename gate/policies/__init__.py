"""restorelens.gate.policies: the admission policies, and the registry that names them and their options.

``interface`` holds what every policy shares (``AdmissionPolicy``, ``Occupancy``, ``RequestSize``);
each family has its module (``shared_cap``, ``floors``, ``budget`` with ``learning``,
``priority_lend``); ``registry`` declares every policy's name and options; ``build`` makes one.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "AdmissionPolicy": "interface",
    "BATCH": "interface",
    "BudgetLendPolicy": "budget",
    "CHARS_PER_TOKEN": "interface",
    "DEFAULTS": "registry",
    "DEFAULT_POLICY": "registry",
    "EngineRates": "learning",
    "FcfsPolicy": "shared_cap",
    "HoldOff": "learning",
    "INTERACTIVE": "interface",
    "LendPolicy": "floors",
    "LoanCheck": "budget",
    "OPTIONS": "registry",
    "Occupancy": "interface",
    "Option": "registry",
    "POLICIES": "registry",
    "POLICY_CLASSES": "build",
    "PolicySpec": "registry",
    "PreemptLendPolicy": "budget",
    "Preemption": "budget",
    "PriorityLendPolicy": "priority_lend",
    "PriorityPolicy": "shared_cap",
    "RequestSize": "interface",
    "Slot": "interface",
    "StaticPolicy": "floors",
    "VLLM_PRIORITY": "interface",
    "arm_names": "registry",
    "build_policy": "build",
    "check_option": "registry",
    "policy_named": "registry",
    "request_size": "interface",
    "request_size_of": "interface",
    "study_policies": "registry",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
