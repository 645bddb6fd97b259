"""What the lifecycle's decision modules read and change: one deployment's pods, memory and claims.

``ModelClaimCore`` owns one ``LifecycleState`` and hands it to ``reconcile``, ``room`` and
``engine_reports``; those modules see the deployment, never the core's public calls, so a decision
cannot re-enter the core (a tick inside a tick) and each module's inputs are visible in one type.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from opentelemetry.trace import SpanContext

from restorelens.gate.modelclaim.actions import LifecycleListener
from restorelens.gate.modelclaim.claim import ClaimState
from restorelens.gate.modelclaim.placement import ClaimSpec, MemoryLedger, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy

__all__ = ["LifecycleState"]


@dataclass(eq=False, slots=True)
class LifecycleState:
    pods: Mapping[str, Pod]
    policy: PoolPolicy
    ledger: MemoryLedger
    claims: Mapping[str, ClaimState]
    listeners: list[LifecycleListener]
    sleep_level: int
    restart_backoff_s: tuple[float, ...]
    wake_wait_limit_s: float
    #: Sleeps refused because the engine's weights would not fit in host RAM (a metric).
    host_ram_refusals: int = 0
    _instance_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def candidate_pods(self, spec: ClaimSpec) -> list[Pod]:
        if spec.pods is None:
            return list(self.pods.values())
        return [self.pods[name] for name in spec.pods if name in self.pods]

    def new_wake_context(self) -> SpanContext | None:
        """The identity a wake's span will take, from the first listener that mints one (the spans)."""
        for listener in self.listeners:
            if (mint := getattr(listener, "new_wake_context", None)) is not None and (context := mint()) is not None:
                return context
        return None

    def new_instance_id(self) -> int:
        """An id never given before, so a report about an earlier instance is recognisably stale."""
        return next(self._instance_ids)
