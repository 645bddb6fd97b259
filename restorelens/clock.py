"""Clocks. Cores take ``now_s`` as an argument; shells read it from one of these.

Every clock counts seconds since the Unix epoch so that spans stamped from any of them look alike;
``VirtualClock`` starts at a fixed epoch so virtual runs are reproducible. ``ScaledClock`` is real
time sped up: ``ScaledClock(time_scale=10)`` advances 10 s per real second (from a fixed start)
and its ``sleep(10)`` returns after one real second, so a demo plays a 105-s protocol in about
10.5 s with every component agreeing on the time. A live shell that waits in real seconds (asyncio)
for a deadline in clock seconds divides by ``time_scale``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from restorelens.errors import SettingError

__all__ = ["Clock", "ScaledClock", "VirtualClock", "WallClock", "to_ns"]

#: 2026-01-01T00:00:00Z, the default start of virtual time (reproducible span timestamps).
DEFAULT_VIRTUAL_EPOCH_S = 1_767_225_600.0


def to_ns(t_s: float) -> int:
    """Seconds since the epoch -> integer nanoseconds, as span timestamps want."""
    return int(round(t_s * 1e9))


class Clock(Protocol):
    #: Clock seconds per real second (1 but for ``ScaledClock``).
    time_scale: float

    def now_s(self) -> float: ...


class WallClock:
    """Real time (``time.time()``)."""

    time_scale = 1.0

    def now_s(self) -> float:
        return time.time()


class ScaledClock:
    """Real time, ``time_scale`` times faster, with the sleep that matches it."""

    def __init__(self, time_scale: float = 1.0, start_s: float | None = None) -> None:
        if not time_scale > 0:
            raise SettingError("--time-scale", f"must be > 0, got {time_scale}")
        self.time_scale = time_scale
        self.start_s = time.time() if start_s is None else start_s
        self._mono0 = time.monotonic()

    def now_s(self) -> float:
        return self.start_s + (time.monotonic() - self._mono0) * self.time_scale

    async def sleep(self, wait_s: float) -> None:
        await asyncio.sleep(max(0.0, wait_s) / self.time_scale)


class VirtualClock:
    """Time that moves only when told to; never backwards."""

    #: Nothing waits in real time on a virtual clock; 1 keeps the protocol's arithmetic plain.
    time_scale = 1.0

    def __init__(self, start_s: float = DEFAULT_VIRTUAL_EPOCH_S) -> None:
        self._now_s = start_s
        self.start_s = start_s

    def now_s(self) -> float:
        return self._now_s

    def advance_to(self, t_s: float) -> None:
        if t_s < self._now_s:
            raise ValueError(f"virtual time cannot go back: {t_s} < {self._now_s}")
        self._now_s = t_s
