"""Clocks. Cores take ``now_s`` as an argument; shells read it from one of these.

Both clocks count seconds since the Unix epoch so that spans stamped from either look alike;
``VirtualClock`` starts at a fixed epoch so virtual runs are reproducible.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "VirtualClock", "WallClock", "to_ns"]

#: 2026-01-01T00:00:00Z, the default start of virtual time (reproducible span timestamps).
DEFAULT_VIRTUAL_EPOCH_S = 1_767_225_600.0


def to_ns(t_s: float) -> int:
    """Seconds since the epoch -> integer nanoseconds, as span timestamps want."""
    return int(round(t_s * 1e9))


class Clock(Protocol):
    def now_s(self) -> float: ...


class WallClock:
    """Real time (``time.time()``)."""

    def now_s(self) -> float:
        return time.time()


class VirtualClock:
    """Time that moves only when told to; never backwards."""

    def __init__(self, start_s: float = DEFAULT_VIRTUAL_EPOCH_S) -> None:
        self._now_s = start_s
        self.start_s = start_s

    def now_s(self) -> float:
        return self._now_s

    def advance_to(self, t_s: float) -> None:
        if t_s < self._now_s:
            raise ValueError(f"virtual time cannot go back: {t_s} < {self._now_s}")
        self._now_s = t_s
