"""Retry-After from an EWMA of completion intervals (the estimate MoFlux's Tyr admission controller uses).

The mean time between completions estimates how long until a slot frees; a request with ``k``
waiters ahead of it needs ``k + 1`` slots to free. The average is time-weighted (half-life
``half_life_s``): a sample arriving after a long gap moves the average more. No estimate before
``min_samples`` intervals were seen ("does not fabricate a Retry-After"); estimates are clamped.
"""

from __future__ import annotations

import math

__all__ = ["RetryHint", "retry_after_header"]


class RetryHint:
    def __init__(
        self,
        *,
        half_life_s: float = 5.0,
        min_samples: int = 3,
        min_ms: int = 50,
        max_ms: int = 30_000,
    ) -> None:
        self.half_life_s = half_life_s
        self.min_samples = min_samples
        self.min_ms = min_ms
        self.max_ms = max_ms
        self._last_completion_s: float | None = None
        self._mean_interval_s: float | None = None
        self.samples = 0

    def observe_completion(self, now_s: float) -> None:
        last, self._last_completion_s = self._last_completion_s, now_s
        if last is None:
            return
        interval_s = max(0.0, now_s - last)
        if self._mean_interval_s is None:
            self._mean_interval_s = interval_s
        else:
            weight = 1.0 - 0.5 ** (interval_s / self.half_life_s) if self.half_life_s > 0 else 1.0
            self._mean_interval_s += weight * (interval_s - self._mean_interval_s)
        self.samples += 1

    @property
    def mean_interval_s(self) -> float | None:
        return self._mean_interval_s

    def estimate_ms(self, waiters_ahead: int = 0) -> int | None:
        """Milliseconds until a slot is likely free for a request behind ``waiters_ahead``; None if unknown."""
        if self._mean_interval_s is None or self.samples < self.min_samples:
            return None
        raw_ms = self._mean_interval_s * 1000.0 * (waiters_ahead + 1)
        return int(min(self.max_ms, max(self.min_ms, round(raw_ms))))


def retry_after_header(estimate_ms: int | None) -> str | None:
    """``Retry-After`` in whole seconds (rounded up), only when the estimate is at least one second."""
    if estimate_ms is None or estimate_ms < 1000:
        return None
    return str(math.ceil(estimate_ms / 1000))
