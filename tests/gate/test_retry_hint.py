"""Retry-After estimate: EWMA of completion intervals, no hint before enough samples, whole seconds."""

from __future__ import annotations

from restorelens.gate.retry_hint import RetryHint, retry_after_header


def test_no_estimate_before_three_intervals() -> None:
    hint = RetryHint()
    for t in (0.0, 2.0, 4.0):
        hint.observe_completion(t)
    assert hint.samples == 2 and hint.estimate_ms() is None
    hint.observe_completion(6.0)
    assert hint.estimate_ms() == 2000
    assert hint.estimate_ms(waiters_ahead=2) == 6000


def test_time_weighted_average_and_clamps() -> None:
    hint = RetryHint(half_life_s=5.0)
    for t in (0.0, 1.0, 2.0, 3.0):
        hint.observe_completion(t)
    hint.observe_completion(8.0)  # a 5 s gap is one half-life: halfway from 1 s to 5 s
    assert hint.mean_interval_s == 3.0
    fast = RetryHint()
    for t in (0.0, 0.001, 0.002, 0.003):
        fast.observe_completion(t)
    assert fast.estimate_ms() == 50
    assert fast.estimate_ms(waiters_ahead=10**9) == 30_000


def test_header_only_from_one_second_rounded_up() -> None:
    assert retry_after_header(None) is None
    assert retry_after_header(999) is None
    assert retry_after_header(1000) == "1"
    assert retry_after_header(1001) == "2"
