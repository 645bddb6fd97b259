"""What a run played: its results, and the summary ``restorelens run`` prints."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from restorelens.loadgen import RequestResult

__all__ = ["RunReport"]


@dataclass(frozen=True)
class RunReport:
    scenario: str
    arm: str
    seed: int
    mode: str
    run_id: str
    duration_s: float
    results: tuple[RequestResult, ...] = field(repr=False)
    slo_ttft_s: float = 5.0
    slo_e2e_s: float = 30.0
    #: Live runs compressed X times (for the mode label): every result time is in protocol seconds,
    #: live runs included (their clients read a ``ScaledClock``).
    time_scale: float = 1.0
    #: ModelClaim runs: when the first request went out (the wake episode's t0).
    t0_s: float | None = None

    def summary(self) -> dict[str, Any]:
        """Counts per (class, outcome), interactive SLO goodput and batch completions (req/s) over
        the whole run; for a ModelClaim run, what the first request's client saw instead.

        The goodput is named ``..._whole_run_rps``: ``interactive_slo_goodput_rps`` is the study's
        figure over the contention window alone (``restorelens experiment``, the policy summary)."""
        if self.t0_s is not None:
            return self._wake_summary()
        interactive = [r for r in self.results if r.traffic_class == "interactive"]
        good = sum(r.meets_slo(self.slo_ttft_s, self.slo_e2e_s) for r in interactive)
        ttfts = [r.ttft_s for r in interactive if r.ttft_s is not None]
        batch_ok = sum(1 for r in self.results if r.traffic_class == "batch" and r.outcome == "ok")
        return {
            **self._run_counts(),
            "interactive_slo_goodput_whole_run_rps": round(good / self.duration_s, 4),
            "interactive_slo_met_whole_run": f"{good}/{len(interactive)}",
            "interactive_ttft_p50_s": round(statistics.median(ttfts), 3) if ttfts else None,
            "batch_completions_rps": round(batch_ok / self.duration_s, 4),
        }

    def _run_counts(self) -> dict[str, Any]:
        """What every summary starts with: the run's labels, its requests and their outcomes."""
        x = self.time_scale
        outcomes = Counter(f"{r.traffic_class}:{r.outcome}" for r in self.results)
        return {
            "scenario": self.scenario,
            "arm": self.arm,
            "seed": self.seed,
            "mode": self.mode if x == 1 else f"{self.mode} (x{x:g})",
            "run_id": self.run_id,
            "requests": len(self.results),
            "outcomes": dict(sorted(outcomes.items())),
        }

    def _wake_summary(self) -> dict[str, Any]:
        assert self.t0_s is not None
        first = min(self.results, key=lambda r: r.start_s)
        t0 = self.t0_s
        success = next((a for a in first.attempts if a.status is not None and 200 <= a.status < 300), None)
        hint = first.attempts[0].retry_after.seconds if first.attempts else None
        return {
            **self._run_counts(),
            "first_request_statuses": list(first.statuses),
            "first_retry_after_s": hint,
            "success_attempt_s": None if success is None else round(success.start_s - t0, 3),
            "first_token_s": None if first.first_chunk_s is None else round(first.first_chunk_s - t0, 3),
        }
