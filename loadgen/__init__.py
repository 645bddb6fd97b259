"""restorelens.loadgen: the retrying traced client, workloads, scenarios, the runner and the probe.

Names are imported lazily (PEP 562) so that ``restorelens --help`` does not pay for httpx and the
OpenTelemetry SDK; ``from restorelens.loadgen import X`` works for every name in ``__all__``.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "ExponentialBackoff": "retry",
    "FixedInterval": "retry",
    "HonourRetryAfter": "retry",
    "POLICY_NAMES": "retry",
    "RETRYABLE_STATUSES": "retry",
    "RetryAfter": "retry_after",
    "RetryDecision": "retry",
    "RetryPolicy": "retry",
    "make_policy": "retry",
    "parse_http_date": "retry_after",
    "parse_retry_after": "retry_after",
    "retry_after_of": "retry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
