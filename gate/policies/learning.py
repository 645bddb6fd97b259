"""What the budget-aware lenders learn from what passes the gate: the engine's rates per token
(``EngineRates``) and how long the protected class's quiet spells last (``HoldOff``)."""

from __future__ import annotations

import math
from collections import deque

from .interface import RequestSize

__all__ = ["EngineRates", "HoldOff", "quantile"]

#: The longest hold-off, in priors (5 s x 12 = one minute at the defaults).
MAX_HOLD_OFF_RATIO = 12.0
#: How far one learnt sample may stray from its prior, either way.
MAX_SAMPLE_RATIO = 100.0


def _within(sample: float, prior: float) -> float:
    return min(max(sample, prior / MAX_SAMPLE_RATIO), prior * MAX_SAMPLE_RATIO)


def quantile(values: list[float], q: float) -> float:
    """Nearest rank (the value at rank ceil(q*n)), as the study reports its percentiles."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class EngineRates:
    """The engine's effective prefill and decode times per token, learnt from completed requests.

    A completion observed by the gate gives time to first byte after the grant (queueing in the
    engine, then prefill) and the stream after it (decode). Dividing by the request's prompt tokens
    and by its ``max_tokens`` gives rates that predict the same request's duration again, queueing
    and batch-sharing included: what a loan costs on this engine under this load. Until
    ``min_samples`` completions were seen, the priors hold.
    """

    def __init__(self, prefill_s_per_token: float, decode_s_per_token: float, *, window: int = 64,
                 min_samples: int = 3) -> None:
        self.prior = (prefill_s_per_token, decode_s_per_token)
        self.min_samples = min_samples
        self._prefill: deque[float] = deque(maxlen=window)
        self._decode: deque[float] = deque(maxlen=window)

    def observe(self, size: RequestSize, ttfb_s: float | None, stream_s: float | None) -> None:
        # One odd request (a cached prompt, a burst of queueing) must not move a rate a hundredfold:
        # each sample is held within a factor of MAX_SAMPLE_RATIO of the prior.
        if ttfb_s is not None and ttfb_s >= 0 and size.prompt_tokens > 0:
            self._prefill.append(_within(ttfb_s / size.prompt_tokens, self.prior[0]))
        if stream_s is not None and stream_s >= 0 and size.max_tokens > 0:
            self._decode.append(_within(stream_s / size.max_tokens, self.prior[1]))

    @property
    def prefill_s_per_token(self) -> float:
        # The median: one request stuck behind a long queue must not make every loan look long.
        return quantile(list(self._prefill), 0.5) if len(self._prefill) >= self.min_samples else self.prior[0]

    @property
    def decode_s_per_token(self) -> float:
        return quantile(list(self._decode), 0.5) if len(self._decode) >= self.min_samples else self.prior[1]

    def service_s(self, size: RequestSize) -> float:
        return size.prompt_tokens * self.prefill_s_per_token + size.max_tokens * self.decode_s_per_token


class HoldOff:
    """How long the protected class must stay idle before lending resumes: a quantile of its
    inter-arrival times (a gap shorter than that is, most of the time, not the end of demand)."""

    def __init__(self, prior_s: float, quantile: float, *, window: int = 256, min_samples: int = 8) -> None:
        self.prior_s = prior_s
        self.quantile = quantile
        self.min_samples = min_samples
        self._gaps: deque[float] = deque(maxlen=window)
        self._last_arrival_s: float | None = None

    def observe_arrival(self, now_s: float) -> None:
        if self._last_arrival_s is not None:
            self._gaps.append(max(0.0, now_s - self._last_arrival_s))
        self._last_arrival_s = now_s

    @property
    def hold_off_s(self) -> float:
        if len(self._gaps) < self.min_samples:
            return self.prior_s
        # A night without traffic is one gap too: the learnt hold-off never exceeds MAX_HOLD_OFF_RATIO
        # priors, or a quiet spell would stop lending for hours.
        return min(quantile(list(self._gaps), self.quantile), self.prior_s * MAX_HOLD_OFF_RATIO)
