"""ModelClaim phases, Ready-condition reasons, and the gateway's 503 / Retry-After table.

Names follow AIBrix's ModelClaim CRD (``api/model/v1alpha1/modelclaim_types.go``): there is no ``Waking`` phase; a
wake shows as a reason. The table below is the newer AIBrix docs' "Requests" table (``docs/source/features/modelclaim.rst``):

========================================================================  ======================
model state                                                               answer
========================================================================  ======================
starting, asleep (a wake is triggered), restarting, waiting to be placed  503, Retry-After 10
waiting for room to wake, or room being made (WaitingForRoom)             503, Retry-After 20
moving to another pod (Moving)                                            503, Retry-After 30
InvalidEngineConfig / InvalidPerGPU / TooLargeForAnyCard                  503, no Retry-After
Failed (the restarts are spent)                                           503, no Retry-After
unknown model                                                             400 (``UnknownModel``)
========================================================================  ======================

One row differs from AIBrix: AIBrix answers ``Failed``/``EngineFailed`` with Retry-After 10 because
its controller moves a failed claim to another Pod by itself. This lifecycle does not: a Failed
claim stays Failed until an operator restarts it (``POST /modelclaim/models/M/restart``), so a
client told to retry shortly would retry in vain. Its 503 says why the engine failed instead.

``AnswerTable`` is the seam for how a not-ready model is answered: it maps (phase, reason) to a
``NotReady``. A future opt-in hold mode would sit in the router in front of it (wait for the model
to become routable within a budget, then fall back to this table), not change it.
"""

from __future__ import annotations

from dataclasses import dataclass

from restorelens.gate.routing import NotReady

__all__ = [
    "ACTIVE",
    "ACTIVATING",
    "AnswerTable",
    "CONFIGURATION_REASONS",
    "FAILED",
    "LOADING",
    "MODEL_CLAIM_ACTIVE",
    "PENDING",
    "PHASES",
    "REASON_ENGINE_FAILED",
    "REASON_ENGINE_SLEEPING",
    "REASON_ENGINE_STARTING",
    "REASON_INVALID_ENGINE_CONFIG",
    "REASON_INVALID_PER_GPU",
    "REASON_MOVING",
    "REASON_NOT_PLACED",
    "REASON_TOO_LARGE_FOR_ANY_CARD",
    "REASON_WAITING_FOR_ROOM",
    "SCHEDULING",
    "SLEEPING",
]

PENDING = "Pending"
SCHEDULING = "Scheduling"
LOADING = "Loading"
ACTIVATING = "Activating"
ACTIVE = "Active"
SLEEPING = "Sleeping"
FAILED = "Failed"
PHASES = (PENDING, SCHEDULING, LOADING, ACTIVATING, ACTIVE, SLEEPING, FAILED)

#: The Ready condition's reason when it is True.
MODEL_CLAIM_ACTIVE = "ModelClaimActive"
REASON_ENGINE_STARTING = "EngineStarting"
REASON_ENGINE_SLEEPING = "EngineSleeping"
REASON_WAITING_FOR_ROOM = "WaitingForRoom"
REASON_MOVING = "Moving"
REASON_ENGINE_FAILED = "EngineFailed"
REASON_INVALID_ENGINE_CONFIG = "InvalidEngineConfig"
REASON_INVALID_PER_GPU = "InvalidPerGPU"
REASON_TOO_LARGE_FOR_ANY_CARD = "TooLargeForAnyCard"
REASON_NOT_PLACED = "NotPlaced"

#: How much of an engine's failure a 503 quotes (the process backend's carries the end of its stderr).
_ERROR_SHOWN_CHARS = 300

#: Reasons that only a change of the declaration clears: retrying cannot help, so no Retry-After.
CONFIGURATION_REASONS = frozenset(
    {REASON_INVALID_ENGINE_CONFIG, REASON_INVALID_PER_GPU, REASON_TOO_LARGE_FOR_ANY_CARD}
)


@dataclass(frozen=True, slots=True)
class AnswerTable:
    """Retry-After seconds per row of the table; the defaults are AIBrix's documented values."""

    not_ready_s: int = 10
    waiting_for_room_s: int = 20
    moving_s: int = 30

    def retry_after_s(self, reason: str, phase: str = "") -> int | None:
        if reason in CONFIGURATION_REASONS or phase == FAILED:
            return None
        if reason == REASON_WAITING_FOR_ROOM:
            return self.waiting_for_room_s
        if reason == REASON_MOVING:
            return self.moving_s
        return self.not_ready_s

    def answer(self, model: str, phase: str, reason: str, *, error: str = "") -> NotReady:
        """The 503 for ``model``; ``error`` is the engine's last failure (said when it matters)."""
        retry_after_s = self.retry_after_s(reason, phase)
        error = " ".join(error.split())[:_ERROR_SHOWN_CHARS] or "no reason was reported"
        if phase == FAILED:
            message = (f"model {model} failed ({reason}): {error}; retrying will not help until it is restarted "
                       f"(POST /modelclaim/models/{model}/restart)")
        elif retry_after_s is None:
            message = f"model {model} is {phase.lower()} ({reason}); fix the declaration"
        elif reason == REASON_ENGINE_FAILED:
            message = f"model {model} is {phase.lower()} ({reason}): its engine failed ({error}) and restarts; retry shortly"
        else:
            message = f"model {model} is {phase.lower()} ({reason}); retry shortly"
        return NotReady(phase=phase, reason=reason, retry_after_s=retry_after_s, message=message)
