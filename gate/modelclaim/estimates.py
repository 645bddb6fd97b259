"""How long a wake will take, before and after the lifecycle has seen one: the one estimate that
both the hints (``hints.RetryHints``) and the readiness polls (``polls.PollSchedule``) use.

Sans-I/O. ``WakeEstimates`` answers two questions:

- ``for_path(model, path, neighbours)``: how long the wake path under way lasts, from the moment it
  began to the moment the lifecycle routes again — what a hint must cover;
- ``for_call(model, call)``: how long an engine call (``START`` a new engine, ``WAKE`` a sleeping
  one) takes until the engine is ready — where the readiness polls must be fine.

What it knows, first found wins:

1. **Calibrated**: what the lifecycle learnt from this model's past wakes on this path
   (``WakeCalibration``; also what a kept ``calibration_path`` file holds from before the start).
2. **Priors**: what is known before any wake, per model and engine step (``START``, ``WAKE``,
   ``SLEEP`` at level 1), from the ``DurationPrior`` sources in order. ``DeclaredDurations`` is
   the deployment's own figure (the claim's ``expected`` setting: the operator's measurement, the
   engine vendor's, or the simulator preset's modelled durations in a virtual experiment). Any
   other source of per-step durations (e.g. the engine's own startup phases as it reports them)
   plugs in as another ``DurationPrior``. A path's prior is the sum of its steps: a cold start or
   a move is one ``START``; an in-place wake one ``WAKE``; making room is each slept neighbour's
   ``SLEEP`` then the model's ``WAKE``. A step no source knows leaves the path unknown.
3. **Nothing** (None): the caller re-estimates as the wake runs (``hints``) or polls on its coarse
   grid (``polls``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.calibration import WakeCalibration

__all__ = ["CALIBRATED", "DECLARED", "EXPECTED_KEYS", "START", "SLEEP", "STEPS", "WAKE", "DeclaredDurations",
           "DurationPrior", "Estimate", "WakeEstimates", "parse_expected"]

#: Engine steps a prior gives a duration for: a start until ready, a wake until ready, a level-1 sleep.
START, WAKE, SLEEP = "start", "wake", "sleep"
STEPS = (START, WAKE, SLEEP)
#: The claim's ``expected`` table: seconds per step.
EXPECTED_KEYS = {f"{step}_s": step for step in STEPS}
#: Where an estimate came from (``modelclaim.hint_source`` of the hint built on it).
CALIBRATED, DECLARED = "calibrated", "declared"
#: The engine steps of each wake path; make-room adds the neighbours' sleeps before its wake.
_PATH_STEP = {"cold-start": START, "move": START, "in-place": WAKE, "make-room": WAKE}
#: The wake paths whose duration is one call's: what a call's calibration is learnt from.
_CALL_PATHS = {START: ("cold-start", "move"), WAKE: ("in-place",)}


class DurationPrior(Protocol):
    """A source of engine step durations known before any wake; None when it does not know."""

    def expected_s(self, model: str, step: str) -> float | None: ...


@dataclass(frozen=True, slots=True)
class DeclaredDurations:
    """What the deployment declares: model -> step -> seconds (the claims' ``expected`` tables)."""

    durations: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def expected_s(self, model: str, step: str) -> float | None:
        return self.durations.get(model, {}).get(step)


@dataclass(frozen=True, slots=True)
class Estimate:
    duration_s: float
    source: str


@dataclass(frozen=True, slots=True)
class WakeEstimates:
    calibration: WakeCalibration
    priors: Sequence[DurationPrior] = ()

    def for_path(self, model: str, path: str, neighbours: Iterable[str] = ()) -> Estimate | None:
        """The path's duration, from its start to routing again; None when nothing is known."""
        learnt = self.calibration.predict_s(model, path)
        if learnt is not None:
            return Estimate(learnt, CALIBRATED)
        step = _PATH_STEP.get(path)
        if step is None:
            return None
        parts = [self._prior(n, SLEEP) for n in (neighbours if path == "make-room" else ())]
        parts.append(self._prior(model, step))
        if any(p is None for p in parts):
            return None
        return Estimate(sum(p for p in parts if p is not None), DECLARED)

    def for_call(self, model: str, call: str) -> float | None:
        """Seconds from the engine call (``START`` or ``WAKE``) to its readiness; None when unknown.
        A call's own path's calibration first (a start is the whole of a cold start or a move),
        the longer when both were seen; else its prior."""
        learnt = [s for path in _CALL_PATHS.get(call, ()) if (s := self.calibration.predict_s(model, path)) is not None]
        return max(learnt) if learnt else self._prior(model, call)

    def _prior(self, model: str, step: str) -> float | None:
        for prior in self.priors:
            value = prior.expected_s(model, step)
            if value is not None:
                return value
        return None


def parse_expected(value: Any, where: str) -> dict[str, float]:
    """A claim's ``expected`` table, ``{ start_s = 45, wake_s = 4.2, sleep_s = 0.4 }`` (each
    optional) -> step -> seconds; ``SettingError`` naming the key otherwise."""
    if not isinstance(value, Mapping):
        raise SettingError(where, f"must be a table of {', '.join(sorted(EXPECTED_KEYS))}")
    durations = {}
    for key, seconds in value.items():
        if key not in EXPECTED_KEYS:
            raise SettingError(f"{where}.{key}", f"unknown key; use {', '.join(sorted(EXPECTED_KEYS))}")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds) \
                or seconds < 0:
            raise SettingError(f"{where}.{key}", f"must be a finite number of seconds >= 0, got {seconds!r}")
        durations[EXPECTED_KEYS[key]] = float(seconds)
    return durations
