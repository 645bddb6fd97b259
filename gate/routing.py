"""The seam between the gate's proxy and the ModelClaim lifecycle driver.

The proxy asks a ``ModelRouter`` where a model's requests go. A router answers ``Routed`` (forward to
this engine), ``NotReady`` (answer 503, with Retry-After when the lifecycle gives one, or hold the
request until ``hold_until_s`` and ask again) or ``UnknownModel`` (not this router's model). The lifecycle driver implements the
protocol; the proxy never imports the lifecycle's modules, so either side changes alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from opentelemetry.trace import SpanContext

__all__ = ["ANY_MODEL", "ModelRouter", "NotReady", "RouteAnswer", "Routed", "UnknownModel", "UpstreamTable"]

#: Upstream key for "every model not listed" (``--upstream URL`` without ``MODEL=``).
ANY_MODEL = "*"


@dataclass(frozen=True, slots=True)
class Routed:
    """Forward to ``upstream_url`` (an OpenAI-compatible engine base URL)."""

    upstream_url: str


@dataclass(frozen=True, slots=True)
class NotReady:
    """Answer without forwarding: 503 with ``Retry-After: retry_after_s`` (omitted when None).

    ``retry_after_ms``: the precise hint (``x-restorelens-retry-after-ms``), when the lifecycle
    predicts one. ``hint_source`` (fixed / calibrated / prior), ``hint_mode`` and
    ``predicted_ready_in_s`` (seconds until the model is predicted to serve) go on the span.
    ``hold_until_s``: the shell may hold the request until then (or until the model serves) and
    route it again, instead of answering now. ``hint_capped``: the wait predicted was longer than
    the longest hint the gate sends (``[modelclaim] max_hint_s``); the hint says that longest one.
    """

    phase: str
    reason: str
    retry_after_s: int | None
    status_code: int = 503
    message: str = ""
    retry_after_ms: int | None = None
    hint_source: str | None = None
    hint_mode: str | None = None
    predicted_ready_in_s: float | None = None
    hold_until_s: float | None = None
    hint_capped: bool = False


@dataclass(frozen=True, slots=True)
class UnknownModel:
    """The router does not manage this model (the gate answers 400 for a lifecycle-managed gateway)."""

    model: str


RouteAnswer = Routed | NotReady | UnknownModel


@runtime_checkable
class ModelRouter(Protocol):
    def models(self) -> Collection[str]:
        """Models this router manages."""

    def route(self, model: str, now_s: float, trigger: SpanContext | None = None,
              retries_taken: int | None = None) -> RouteAnswer:
        """Where a request for ``model`` arriving at ``now_s`` goes; may trigger a wake (deduplicated).

        ``trigger`` is the requesting ``gate.request`` span's context, for the wake span's link.
        ``retries_taken``: the retries the client says it took (``x-stainless-retry-count``), else None.
        """

    async def wait_routable(self, model: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` (clock seconds) for ``model`` to serve; True when it does (a held request)."""

    def request_started(self, model: str, now_s: float) -> None:
        """A routed request began (the engine is busy; idle timers stop)."""

    def request_finished(self, model: str, now_s: float) -> None:
        """A routed request ended, however it ended (idle timers restart)."""

    async def start(self) -> None:
        """Start background work (idle sleep timers, readiness polling); called in the app lifespan."""

    async def stop(self) -> None:
        """Stop background work and release engines the router started."""

    def register_metrics(self, registry: Any) -> None:
        """Add the lifecycle's metrics to the gate's prometheus ``CollectorRegistry``."""

    def routes(self) -> Sequence[Any]:
        """Starlette routes the gate mounts (read-only status; control endpoints check the bearer token)."""


class UpstreamTable:
    """Model -> engine base URLs; several URLs for one model are used in turn."""

    def __init__(self, upstreams: Mapping[str, list[str]]) -> None:
        self._cycles: dict[str, Iterator[str]] = {m: itertools.cycle([u.rstrip("/") for u in urls]) for m, urls in upstreams.items()}
        self.urls = {m: [u.rstrip("/") for u in urls] for m, urls in upstreams.items()}

    def pick(self, model: str | None) -> str | None:
        cycle = self._cycles.get(model or ANY_MODEL) or self._cycles.get(ANY_MODEL)
        return next(cycle) if cycle is not None else None
