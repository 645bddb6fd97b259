"""When the lifecycle asks an engine whether it is ready: coarse until near the expected ready
time, fine around it. One schedule for the live backends and the virtual shell.

Sans-I/O: times are clock seconds, ``called_s`` is when the start or wake was called (the first
poll is then), ``expected_s`` how long the call is expected to take (``WakeEstimates.for_call``)
or None.

- Nothing expected: a poll every ``coarse_s`` from the call (``poll_interval_s``), as before.
- Expected ready at ``called_s + expected_s``: every ``coarse_s`` from the call until one coarse
  step before that instant, then every ``fine_s`` until one coarse step after it, then every
  ``coarse_s`` again. The window is the coarse step on each side: wherever the coarse grid would
  have put the poll that sees readiness near the prediction, the fine grid sees it within
  ``fine_s``; an engine far off its prediction is seen within ``coarse_s``, as with no
  prediction. So the fine polls are bounded: ``2 * coarse_s / fine_s`` per call.

``FINE_POLL_S`` is half of ``hints.HINT_MARGIN_S``: a calibrated hint sends a client back that
margin after the predicted routing instant, and the readiness the lifecycle routes on must be seen
within it, with room left for the poll's own round trip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from restorelens.errors import SettingError

__all__ = ["FINE_POLL_S", "PollSchedule"]

#: Seconds between readiness polls around the expected ready time (see the module doc).
FINE_POLL_S = 0.025
#: Float slack when a ready instant falls on a poll (``45.0`` must be seen by the poll at 45.0).
_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class PollSchedule:
    coarse_s: float
    expected_s: float | None = None
    fine_s: float = FINE_POLL_S

    def __post_init__(self) -> None:
        if not (self.coarse_s > 0 and math.isfinite(self.coarse_s)):
            raise SettingError("modelclaim.poll_interval_s",
                               f"must be a positive number of seconds, got {self.coarse_s!r}")
        if not 0 < self.fine_s <= self.coarse_s:
            # A coarse grid finer than the fine one: poll on the coarse grid throughout.
            object.__setattr__(self, "fine_s", self.coarse_s)

    def window(self, called_s: float) -> tuple[float, float] | None:
        """The clock interval of fine polls, or None when nothing is expected."""
        if self.expected_s is None:
            return None
        ready_s = called_s + max(0.0, self.expected_s)
        return max(called_s, ready_s - self.coarse_s), ready_s + self.coarse_s

    def next_poll_s(self, called_s: float, polled_s: float) -> float:
        """The poll due after one made at ``polled_s`` (on the grid anchored at the call, so a slow
        answer does not push every later poll back)."""
        window = self.window(called_s)
        if window is None:
            return _next_on(called_s, self.coarse_s, polled_s)
        lo_s, hi_s = window
        if polled_s < lo_s - _EPS:
            return min(_next_on(called_s, self.coarse_s, polled_s), lo_s)
        if polled_s < hi_s - _EPS:
            return min(_next_on(lo_s, self.fine_s, polled_s), hi_s)
        return _next_on(hi_s, self.coarse_s, polled_s)

    def observed_s(self, called_s: float, ready_s: float) -> float:
        """The first poll at or after ``ready_s`` (polls are instant here: the virtual shell's view)."""
        if ready_s <= called_s:
            return called_s
        window = self.window(called_s)
        if window is None:
            return _first_at(called_s, self.coarse_s, ready_s)
        lo_s, hi_s = window
        if ready_s <= lo_s + _EPS:
            return min(_first_at(called_s, self.coarse_s, ready_s), lo_s)
        if ready_s <= hi_s + _EPS:
            return min(_first_at(lo_s, self.fine_s, ready_s), hi_s)
        return _first_at(hi_s, self.coarse_s, ready_s)

    def polls_until(self, called_s: float, until_s: float) -> list[float]:
        """Every poll from the call up to ``until_s`` (for tests and for reading a schedule)."""
        polls = [called_s]
        while (t := self.next_poll_s(called_s, polls[-1])) <= until_s + _EPS:
            polls.append(t)
        return polls


def _first_at(anchor_s: float, step_s: float, t_s: float) -> float:
    """The first point of ``anchor_s + k * step_s`` (k >= 0) at or after ``t_s``."""
    return anchor_s + max(0, math.ceil((t_s - anchor_s) / step_s - _EPS)) * step_s


def _next_on(anchor_s: float, step_s: float, t_s: float) -> float:
    """The first point of ``anchor_s + k * step_s`` strictly after ``t_s``."""
    return anchor_s + (math.floor((t_s - anchor_s) / step_s + _EPS) + 1) * step_s
