"""Lending and restoration bookkeeping: the records behind ``gate.lend`` and ``gate.restore``.

Definitions (docs/design.md, "Lending"):

- A **lending period** starts with the first grant on borrowed capacity while no period is lending,
  stops lending when protected demand returns (or the gate closes / changes policy), and is drained
  when the last request admitted on borrowed capacity during that period finished (which may be
  before lending stopped, when the loans came back while the protected class was still idle).
- A **restoration episode** opens when protected demand returns (a protected request arrives while
  the protected class was idle) and borrowed requests are in flight: ``t0_s`` is that arrival.
  ``grant_restored_s`` is when the protected floor is back at its nominal size: at ``t0_s``, or
  with a lending controller (``LendPolicy.control_period_s``) when its revision took effect;
  ``borrowed_drained_s`` is when the last request borrowed at ``t0_s`` finished. Nothing lent at
  return: no episode. Lending stops when the floor is restored.

The tracker retains the last ``max_retained`` records of each kind, open or not, plus every open
one: a gate runs for months, and each lend -> return cycle would otherwise keep ~800 bytes forever.

It also keeps ``stats``: histograms of each restoration event in seconds after ``t0`` (grant
restored, borrowed drained, the returning request's first byte) and the count of episodes over the
policy's budget, added to as each event happens so that ``/metrics`` only reads them
(docs/alerting.md has the definitions).

All times are arguments; nothing here reads a clock.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "DEFAULT_MAX_RETAINED", "RESTORATION_BUCKETS_S", "LendingPeriod", "RestorationEpisode", "RestorationListener",
    "RestorationStats", "RestorationTracker", "SecondsHistogram",
]

#: Records of each kind kept once finished (gate.max_retained_episodes).
DEFAULT_MAX_RETAINED = 10_000

#: Upper bounds, in seconds after t0, of the restoration histograms' buckets (+Inf follows). A
#: restoration is anything from "the returning request was served at once" (a few ms: the gate's
#: own path) to a long batch generation draining for minutes; each decade gets 1-2.5-5 steps up to
#: 10 s, where budgets are set, and coarser steps to 10 min beyond, where only "how bad" matters.
RESTORATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def _no_budget() -> float | None:
    return None


class SecondsHistogram:
    """Counts of durations per bucket (``le`` bounds, as Prometheus), their sum and number.

    Fixed size however many are observed: a gate runs for months.
    """

    __slots__ = ("bounds_s", "counts", "count", "sum_s")

    def __init__(self, bounds_s: tuple[float, ...] = RESTORATION_BUCKETS_S) -> None:
        if list(bounds_s) != sorted(set(bounds_s)):
            raise ValueError(f"histogram bounds must increase strictly, got {bounds_s}")
        self.bounds_s = bounds_s
        self.counts = [0] * (len(bounds_s) + 1)  # the last one: above every bound (+Inf)
        self.count = 0
        self.sum_s = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le = "less or equal").
        self.counts[bisect.bisect_left(self.bounds_s, seconds)] += 1
        self.count += 1
        self.sum_s += seconds

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it) per bucket, ending with (inf, count)."""
        total = 0
        buckets: list[tuple[float, int]] = []
        for bound, count in zip((*self.bounds_s, float("inf")), self.counts, strict=True):
            total += count
            buckets.append((bound, total))
        return buckets


@dataclass(slots=True)
class RestorationStats:
    """The restoration events as the gate saw them, in seconds after t0, and the budget's verdicts."""

    grant_restored: SecondsHistogram = field(default_factory=SecondsHistogram)
    borrowed_drained: SecondsHistogram = field(default_factory=SecondsHistogram)
    first_byte: SecondsHistogram = field(default_factory=SecondsHistogram)
    #: Episodes judged over the budget in force at their t0 (``RestorationEpisode.over_budget``).
    over_budget: int = 0


@dataclass(slots=True)
class LendingPeriod:
    period_id: int
    start_s: float
    lendable_slots: int
    lend_stopped_s: float | None = None
    borrowed_drained_s: float | None = None
    peak_borrowed: int = 0
    borrowed_granted: int = 0
    last_borrowed_release_s: float | None = None
    outstanding: set[int] = field(default_factory=set, repr=False)

    @property
    def finished(self) -> bool:
        return self.lend_stopped_s is not None and self.borrowed_drained_s is not None


@dataclass(slots=True)
class RestorationEpisode:
    episode_id: int
    t0_s: float
    returning_request_id: str
    borrowed_at_return: int
    grant_restored_s: float | None = None
    borrowed_drained_s: float | None = None
    #: When the returning request's (or a retry's, which shares its id) first response byte reached the gate.
    first_byte_seen_s: float | None = None
    #: The policy's ``restore_budget_s`` at t0 (None: no budget, never over it).
    budget_s: float | None = None
    #: True/False once judged (docs/alerting.md, "Over budget"); None while it cannot be told yet.
    over_budget: bool | None = None
    outstanding: set[int] = field(default_factory=set, repr=False)

    @property
    def finished(self) -> bool:
        """Grant restored and borrowed work drained; the first byte may still come (or never)."""
        return self.grant_restored_s is not None and self.borrowed_drained_s is not None

    @property
    def grant_restore_s(self) -> float | None:
        return None if self.grant_restored_s is None else self.grant_restored_s - self.t0_s

    @property
    def drain_s(self) -> float | None:
        return None if self.borrowed_drained_s is None else self.borrowed_drained_s - self.t0_s

    @property
    def first_byte_s(self) -> float | None:
        return None if self.first_byte_seen_s is None else self.first_byte_seen_s - self.t0_s


class RestorationListener(Protocol):
    """Told when records open and finish (the span emitter implements it)."""

    def lend_started(self, period: LendingPeriod) -> None: ...

    def lend_finished(self, period: LendingPeriod) -> None: ...

    def restore_started(self, episode: RestorationEpisode) -> None: ...

    def restore_finished(self, episode: RestorationEpisode) -> None: ...


class RestorationTracker:
    """Keeps lending periods and restoration episodes from the core's grant events.

    ``periods`` and ``episodes`` hold the most recent ``max_retained`` of each, oldest first;
    ``periods_started`` and ``episodes_started`` count all of them. ``stats`` holds the restoration
    histograms and the over-budget count; ``restore_budget_s``, given when the tracker is built,
    gives the budget an episode opening now is judged by (``Admission`` passes its policy's).
    """

    def __init__(self, listeners: list[RestorationListener] | None = None, *, max_retained: int = DEFAULT_MAX_RETAINED,
                 restore_budget_s: Callable[[], float | None] = _no_budget) -> None:
        if max_retained < 1:
            raise ValueError(f"max_retained must be at least 1, not {max_retained}")
        self.listeners: list[RestorationListener] = list(listeners or [])
        self.periods: deque[LendingPeriod] = deque(maxlen=max_retained)
        self.episodes: deque[RestorationEpisode] = deque(maxlen=max_retained)
        self.periods_started = 0
        self.episodes_started = 0
        self._lending: LendingPeriod | None = None
        self._period_of_grant: dict[int, LendingPeriod] = {}
        self._open_periods: dict[int, LendingPeriod] = {}
        self._open_episodes: list[RestorationEpisode] = []
        self.stats = RestorationStats()
        self.restore_budget_s = restore_budget_s
        self._max_retained = max_retained
        #: Episodes whose returning request's first byte was not seen yet, by that request's id,
        #: and how many there are in all (the bound counts episodes: ids may repeat).
        self._awaiting_first_byte: dict[str, deque[RestorationEpisode]] = {}
        self._awaiting_episodes = 0

    @property
    def lending(self) -> bool:
        """A lending period is open and has not stopped lending."""
        return self._lending is not None

    @property
    def open_episodes(self) -> int:
        return len(self._open_episodes)

    @property
    def dropped(self) -> int:
        """Records no longer retained (both kinds)."""
        return self.periods_started - len(self.periods) + self.episodes_started - len(self.episodes)

    def unfinished(self) -> tuple[list[LendingPeriod], list[RestorationEpisode]]:
        """Every record still open, retained or not (their spans end when a run is flushed)."""
        return list(self._open_periods.values()), list(self._open_episodes)

    def borrowed_granted(self, grant_id: int, now_s: float, lendable_slots: int, borrowed_now: int) -> None:
        period = self._lending
        if period is None:
            self.periods_started += 1
            period = LendingPeriod(self.periods_started, now_s, lendable_slots)
            self.periods.append(period)
            self._open_periods[period.period_id] = period
            self._lending = period
            for listener in self.listeners:
                listener.lend_started(period)
        period.outstanding.add(grant_id)
        period.borrowed_granted += 1
        period.peak_borrowed = max(period.peak_borrowed, borrowed_now)
        self._period_of_grant[grant_id] = period

    def protected_returned(self, request_id: str, now_s: float, borrowed_grant_ids: set[int]) -> None:
        """Protected demand is back: open an episode if anything is lent (``floor_restored`` ends lending)."""
        if not borrowed_grant_ids:
            return
        self.episodes_started += 1
        episode = RestorationEpisode(self.episodes_started, now_s, request_id, len(borrowed_grant_ids))
        episode.outstanding = set(borrowed_grant_ids)
        # The budget in force when demand returned: a policy swapped later does not rejudge the episode.
        episode.budget_s = self.restore_budget_s()
        if episode.budget_s is None:
            episode.over_budget = False
        self.episodes.append(episode)
        self._open_episodes.append(episode)
        self._awaiting_first_byte.setdefault(request_id, deque()).append(episode)
        self._awaiting_episodes += 1
        if self._awaiting_episodes > self._max_retained:
            # A returning request that never got a first byte (rejected, its client left) is not
            # waited for forever: the first episode of the id waiting longest goes (the oldest when
            # ids do not repeat), never the one just added. The bound counts episodes, not ids: a
            # client reusing one request id must not grow its queue without end.
            oldest_id = next(iter(self._awaiting_first_byte))
            waiting = self._awaiting_first_byte[oldest_id]
            waiting.popleft()
            self._awaiting_episodes -= 1
            if not waiting:
                del self._awaiting_first_byte[oldest_id]
        for listener in self.listeners:
            listener.restore_started(episode)

    def floor_restored(self, at_s: float) -> None:
        """The protected floor is back at its nominal size at ``at_s``: lending stops, grants are restored."""
        self.stop_lending(at_s)
        for episode in list(self._open_episodes):
            if episode.grant_restored_s is None:
                episode.grant_restored_s = at_s
                self.stats.grant_restored.observe(at_s - episode.t0_s)
                self._maybe_finish_episode(episode)

    def borrowed_released(self, grant_id: int, now_s: float) -> None:
        period = self._period_of_grant.pop(grant_id, None)
        if period is not None:
            period.outstanding.discard(grant_id)
            period.last_borrowed_release_s = now_s
            if not period.outstanding and period.lend_stopped_s is not None:
                period.borrowed_drained_s = now_s
                self._finish_period(period)
        for episode in list(self._open_episodes):
            if grant_id in episode.outstanding:
                episode.outstanding.discard(grant_id)
                if not episode.outstanding:
                    episode.borrowed_drained_s = now_s
                    self.stats.borrowed_drained.observe(now_s - episode.t0_s)
                    self._maybe_finish_episode(episode)

    def first_byte(self, request_id: str, now_s: float) -> None:
        """``request_id``'s first response byte reached the gate at ``now_s``.

        Shells may report every request's: only a returning request's counts, and only its first
        (a 429'd returning request's retry shares its id, so the retry's first byte is the one).
        """
        episodes = self._awaiting_first_byte.pop(request_id, None)
        if episodes is None:
            return
        self._awaiting_episodes -= len(episodes)
        for episode in episodes:
            episode.first_byte_seen_s = now_s
            self.stats.first_byte.observe(now_s - episode.t0_s)
            if episode.over_budget is None:
                self._judge(episode, now_s - episode.t0_s)

    def stop_lending(self, now_s: float) -> None:
        period = self._lending
        if period is None:
            return
        self._lending = None
        period.lend_stopped_s = now_s
        if not period.outstanding:
            # Everything lent already came back (before lending stopped): drained when the last did.
            last_s = period.last_borrowed_release_s
            period.borrowed_drained_s = now_s if last_s is None else last_s
            self._finish_period(period)

    def _finish_period(self, period: LendingPeriod) -> None:
        self._open_periods.pop(period.period_id, None)
        for listener in self.listeners:
            listener.lend_finished(period)

    def _judge(self, episode: RestorationEpisode, restored_after_s: float) -> None:
        episode.over_budget = episode.budget_s is not None and restored_after_s > episode.budget_s
        if episode.over_budget:
            self.stats.over_budget += 1

    def _maybe_finish_episode(self, episode: RestorationEpisode) -> None:
        if episode.finished:
            if episode.over_budget is None and episode.budget_s is not None:
                # No first byte yet: it can only come later than this (or never: the request was
                # refused, its client left, or the shell reports none), so once this is past the
                # budget the episode is late whatever comes next. Within it, the first byte decides.
                drained_s, restored_s = episode.borrowed_drained_s, episode.grant_restored_s
                assert drained_s is not None and restored_s is not None  # finished
                finished_after_s = max(drained_s, restored_s) - episode.t0_s
                if finished_after_s > episode.budget_s:
                    self._judge(episode, finished_after_s)
            self._open_episodes.remove(episode)
            for listener in self.listeners:
                listener.restore_finished(episode)
