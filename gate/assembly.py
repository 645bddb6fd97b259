"""The gate's sans-I/O parts, assembled once for every shell: the live app and both virtual runners.

A policy from the settings, the ``GateSpans`` that record its decisions, the ``Admission`` core
(whose restoration tracker judges each episode by the policy's restore budget from the start), and
the lifecycle router when the gate manages models. The live app (``app.py``) and the virtual-time
runners (``experiments/moflux/virtual.py``, ``experiments/modelclaim/virtual.py``) build their gate
here and differ only in the I/O around it, so an episode is judged the same way in either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from restorelens.clock import Clock

from .admission import Admission
from .gate_spans import GateSpans
from .grants import Grant, Waiter
from .policies.interface import AdmissionPolicy
from .retry_hint import RetryHint
from .routing import ModelRouter
from .settings import GateSettings

__all__ = ["GateAssembly", "assemble_gate", "lifecycle_router"]


@dataclass(eq=False)
class GateAssembly:
    """One gate's core: its admission, the spans it emits, and its lifecycle router (or None)."""

    settings: GateSettings
    admission: Admission
    spans: GateSpans
    router: ModelRouter | None = None

    @property
    def policy(self) -> AdmissionPolicy:
        return self.admission.policy

    def set_policy(self, policy: AdmissionPolicy, now_s: float) -> list[Grant]:
        """Swap the policy in force; its name and budget go on the spans from now on."""
        granted = self.admission.set_policy(policy, now_s)
        self.spans.policy_name = policy.name
        self.spans.restore_budget_s = policy.restore_budget_s
        return granted

    def close(self, now_s: float) -> None:
        """End of the gate's run: stop lending, and end the spans of the records still open."""
        self.admission.close(now_s)
        self.spans.flush(*self.admission.unfinished(), now_s)


def assemble_gate(
    settings: GateSettings,
    tracer_provider: Any,
    *,
    policy: AdmissionPolicy | None = None,
    router: ModelRouter | None = None,
    on_waiter_granted: Callable[[Waiter], None] | None = None,
    on_preempt: Callable[[Grant, Any], None] | None = None,
) -> GateAssembly:
    """The gate of ``settings`` (``policy``: one built from them and adjusted by the caller)."""
    policy = settings.build_policy() if policy is None else policy
    spans = GateSpans(tracer_provider, policy_name=policy.name, restore_budget_s=policy.restore_budget_s)
    admission = Admission(
        policy, wait_timeout_s=settings.wait_timeout_s, queue_limit=settings.queue_limit, retry_hint=RetryHint(),
        listeners=[spans], on_waiter_granted=on_waiter_granted, on_preempt=on_preempt,
        max_retained=settings.max_retained_episodes,
    )
    return GateAssembly(settings, admission, spans, router)


def lifecycle_router(settings: GateSettings, tracer_provider: Any, clock: Clock) -> ModelRouter | None:
    """The live lifecycle router of the settings' ``[modelclaim]`` table (None without one)."""
    if settings.modelclaim is None:
        return None
    from restorelens.gate.modelclaim import build_router

    return build_router(settings.modelclaim, tracer_provider=tracer_provider, clock=clock, admin_token=settings.admin_token)
