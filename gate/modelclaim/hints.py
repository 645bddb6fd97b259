"""How the gateway answers a request for a model that cannot serve yet: the hint, and whether to hold.

Sans-I/O. ``RetryHints.answer`` turns a claim's state into the ``NotReady`` the gate sends:

- ``fixed`` (the default, AIBrix's behaviour): the fixed table (``phases.AnswerTable``), whole
  seconds in ``Retry-After``; source ``fixed``.
- ``calibrated``: the predicted remaining time of *this* wake — the duration ``WakeEstimates``
  gives for the model and the wake path in progress, minus the time that path has already run,
  plus ``HINT_MARGIN_S`` — in ``x-restorelens-retry-after-ms`` and, rounded up to whole seconds as
  RFC 9110 requires, in ``Retry-After``; source ``calibrated`` (learnt from past wakes) or
  ``declared`` (the deployment's expected durations, before any wake was seen). With neither, the
  hint re-estimates at every retry (source ``elapsed``): come back after as long again as the path
  has run, between ``1 / 2**(ATTEMPTS_TO_TABLE - 1)`` of the fixed table's value and that value;
  so a client meets the table's instant after at most ``ATTEMPTS_TO_TABLE`` answers, and a short
  wake is met within about its own length, not the table's. When the path is not known yet (a
  wake still waiting for room, a restart after a failure) the fixed table is the prior; source
  ``prior``.
- ``hold_s``: a request may be held while the engine wakes instead of answered 503, for up to
  ``hold_s``, when the hint says the model will serve within that (``NotReady.hold_until_s``). The
  shell holds it and asks again; what it gets then (routed, or a 503 with a fresh hint) is final.
  A wake predicted to take longer than ``hold_s`` is answered 503 at once with a hint that brings
  the client back while the wake still runs, ``hold_s / 2`` before its predicted end: that retry is
  held and forwarded the moment the wake ends, so a prediction wrong by up to half the hold either
  way costs no overshoot, where a hint aimed after the end would cost its error. For the same
  reason, with nothing known of the wake the hint is ``min_hint_s``: each answer is held up to
  ``hold_s``, and a retry at once is held again (one attempt per ``hold_s`` of wake).

- ``max_hint_s``: no hint is longer (the OpenAI SDK does not retry at all past 120 s): a longer
  wait is answered with it, both in milliseconds and in Retry-After, and re-estimated at the retry
  (``NotReady.hint_capped``).
- A client that counts its own retries (``retries_taken``, from ``x-stainless-retry-count``) is
  not sent back by short re-estimating hints that would spend them before the wake ends
  (``_budgeted``).

No hint for a model that only a new declaration or an operator can bring back (Failed, invalid):
retrying cannot help there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.calibration import WakeCalibration
from restorelens.gate.modelclaim.claim import OP_STARTING, OP_WAKING, ClaimState
from restorelens.gate.modelclaim.estimates import DECLARED, DurationPrior, Estimate, WakeEstimates
from restorelens.gate.modelclaim.phases import REASON_ENGINE_FAILED, AnswerTable
from restorelens.gate.routing import NotReady

__all__ = [
    "ATTEMPTS_TO_TABLE",
    "CALIBRATED",
    "DECLARED",
    "ELAPSED",
    "FIXED",
    "HINT_MARGIN_S",
    "HINT_MODES",
    "HINT_SOURCES",
    "HOLD",
    "MAX_HINT_S",
    "MIN_HINT_S",
    "PRIOR",
    "RetryHints",
    "planned_path",
]

FIXED, CALIBRATED, PRIOR, HOLD, ELAPSED = "fixed", "calibrated", "prior", "hold", "elapsed"
#: ``[modelclaim] retry_after_mode``.
HINT_MODES = (FIXED, CALIBRATED)
#: Where a 503's hint came from (span attribute ``modelclaim.hint_source``).
HINT_SOURCES = (FIXED, CALIBRATED, DECLARED, ELAPSED, PRIOR)
#: With nothing known of a wake, the answers a client gets until the fixed table's instant: the
#: first hint is the table's value / 2**(n - 1), and each next one doubles the time waited so far.
ATTEMPTS_TO_TABLE = 4
#: Added to a calibrated hint: a client that comes back exactly at the predicted instant must not
#: land an instant before the lifecycle has taken the readiness in and begun routing.
HINT_MARGIN_S = 0.05
#: ``max_hint_s``'s default: the longest Retry-After the OpenAI SDK follows (MAX_RETRY_AFTER_DELAY).
MAX_HINT_S = 120
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
    #: What is known of each model's engine before any wake (``estimates.DurationPrior``), in order.
    priors: tuple[DurationPrior, ...] = ()
    #: The longest hint sent (``[modelclaim] max_hint_s``): the OpenAI SDK does not retry at all
    #: past 120 s. A longer predicted wait is held (``hold_s``) or answered with this and
    #: re-estimated at the retry.
    max_hint_s: int = MAX_HINT_S

    def __post_init__(self) -> None:
        if self.mode not in HINT_MODES:
            raise SettingError("modelclaim.retry_after_mode", f"must be one of {', '.join(HINT_MODES)}, got {self.mode!r}")
        if self.hold_s is not None and not (self.hold_s > 0 and math.isfinite(self.hold_s)):
            raise SettingError("modelclaim.hold_s", f"must be a positive number of seconds, got {self.hold_s!r}")
        if isinstance(self.max_hint_s, bool) or not isinstance(self.max_hint_s, int) or self.max_hint_s < 1:
            raise SettingError("modelclaim.max_hint_s", "must be a whole number of seconds >= 1 (Retry-After has no "
                               f"fractions), got {self.max_hint_s!r}")

    @property
    def hint_mode(self) -> str:
        """The answer strategy as one name (span attribute ``modelclaim.hint_mode``): hold, calibrated or fixed."""
        return HOLD if self.hold_s is not None else self.mode

    def estimates(self, calibration: WakeCalibration) -> WakeEstimates:
        """The wake estimates these hints (and the readiness polls) go by."""
        return WakeEstimates(calibration, self.priors)

    def answer(self, claim: ClaimState, now_s: float, calibration: WakeCalibration,
               retries_taken: int | None = None) -> NotReady:
        """The answer to a request for ``claim``'s model at ``now_s``. ``retries_taken``: the
        retries the client says it has taken (``x-stainless-retry-count``), None when it says
        nothing; such a client stops after a few retries of its own, so its hints are long enough
        not to spend them before the wake ends (``_budgeted``)."""
        model = claim.spec.model
        base = self.table.answer(model, claim.phase, claim.reason, error=claim.last_error)
        if base.retry_after_s is None:
            return replace(base, hint_mode=self.hint_mode)
        path = planned_path(claim) if self.mode == CALIBRATED else None
        estimate = None
        if path is not None:
            assert claim.wake is not None
            estimate = self.estimates(calibration).for_path(model, path, claim.wake.neighbours)
        ready_in_s = None
        may_hold = True
        table_s = float(base.retry_after_s)
        if path is None:
            source = FIXED if self.mode == FIXED else PRIOR
            wait_s = table_s
        elif estimate is None:
            assert claim.wake is not None and claim.wake.path_started_s is not None
            source = ELAPSED
            elapsed_s = now_s - claim.wake.path_started_s
            wait_s = max(self.min_hint_s, table_s / 2 ** (ATTEMPTS_TO_TABLE - 1), min(table_s, elapsed_s))
            if self.hold_s is not None:
                wait_s = self.min_hint_s  # a retry while it runs is held to its end: the sooner the better
        else:
            assert claim.wake is not None and claim.wake.path_started_s is not None
            source = estimate.source
            ready_in_s = max(0.0, estimate.duration_s - (now_s - claim.wake.path_started_s))
            wait_s = max(self.min_hint_s, ready_in_s + self.margin_s)
            if self.hold_s is not None and ready_in_s > self.hold_s:
                wait_s = max(self.min_hint_s, ready_in_s - self.hold_s / 2)  # back while it runs, held to its end
                may_hold = False  # holding now would only end in a 503 after hold_s
        hold = self.hold_s is not None and may_hold and wait_s <= self.hold_s
        hold_until_s = now_s + self.hold_s if hold and self.hold_s is not None else None
        if retries_taken is not None and source != FIXED and not (self.hold_s is not None and ready_in_s is not None):
            wait_s = self._budgeted(wait_s, table_s, retries_taken, source, claim, now_s, estimate)
        capped = wait_s > self.max_hint_s
        if self.mode == FIXED:
            seconds = min(base.retry_after_s, int(self.max_hint_s))
            return replace(base, retry_after_s=seconds, hint_source=source, hint_mode=self.hint_mode,
                           hold_until_s=hold_until_s, hint_capped=capped)
        # Retry-After rounds the milliseconds up: capped at whole seconds, it stays within the limit.
        wait_ms = min(math.ceil(wait_s * 1000 - 1e-6), int(self.max_hint_s) * 1000)
        return replace(
            base,
            retry_after_s=max(1, math.ceil(wait_ms / 1000)),
            retry_after_ms=wait_ms,
            hint_source=source,
            hint_mode=self.hint_mode,
            predicted_ready_in_s=ready_in_s,
            hold_until_s=hold_until_s,
            hint_capped=capped,
        )

    def _budgeted(self, wait_s: float, table_s: float, retries_taken: int, source: str, claim: ClaimState,
                  now_s: float, estimate: Estimate | None) -> float:
        """The hint for a client with its own retry budget (the OpenAI SDK: 2 retries by default).

        Short hints that re-estimate would spend its retries before a long wake ends, and the
        request would fail while the model is coming. So, with nothing known of the wake: the
        table's value at its first answer, then the longest hint it follows (``max_hint_s``);
        a wake past its prediction: at least an eighth of the table (not 250 ms), or as long
        again as it has overrun. A predicted wake keeps its prediction (capped by the caller)."""
        if source == PRIOR:
            return wait_s
        if estimate is None:  # ELAPSED
            return table_s if retries_taken == 0 else max(table_s, self.max_hint_s)
        assert claim.wake is not None and claim.wake.path_started_s is not None
        overrun_s = now_s - claim.wake.path_started_s - estimate.duration_s
        if overrun_s < 0:
            return wait_s
        return max(wait_s, table_s / 2 ** (ATTEMPTS_TO_TABLE - 1), overrun_s)
