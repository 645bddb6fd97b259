"""The tracer providers of one run: one per service, as a live deployment has one per process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ServiceProviders"]


@dataclass(frozen=True)
class ServiceProviders:
    """One tracer provider per service, as the live run has one process-side provider each."""

    client: Any = None
    gate: Any = None
    engine: Any = None
    #: The exporter the providers share (``RunTelemetry`` sets it), for providers a runner adds.
    exporter: Any = None
