"""A minimal discrete-event loop for virtual time: a heap of (time, order, callback).

Callbacks scheduled for the same instant run in the order they were scheduled, so a run is a pure
function of its inputs. Components with their own notion of "next due" (the engine core, the
admission queue deadlines, the lifecycle core) are polled through ``sources``: each is a pair of
``next_due() -> float | None`` and ``run_due(t)``, consulted before the heap at each step so that
an engine step finishing at t is seen before a client acting at t.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from restorelens.clock import VirtualClock

__all__ = ["EventLoop", "TimeSource"]


@dataclass(frozen=True, slots=True)
class TimeSource:
    name: str
    next_due: Callable[[], float | None]
    run_due: Callable[[float], None]


@dataclass
class EventLoop:
    clock: VirtualClock
    sources: list[TimeSource] = field(default_factory=list)
    _heap: list[tuple[float, int, Callable[[], None]]] = field(default_factory=list)
    _order: itertools.count = field(default_factory=itertools.count)
    steps: int = 0

    def at(self, t_s: float, callback: Callable[[], None]) -> None:
        """Run ``callback`` at ``t_s`` (now, if ``t_s`` is in the past)."""
        heapq.heappush(self._heap, (max(t_s, self.clock.now_s()), next(self._order), callback))

    def run(self, until_s: float | None = None, stop: Callable[[], bool] | None = None) -> float:
        """Run until nothing is due, until ``until_s``, or until ``stop()`` says so after a step
        (components with idle timers always have something due); returns the time reached."""
        while stop is None or not stop():
            t_s, source = self._next()
            if t_s is None or (until_s is not None and t_s > until_s):
                break
            self.clock.advance_to(max(t_s, self.clock.now_s()))
            self.steps += 1
            if source is not None:
                source.run_due(self.clock.now_s())
            else:
                _, _, callback = heapq.heappop(self._heap)
                callback()
        return self.clock.now_s()

    def _next(self) -> tuple[float | None, TimeSource | None]:
        best_s: float | None = None
        best: TimeSource | None = None
        for source in self.sources:
            due = source.next_due()
            if due is not None and (best_s is None or due < best_s):
                best_s, best = due, source
        if self._heap and (best_s is None or self._heap[0][0] < best_s):
            return self._heap[0][0], None
        return best_s, best
