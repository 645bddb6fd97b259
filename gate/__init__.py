"""restorelens.gate: the admission gate (the lending story of docs/design.md) and the ModelRouter seam.

The sans-I/O core (``Admission`` + an ``AdmissionPolicy``) runs live behind ``create_gate_app`` or
in virtual time; ``GateSpans`` emits the gate's spans with explicit timestamps either way.
"""

from .admission import Admission, Decision, Grant, GrantError, Rejection, Waiter
from .gate_spans import GateSpans
from .policies import (
    BATCH,
    INTERACTIVE,
    POLICIES,
    AdmissionPolicy,
    FcfsPolicy,
    LendPolicy,
    Occupancy,
    PriorityPolicy,
    StaticPolicy,
    build_policy,
)
from .restoration import LendingPeriod, RestorationEpisode, RestorationListener, RestorationTracker
from .retry_hint import RetryHint
from .settings import GateSettings


def __getattr__(name: str) -> object:
    # The app pulls in Starlette, httpx and prometheus: imported on first use so that
    # `restorelens --help` (which imports restorelens.gate.cli) stays fast.
    if name == "create_gate_app":
        from .app import create_gate_app

        return create_gate_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Admission",
    "AdmissionPolicy",
    "BATCH",
    "Decision",
    "FcfsPolicy",
    "GateSettings",
    "GateSpans",
    "Grant",
    "GrantError",
    "INTERACTIVE",
    "LendPolicy",
    "LendingPeriod",
    "Occupancy",
    "POLICIES",
    "PriorityPolicy",
    "Rejection",
    "RestorationEpisode",
    "RestorationListener",
    "RestorationTracker",
    "RetryHint",
    "StaticPolicy",
    "Waiter",
    "build_policy",
    "create_gate_app",
]
