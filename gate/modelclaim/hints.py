"""How the gateway answers a request for a model that cannot serve yet: the hint, and whether to hold.

Sans-I/O. ``RetryHints.answer`` turns a claim's state into the ``NotReady`` the gate sends:

- ``fixed`` (the default, AIBrix's behaviour): the fixed table (``phases.AnswerTable``), whole
  seconds in ``Retry-After``; source ``fixed``.
- ``calibrated``: the predicted remaining time of *this* wake — what ``WakeCalibration`` learnt for
  the model and the wake path in progress, minus the time that path has already run, plus
  ``HINT_MARGIN_S`` — in ``x-restorelens-retry-after-ms`` and, rounded up to whole seconds as RFC
  9110 requires, in ``Retry-After``; source ``calibrated``. Until a wake of that model and path was
  seen, or when the path is not known yet (a wake still waiting for room, a restart after a
  failure), the fixed table is the prior; source ``prior``.
- ``hold_s``: a request may be held while the engine wakes instead of answered 503, for up to
  ``hold_s``, when the hint says the model will serve within that (``NotReady.hold_until_s``). The
  shell holds it and asks again; what it gets then (routed, or a 503 with a fresh hint) is final.

No hint for a model that only a new declaration or an operator can bring back (Failed, invalid):
retrying cannot help there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.calibration import WakeCalibration
from restorelens.gate.modelclaim.claim import OP_STARTING, OP_WAKING, ClaimState
from restorelens.gate.modelclaim.phases import REASON_ENGINE_FAILED, AnswerTable
from restorelens.gate.routing import NotReady

__all__ = [
    "CALIBRATED",
    "FIXED",
    "HINT_MARGIN_S",
    "HINT_MODES",
    "HINT_SOURCES",
    "HOLD",
    "MIN_HINT_S",
    "PRIOR",
    "RetryHints",
    "planned_path",
]

FIXED, CALIBRATED, PRIOR, HOLD = "fixed", "calibrated", "prior", "hold"
#: ``[modelclaim] retry_after_mode``.
HINT_MODES = (FIXED, CALIBRATED)
#: Where a 503's hint came from (span attribute ``modelclaim.hint_source``).
HINT_SOURCES = (FIXED, CALIBRATED, PRIOR)
#: Added to a calibrated hint: a client that comes back exactly at the predicted instant must not
#: land an instant before the lifecycle has taken the readiness in and begun routing.
HINT_MARGIN_S = 0.05
#: The least a calibrated hint says, once the wake has run past its prediction: come back soon,
#: not at once (an immediate retry is another 503).
MIN_HINT_S = 0.25


def planned_path(claim: ClaimState) -> str | None:
    """The wake path under way for ``claim``, once the lifecycle has chosen it; None before."""
    wake = claim.wake
    if wake is None or claim.reason == REASON_ENGINE_FAILED:
        return None  # a restart after a failure: its backoff is no wake the lifecycle can predict
    if wake.path_started_s is None:
        return None  # still waiting for room, or attaching: no path under way yet
    if claim.op in (OP_STARTING, OP_WAKING):
        return wake.path
    if wake.neighbours:
        return "make-room"  # a neighbour is being slept; the wake follows on this GPU
    return None


@dataclass(frozen=True, slots=True)
class RetryHints:
    table: AnswerTable = AnswerTable()
    mode: str = FIXED
    hold_s: float | None = None
    margin_s: float = HINT_MARGIN_S
    min_hint_s: float = MIN_HINT_S

    def __post_init__(self) -> None:
        if self.mode not in HINT_MODES:
            raise SettingError("modelclaim.retry_after_mode", f"must be one of {', '.join(HINT_MODES)}, got {self.mode!r}")
        if self.hold_s is not None and not (self.hold_s > 0 and math.isfinite(self.hold_s)):
            raise SettingError("modelclaim.hold_s", f"must be a positive number of seconds, got {self.hold_s!r}")

    @property
    def hint_mode(self) -> str:
        """The answer strategy as one name (span attribute ``modelclaim.hint_mode``): hold, calibrated or fixed."""
        return HOLD if self.hold_s is not None else self.mode

    def answer(self, claim: ClaimState, now_s: float, calibration: WakeCalibration) -> NotReady:
        model = claim.spec.model
        base = self.table.answer(model, claim.phase, claim.reason, error=claim.last_error)
        if base.retry_after_s is None:
            return replace(base, hint_mode=self.hint_mode)
        path = planned_path(claim)
        predicted_s = calibration.predict_s(model, path) if self.mode == CALIBRATED and path is not None else None
        if predicted_s is None:
            source = FIXED if self.mode == FIXED else PRIOR
            wait_s = float(base.retry_after_s)
            ready_in_s = None
        else:
            assert claim.wake is not None and claim.wake.path_started_s is not None
            source = CALIBRATED
            ready_in_s = max(0.0, predicted_s - (now_s - claim.wake.path_started_s))
            wait_s = max(self.min_hint_s, ready_in_s + self.margin_s)
        hold_until_s = now_s + self.hold_s if self.hold_s is not None and wait_s <= self.hold_s else None
        if self.mode == FIXED:
            return replace(base, hint_source=source, hint_mode=self.hint_mode, hold_until_s=hold_until_s)
        wait_ms = math.ceil(wait_s * 1000 - 1e-6)
        return replace(
            base,
            retry_after_s=max(1, math.ceil(wait_ms / 1000)),
            retry_after_ms=wait_ms,
            hint_source=source,
            hint_mode=self.hint_mode,
            predicted_ready_in_s=ready_in_s,
            hold_until_s=hold_until_s,
        )
