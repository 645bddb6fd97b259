"""Time for the live shell: real time, optionally sped up, with the sleep that matches it.

``ScaledClock(time_scale=10)`` runs ten times faster than the wall: ``now_s()`` advances 10 s per
real second (from a fixed start, so span times look like a normal epoch) and ``sleep(10)`` returns
after one real second. The simulator and the gate are given the same scale, so a 105-s protocol runs
live in about 10.5 s with every component agreeing on the time.
"""

from __future__ import annotations

import asyncio
import time

from restorelens.errors import SettingError

__all__ = ["ScaledClock"]


class ScaledClock:
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
