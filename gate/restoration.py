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

All times are arguments; nothing here reads a clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["DEFAULT_MAX_RETAINED", "LendingPeriod", "RestorationEpisode", "RestorationListener", "RestorationTracker"]

#: Records of each kind kept once finished (gate.max_retained_episodes).
DEFAULT_MAX_RETAINED = 10_000


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
    outstanding: set[int] = field(default_factory=set, repr=False)

    @property
    def finished(self) -> bool:
        return self.grant_restored_s is not None and self.borrowed_drained_s is not None

    @property
    def grant_restore_s(self) -> float | None:
        return None if self.grant_restored_s is None else self.grant_restored_s - self.t0_s

    @property
    def drain_s(self) -> float | None:
        return None if self.borrowed_drained_s is None else self.borrowed_drained_s - self.t0_s


class RestorationListener(Protocol):
    """Told when records open and finish (the span emitter and the metrics implement it)."""

    def lend_started(self, period: LendingPeriod) -> None: ...

    def lend_finished(self, period: LendingPeriod) -> None: ...

    def restore_started(self, episode: RestorationEpisode) -> None: ...

    def restore_finished(self, episode: RestorationEpisode) -> None: ...


class RestorationTracker:
    """Keeps lending periods and restoration episodes from the core's grant events.

    ``periods`` and ``episodes`` hold the most recent ``max_retained`` of each, oldest first;
    ``periods_started`` and ``episodes_started`` count all of them.
    """

    def __init__(self, listeners: list[RestorationListener] | None = None, *, max_retained: int = DEFAULT_MAX_RETAINED) -> None:
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
        self.episodes.append(episode)
        self._open_episodes.append(episode)
        for listener in self.listeners:
            listener.restore_started(episode)

    def floor_restored(self, at_s: float) -> None:
        """The protected floor is back at its nominal size at ``at_s``: lending stops, grants are restored."""
        self.stop_lending(at_s)
        for episode in list(self._open_episodes):
            if episode.grant_restored_s is None:
                episode.grant_restored_s = at_s
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
                    self._maybe_finish_episode(episode)

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

    def _maybe_finish_episode(self, episode: RestorationEpisode) -> None:
        if episode.finished:
            self._open_episodes.remove(episode)
            for listener in self.listeners:
                listener.restore_finished(episode)
