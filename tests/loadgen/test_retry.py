from __future__ import annotations

import httpx
import pytest

from restorelens.errors import SettingError
from restorelens.loadgen.retry import (
    ExponentialBackoff,
    FixedInterval,
    HonourHintMs,
    HonourRetryAfter,
    RetryPolicy,
    make_policy,
)


def test_honour_waits_exactly_the_hint() -> None:
    decision = HonourRetryAfter().decide(503, {"Retry-After": "10"}, attempt=1, now_s=0.0, first_attempt_s=0.0)
    assert decision.retry and decision.wait_s == 10.0 and decision.retry_after.seconds == 10.0


def test_honour_reads_httpx_headers_and_the_date_header() -> None:
    headers = httpx.Headers([("retry-after", "Thu, 01 Jan 2026 00:00:20 GMT"), ("date", "Thu, 01 Jan 2026 00:00:00 GMT")])
    assert HonourRetryAfter().decide(503, headers, 1, now_s=5.0, first_attempt_s=0.0).wait_s == 20.0


def test_honour_falls_back_to_its_backoff_on_invalid_hint() -> None:
    fallback = FixedInterval(interval_s=2.0)
    decision = HonourRetryAfter(fallback=fallback).decide(503, {"retry-after": "-3"}, 1, 0.0, 0.0)
    assert decision.retry and decision.wait_s == 2.0 and decision.retry_after.invalid == "negative"


def test_huge_hint_is_clamped_to_the_deadline() -> None:
    policy = HonourRetryAfter(deadline_s=60.0)
    decision = policy.decide(503, {"retry-after": "99999999999"}, attempt=1, now_s=15.0, first_attempt_s=10.0)
    assert decision.retry and decision.clamped and decision.wait_s == pytest.approx(55.0)
    assert decision.retry_after.invalid == "too-large"
    final = policy.decide(503, {"retry-after": "10"}, attempt=2, now_s=70.0, first_attempt_s=10.0)
    assert not final.retry and final.stop_reason == "deadline"


def test_max_attempts_counts_the_first_attempt() -> None:
    policy = FixedInterval(max_attempts=3)
    assert policy.decide(503, None, 2, 0.0, 0.0).retry
    stop = policy.decide(503, None, 3, 0.0, 0.0)
    assert not stop.retry and stop.stop_reason == "max-attempts"


@pytest.mark.parametrize("status", [200, 400, 404, 500, 501])
def test_non_retryable_answers_are_final(status: int) -> None:
    decision = HonourRetryAfter().decide(status, {"retry-after": "1"}, 1, 0.0, 0.0)
    assert not decision.retry and decision.stop_reason == "final-status"


@pytest.mark.parametrize("status", [None, 429, 502, 503, 504])
def test_retryable_answers_and_transport_failures(status: int | None) -> None:
    assert FixedInterval().decide(status, None, 1, 0.0, 0.0).retry


def test_full_jitter_is_within_the_exponential_ceiling_and_reproducible() -> None:
    policy = ExponentialBackoff(base_s=1.0, cap_s=8.0, seed=7, max_attempts=20)
    for attempt in range(1, 10):
        ceiling = min(8.0, 2.0 ** (attempt - 1))
        waits = [policy.decide(503, None, attempt, 0.0, 0.0, key=f"r{i}").wait_s for i in range(50)]
        assert all(0.0 <= w < ceiling for w in waits)
        assert max(waits) > ceiling / 2  # jitter spreads over the whole range, not a constant
    again = ExponentialBackoff(base_s=1.0, cap_s=8.0, seed=7, max_attempts=20)
    assert again.decide(503, None, 4, 0.0, 0.0, "r3") == policy.decide(503, None, 4, 0.0, 0.0, "r3")
    other_seed = ExponentialBackoff(base_s=1.0, cap_s=8.0, seed=8, max_attempts=20)
    assert other_seed.decide(503, None, 4, 0.0, 0.0, "r3").wait_s != policy.decide(503, None, 4, 0.0, 0.0, "r3").wait_s


def test_backoff_and_fixed_ignore_the_hint_but_report_it() -> None:
    decision = FixedInterval(interval_s=1.0).decide(503, {"retry-after": "10"}, 1, 0.0, 0.0)
    assert decision.wait_s == 1.0 and decision.retry_after.seconds == 10.0


def test_make_policy_by_name_and_bad_settings() -> None:
    for name in ("honour-retry-after", "honour-hint-ms", "backoff", "fixed"):
        policy = make_policy(name, max_attempts=4, deadline_s=30.0)
        assert isinstance(policy, RetryPolicy) and policy.name == name and policy.max_attempts == 4
    with pytest.raises(SettingError, match="retry.policy"):
        make_policy("eventually")
    with pytest.raises(SettingError, match="max_attempts"):
        FixedInterval(max_attempts=0)
    with pytest.raises(SettingError, match="deadline_s"):
        FixedInterval(deadline_s=float("inf"))


def test_honour_hint_ms_waits_the_gate_s_precise_hint_and_keeps_the_header_text() -> None:
    headers = {"retry-after": "5", "x-restorelens-retry-after-ms": "4192"}
    decision = HonourHintMs().decide(503, headers, 1, now_s=0.0, first_attempt_s=0.0)
    assert decision.retry and decision.wait_s == 4.192
    assert (decision.retry_after.seconds, decision.retry_after.raw) == (4.192, "5")
    assert HonourRetryAfter().decide(503, headers, 1, 0.0, 0.0).wait_s == 5.0  # the plain policy: whole seconds


@pytest.mark.parametrize("value", ["", "-5", "4.2", "²", "١٢", "1" * 10, "10, 20"])
def test_honour_hint_ms_ignores_a_precise_hint_it_cannot_read_and_honours_retry_after(value: str) -> None:
    decision = HonourHintMs().decide(503, {"retry-after": "7", "x-restorelens-retry-after-ms": value}, 1, 0.0, 0.0)
    assert decision.wait_s == 7.0


def test_honour_hint_ms_reads_the_sdks_retry_after_ms_first_then_the_gates_own() -> None:
    both = {"retry-after": "5", "retry-after-ms": "3100", "x-restorelens-retry-after-ms": "4192"}
    assert HonourHintMs().decide(503, both, 1, 0.0, 0.0).wait_s == 3.1
    unreadable = {**both, "retry-after-ms": "3.1"}  # the next header decides, as with our own
    assert HonourHintMs().decide(503, unreadable, 1, 0.0, 0.0).wait_s == 4.192
    assert HonourHintMs().decide(503, {"retry-after": "5", "retry-after-ms": "250"}, 1, 0.0, 0.0).wait_s == 0.25


def test_honour_hint_ms_without_any_hint_backs_off() -> None:
    fallback = FixedInterval(interval_s=2.0)
    assert HonourHintMs(fallback=fallback).decide(503, {}, 1, 0.0, 0.0).wait_s == 2.0
