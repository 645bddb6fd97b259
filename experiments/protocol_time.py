"""One protocol timeline for a live, time-scaled run, whatever stamped each span.

A live run at ``time_scale`` X plays the protocol X times faster than the wall. Every figure it
records must still read in protocol seconds, so that a 105-s protocol measures 105 s and a
Retry-After of 10 reads 10 at any scale. Two kinds of emitters take part:

- the ones we hand a clock (client, gate, lifecycle): they read ``ScaledClock``, which runs X
  times faster than the wall, so their spans, the hints they exchange and the waits they keep are
  protocol seconds already;
- the ones that stamp the wall themselves (the simulator, which divides its modelled durations by
  X, and the httpx instrumentation's ``POST`` spans): ``RescaledExporter`` maps their times onto
  the same timeline with the clock's own map, ``origin + (t - origin) * X``, and multiplies
  vLLM's latency attributes (seconds) by X.

``ProtocolTimeline`` builds both for a run: the clock, and per-service providers exporting
through the rescaling exporter into the run's shared exporter. The MoFlux and the ModelClaim live
runners use it alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from restorelens.clock import ScaledClock
from restorelens.experiments.providers import ServiceProviders
from restorelens.experiments.run_telemetry import SERVICE_NAMES
from restorelens.spans import VLLM_LATENCY_PREFIX, VLLM_LLM_REQUEST_ATTRIBUTES

__all__ = ["WALL_CLOCK_SCOPES", "ProtocolTimeline", "RescaledExporter"]

#: Instrumentation scopes whose spans carry wall-clock times (the SDK's clock, not ours).
WALL_CLOCK_SCOPES = frozenset({"opentelemetry.instrumentation.httpx", "restorelens.sim"})
_LATENCY_KEYS = frozenset(k for k in VLLM_LLM_REQUEST_ATTRIBUTES if k.startswith(VLLM_LATENCY_PREFIX))


class RescaledExporter(SpanExporter):
    """Maps spans stamped in compressed wall time onto the protocol timeline, then exports them.

    Spans of ``scopes`` (wall-stamped) are rescaled: a wall time t becomes ``origin_s + (t -
    origin_s) * time_scale`` (``ScaledClock``'s own map) and vLLM's latency attributes (seconds)
    are multiplied by ``time_scale``; spans already stamped with the scaled clock pass unchanged.
    """

    def __init__(self, inner: SpanExporter, origin_s: float, time_scale: float,
                 scopes: frozenset[str] = WALL_CLOCK_SCOPES) -> None:
        self.inner, self.origin_ns, self.time_scale, self.scopes = inner, int(origin_s * 1e9), time_scale, scopes

    def _ns(self, t_ns: int | None) -> int | None:
        return None if t_ns is None else self.origin_ns + round((t_ns - self.origin_ns) * self.time_scale)

    def _span(self, span: ReadableSpan) -> ReadableSpan:
        attributes = {k: (v * self.time_scale if k in _LATENCY_KEYS and isinstance(v, int | float) else v)
                      for k, v in (span.attributes or {}).items()}
        events = [Event(e.name, e.attributes, self._ns(e.timestamp)) for e in span.events]
        return ReadableSpan(name=span.name, context=span.context, parent=span.parent, resource=span.resource,
                            attributes=attributes, events=events, links=span.links, kind=span.kind,
                            status=span.status, start_time=self._ns(span.start_time), end_time=self._ns(span.end_time),
                            instrumentation_scope=span.instrumentation_scope)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        def wall(span: ReadableSpan) -> bool:
            return span.instrumentation_scope is not None and span.instrumentation_scope.name in self.scopes

        return self.inner.export([self._span(s) if wall(s) else s for s in spans])

    def shutdown(self) -> None:
        pass  # the run's telemetry owns the inner exporter

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _resource_of(provider: Any) -> dict[str, Any] | None:
    """The resource attributes of ``provider`` (a ``TracerProvider``), None for none."""
    resource = getattr(provider, "resource", None)
    return None if resource is None else dict(resource.attributes)


class ProtocolTimeline:
    """The clock and the span providers of one live run, on the protocol timeline.

    ``clock`` is the ``ScaledClock`` to give the client, the gate and the lifecycle; ``providers``
    are the ones to give every service. Unscaled (X = 1), or without a shared exporter to wrap,
    the run's own providers are used as they are. Close it after every server has stopped (their
    last spans, e.g. the gate's lending periods, are emitted on shutdown): closing flushes the
    providers it built into the run's exporter.
    """

    def __init__(self, providers: ServiceProviders, time_scale: float) -> None:
        from restorelens.telemetry import build_tracer_provider

        self.clock = ScaledClock(time_scale)
        self.providers = providers
        self._owned: list[Any] = []
        if time_scale != 1 and providers.exporter is not None:
            rescaled = RescaledExporter(providers.exporter, self.clock.start_s, time_scale)
            # each keeps its service's resource (the run's id and scenario among it)
            self._owned = [build_tracer_provider(SERVICE_NAMES[key], rescaled,
                                                 resource_attributes=_resource_of(getattr(providers, key)))
                           for key in ("client", "gate", "engine")]
            self.providers = ServiceProviders(*self._owned, exporter=providers.exporter)

    def close(self) -> None:
        for provider in self._owned:
            provider.shutdown()
        self._owned = []

    def __enter__(self) -> ProtocolTimeline:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
