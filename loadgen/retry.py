"""Retry policies: sans-I/O decisions about whether and when to send the next attempt.

A policy is a pure function of the last answer (status and headers), the attempt count and the
time. It never sleeps; the client (live) or the runner's event loop (virtual time) does the
waiting. Jitter comes from a hash of (seed, request key, attempt) rather than a shared RNG stream,
so a request's waits are the same whatever order requests interleave in: the same offered load
retries identically live and in virtual time, across arms.

Every policy has ``max_attempts`` (attempts in all, the first included) and ``deadline_s``: no
attempt starts later than ``first_attempt_s + deadline_s``. A wait that would cross the deadline
is clamped to it (one last attempt at the deadline); at the deadline the policy gives up.

Which answers are retried: 429, 502, 503 and 504 and transport failures (``status=None``), as
OTLP/HTTP and most HTTP clients do. Every other status is final.

``honour-hint-ms`` reads a precise hint in milliseconds, ``retry-after-ms`` (the name the common
SDKs read) first, then the gate's own ``x-restorelens-retry-after-ms`` (the gate sends both with
429s and, in calibrated mode, with a waking model's 503s), and waits exactly that; without either,
it waits the Retry-After as ``honour-retry-after`` does. Never earlier than the hint.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from restorelens.errors import SettingError
from restorelens.loadgen.retry_after import NO_HINT, RetryAfter, parse_retry_after
from restorelens.protocol import RETRY_AFTER_MS_HEADER, SDK_RETRY_AFTER_MS_HEADER

__all__ = [
    "POLICY_NAMES",
    "RETRYABLE_STATUSES",
    "ExponentialBackoff",
    "FixedInterval",
    "HonourHintMs",
    "HonourRetryAfter",
    "RetryDecision",
    "RetryPolicy",
    "make_policy",
    "retry_after_of",
]

RETRYABLE_STATUSES = frozenset({429, 502, 503, 504})

#: Why a policy stopped: the answer was final, or a budget ran out.
STOP_FINAL = "final-status"
STOP_MAX_ATTEMPTS = "max-attempts"
STOP_DEADLINE = "deadline"


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """``retry``: send another attempt after ``wait_s``; otherwise ``stop_reason`` says why not.

    ``retry_after`` is the hint the answer carried (parsed), whatever the policy did with it.
    ``clamped``: the wait was cut to meet the deadline.
    """

    retry: bool
    wait_s: float
    retry_after: RetryAfter
    stop_reason: str | None = None
    clamped: bool = False


HeaderPairs = Mapping[str, str] | Sequence[tuple[str, str]]


def _header_lines(headers: HeaderPairs | None, name: str) -> list[str]:
    if headers is None:
        return []
    if hasattr(headers, "get_list"):  # httpx.Headers: keep each field line, never split on commas
        return list(headers.get_list(name))  # type: ignore[union-attr]
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [value for key, value in items if key.lower() == name]


def retry_after_of(headers: HeaderPairs | None, now_s: float) -> RetryAfter:
    """The parsed Retry-After of a response's headers (relative to its ``Date`` when present)."""
    lines = _header_lines(headers, "retry-after")
    if not lines:
        return NO_HINT
    dates = _header_lines(headers, "date")
    return parse_retry_after(lines, now_s, dates[0] if len(dates) == 1 else None)


def unit_jitter(seed: int, key: str, attempt: int) -> float:
    """A uniform number in [0, 1) fixed by (seed, key, attempt)."""
    digest = hashlib.blake2b(f"{seed}\x00{key}\x00{attempt}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@runtime_checkable
class RetryPolicy(Protocol):
    name: str
    max_attempts: int
    deadline_s: float

    def decide(
        self,
        status: int | None,
        headers: HeaderPairs | None,
        attempt: int,
        now_s: float,
        first_attempt_s: float,
        key: str = "",
    ) -> RetryDecision:
        """After attempt number ``attempt`` (1-based) answered ``status`` at ``now_s``: retry or stop."""


def _check_budget(max_attempts: int, deadline_s: float) -> None:
    if max_attempts < 1:
        raise SettingError("retry.max_attempts", f"must be at least 1, got {max_attempts}")
    if not (deadline_s > 0 and math.isfinite(deadline_s)):
        raise SettingError("retry.deadline_s", f"must be a positive number of seconds, got {deadline_s}")


@dataclass(frozen=True)
class _PolicyBase:
    max_attempts: int = 10
    deadline_s: float = 300.0

    def __post_init__(self) -> None:
        _check_budget(self.max_attempts, self.deadline_s)

    def _wait_s(self, hint: RetryAfter, attempt: int, key: str) -> float:
        raise NotImplementedError

    def _hint_of(self, headers: HeaderPairs | None, now_s: float) -> RetryAfter:
        return retry_after_of(headers, now_s)

    def decide(
        self,
        status: int | None,
        headers: HeaderPairs | None,
        attempt: int,
        now_s: float,
        first_attempt_s: float,
        key: str = "",
    ) -> RetryDecision:
        hint = self._hint_of(headers, now_s)
        if status is not None and status not in RETRYABLE_STATUSES:
            return RetryDecision(False, 0.0, hint, STOP_FINAL)
        if attempt >= self.max_attempts:
            return RetryDecision(False, 0.0, hint, STOP_MAX_ATTEMPTS)
        remaining_s = first_attempt_s + self.deadline_s - now_s
        if remaining_s <= 0:
            return RetryDecision(False, 0.0, hint, STOP_DEADLINE)
        wait_s = max(0.0, self._wait_s(hint, attempt, key))
        if wait_s > remaining_s:
            return RetryDecision(True, remaining_s, hint, clamped=True)
        return RetryDecision(True, wait_s, hint)


@dataclass(frozen=True)
class ExponentialBackoff(_PolicyBase):
    """Full jitter (AWS architecture blog): wait ~ U(0, min(cap_s, base_s * 2**(attempt-1))).

    Ignores Retry-After (it is still parsed and recorded), as a client that does not read it would.
    """

    base_s: float = 0.5
    cap_s: float = 30.0
    seed: int = 0
    name: str = field(default="backoff", init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (0 < self.base_s <= self.cap_s):
            raise SettingError("retry.base_s", f"need 0 < base_s <= cap_s, got {self.base_s} and {self.cap_s}")

    def _wait_s(self, hint: RetryAfter, attempt: int, key: str) -> float:
        ceiling_s = min(self.cap_s, self.base_s * 2.0 ** min(attempt - 1, 60))
        return ceiling_s * unit_jitter(self.seed, key, attempt)


@dataclass(frozen=True)
class FixedInterval(_PolicyBase):
    """The same wait after every retryable answer; ignores Retry-After."""

    interval_s: float = 1.0
    name: str = field(default="fixed", init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not (self.interval_s >= 0 and math.isfinite(self.interval_s)):
            raise SettingError("retry.interval_s", f"must be >= 0 seconds, got {self.interval_s}")

    def _wait_s(self, hint: RetryAfter, attempt: int, key: str) -> float:
        return self.interval_s


@dataclass(frozen=True)
class HonourRetryAfter(_PolicyBase):
    """Wait exactly the server's Retry-After; without a usable hint, fall back to ``fallback``.

    The fallback (default: full-jitter backoff, as OTLP/HTTP prescribes when the header is absent)
    also covers invalid hints, which RFC 9110 says to ignore.
    """

    fallback: ExponentialBackoff | FixedInterval = field(default_factory=ExponentialBackoff)
    name: str = field(default="honour-retry-after", init=False)

    def _wait_s(self, hint: RetryAfter, attempt: int, key: str) -> float:
        if hint.seconds is not None:
            return hint.seconds
        return self.fallback._wait_s(hint, attempt, key)


@dataclass(frozen=True)
class HonourHintMs(HonourRetryAfter):
    """Wait exactly ``retry-after-ms``, else ``x-restorelens-retry-after-ms``, when the answer carries
    a valid one, else as ``HonourRetryAfter``. ``RetryDecision.retry_after`` keeps the Retry-After header's text in
    ``raw`` with the wait used in ``seconds``."""

    name: str = field(default="honour-hint-ms", init=False)

    def _hint_of(self, headers: HeaderPairs | None, now_s: float) -> RetryAfter:
        hint = retry_after_of(headers, now_s)
        for name in (SDK_RETRY_AFTER_MS_HEADER, RETRY_AFTER_MS_HEADER):
            lines = _header_lines(headers, name)
            text = lines[0].strip() if len(lines) == 1 else ""
            # At most 9 digits (under 12 days): a larger or malformed value is ignored, as RFC 9110
            # says of an invalid Retry-After, and the next header decides.
            if text.isascii() and text.isdigit() and len(text) <= 9:
                return RetryAfter(int(text) / 1000, hint.raw, hint.invalid)
        return hint


POLICY_NAMES = ("honour-retry-after", "honour-hint-ms", "backoff", "fixed")


def make_policy(
    name: str,
    *,
    max_attempts: int = 10,
    deadline_s: float = 300.0,
    seed: int = 0,
    interval_s: float = 1.0,
    base_s: float = 0.5,
    cap_s: float = 30.0,
) -> RetryPolicy:
    """A policy by its span name (``restore.retry_policy``), e.g. from a CLI flag."""
    backoff = ExponentialBackoff(max_attempts, deadline_s, base_s=base_s, cap_s=cap_s, seed=seed)
    if name == "honour-retry-after":
        return HonourRetryAfter(max_attempts, deadline_s, fallback=backoff)
    if name == "honour-hint-ms":
        return HonourHintMs(max_attempts, deadline_s, fallback=backoff)
    if name == "backoff":
        return backoff
    if name == "fixed":
        return FixedInterval(max_attempts, deadline_s, interval_s=interval_s)
    raise SettingError("retry.policy", f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
