"""Where a load's or a receiver's time goes: seconds per named step, wall and CPU.

The loader and the store add to one :class:`Phases` as they work (a few clock reads per block or
commit group, nothing per span), so ``bench_collector`` can print the breakdown of the very run it
times. Step names are the constants below.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["ARROW_BUILD", "COMMIT", "DECODE", "DEDUPE", "DERIVED", "INSERT", "OPEN_CLOSE", "STEPS", "Phases"]

DECODE = "decode"  # bytes to values: Arrow's JSON reader, json.loads or protobuf parsing
ARROW_BUILD = "arrow build"  # values to otel_traces columns (flatten, convert, check)
INSERT = "insert"  # the plain INSERT of new spans (DuckDB converts Arrow and checks the key)
DEDUPE = "dedupe"  # telling spans already stored apart, and inserting only the new ones
DERIVED = "derived tables"
COMMIT = "commit"
OPEN_CLOSE = "open/close"  # connect, schema and derived-table checks, and the checkpoint at close
#: Every step, in the order a load goes through them.
STEPS = (DECODE, ARROW_BUILD, INSERT, DEDUPE, DERIVED, COMMIT, OPEN_CLOSE)


class Phases:
    """Seconds per step; ``cpu_clock`` is ``time.process_time`` (every thread, right when steps run one
    at a time, as in the loader) or ``time.thread_time`` (the measuring thread alone, for steps that
    run concurrently in several threads, as in the receiver)."""

    def __init__(self, cpu_clock: Callable[[], float] = time.process_time) -> None:
        self._cpu_clock = cpu_clock
        self._lock = threading.Lock()
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def add(self, step: str, wall_s: float, cpu_s: float) -> None:
        with self._lock:
            self.wall[step] = self.wall.get(step, 0.0) + wall_s
            self.cpu[step] = self.cpu.get(step, 0.0) + cpu_s

    @contextlib.contextmanager
    def timing(self, step: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), self._cpu_clock()
        try:
            yield
        finally:
            self.add(step, time.perf_counter() - wall, self._cpu_clock() - cpu)

    def as_dict(self) -> dict[str, tuple[float, float]]:
        """step -> (wall seconds, CPU seconds), in :data:`STEPS` order, then any other step."""
        with self._lock:
            order = [s for s in STEPS if s in self.wall] + [s for s in self.wall if s not in STEPS]
            return {step: (self.wall[step], self.cpu[step]) for step in order}
