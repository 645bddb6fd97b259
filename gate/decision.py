"""The gate's decision for one request, as data: forward it, ask admission, or answer it here.

Sans-I/O. The live proxy and both virtual-time runners call ``decide`` with where the request
routes and, once asked, what admission said; they only carry out the answer (send the HTTP answer,
or hand the status and headers to the virtual client). So a 503 or a 429 carries the same status,
headers and error type live and in virtual time, by construction:

- ``NotReady`` (a lifecycle-managed model that cannot serve yet): ``Hold`` when the lifecycle
  allows holding it and the shell may (its first ask); else its status (503 in AIBrix's table),
  ``Retry-After`` in whole seconds when the lifecycle gives one, and the precise
  ``x-restorelens-retry-after-ms`` (and ``retry-after-ms``) when it predicts one;
  ``x-should-retry: true`` with a hint, ``false`` without one (only an operator or a new
  declaration brings such a model back);
- ``UnknownModel``: 400 behind a lifecycle (AIBrix's gateway answers 400 for a model it does not
  manage), 404 from a plain proxy;
- ``Routed`` and not yet admitted: ``Admit`` (the shell asks ``Admission``, which may queue);
- a ``Rejection``: 429 with the gate's own ``x-restorelens-retry-after-ms`` estimate and, when it
  is at least a second, ``Retry-After`` in whole seconds; rejected because the gate shuts down
  (``REJECT_DRAINING``), 503 (``draining``), as a held request is answered then;

every millisecond hint goes out twice, as ``x-restorelens-retry-after-ms`` (restorelens's own
client) and ``retry-after-ms`` (what the OpenAI, Anthropic and Azure SDKs read first), and every
answer a retry will get past (a waking model, a queue rejection, draining, a preemption) says
``x-should-retry: true``;
- a ``Grant``: ``Forward`` to the routed engine, with the engine-side priority the policy sets.
"""

from __future__ import annotations

from dataclasses import dataclass

from restorelens.protocol import PREEMPTED, RETRY_AFTER_MS_HEADER, SDK_RETRY_AFTER_MS_HEADER, SHOULD_RETRY_HEADER

from .grants import REJECT_DRAINING, Grant, Rejection
from .policies.interface import AdmissionPolicy
from .retry_hint import retry_after_header
from .routing import NotReady, RouteAnswer, Routed, UnknownModel

__all__ = ["RETRY_AFTER", "RETRY_AFTER_MS", "SDK_RETRY_AFTER_MS", "SHOULD_RETRY", "SHUTTING_DOWN", "Admit", "Answer", "Forward", "Hold", "Respond", "decide",
           "draining", "preempted", "static_route"]

RETRY_AFTER = "retry-after"
#: The gate's estimate in milliseconds: finer than Retry-After's whole seconds, for clients that know it.
RETRY_AFTER_MS = RETRY_AFTER_MS_HEADER
#: The same estimate under the name the common SDKs read (milliseconds, before Retry-After).
SDK_RETRY_AFTER_MS = SDK_RETRY_AFTER_MS_HEADER
SHOULD_RETRY = SHOULD_RETRY_HEADER
_RETRY = ((SHOULD_RETRY, "true"),)
_NO_RETRY = ((SHOULD_RETRY, "false"),)
#: The error type of a request answered because the gate shuts down.
SHUTTING_DOWN = "shutting_down"


@dataclass(frozen=True, slots=True)
class Admit:
    """Routed to ``upstream``: ask admission for a grant, then decide again with its answer."""

    upstream: str


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the request to ``upstream``; ``priority`` goes into the body when not None."""

    upstream: str
    priority: int | None


@dataclass(frozen=True, slots=True)
class Hold:
    """Keep the request open until the model serves or ``until_s``, then decide again (without holding)."""

    until_s: float


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer without forwarding: an OpenAI-style JSON error with these headers (lower-case names)."""

    status: int
    message: str
    error_type: str
    headers: tuple[tuple[str, str], ...] = ()


Answer = Admit | Forward | Hold | Respond


def decide(
    route: RouteAnswer,
    admitted: Grant | Rejection | None = None,
    *,
    model: str | None,
    traffic_class: str,
    policy: AdmissionPolicy,
    lifecycle: bool,
    may_hold: bool = False,
) -> Answer:
    """What the gate does with a request for ``model`` that routes to ``route``.

    ``admitted`` is admission's answer, read only for a ``Routed`` request. ``lifecycle`` says
    whether a lifecycle router fronts models here (it decides the unknown-model status).
    ``may_hold``: the shell can hold this request (its first ask, and room to hold it).
    """
    if isinstance(route, NotReady):
        if may_hold and route.hold_until_s is not None:
            return Hold(route.hold_until_s)
        headers: tuple[tuple[str, str], ...] = ()
        if route.retry_after_ms is not None:
            headers += _ms_headers(route.retry_after_ms)
        if route.retry_after_s is not None:
            headers += ((RETRY_AFTER, str(route.retry_after_s)),)
        headers += _NO_RETRY if route.retry_after_s is None else _RETRY
        message = route.message or f"model {model!r} is not ready ({route.phase}/{route.reason})"
        return Respond(route.status_code, message, "not_ready", headers)
    if isinstance(route, UnknownModel):
        return Respond(400 if lifecycle else 404, f"model {model!r} is not served by this gate", "model_not_found")
    if admitted is None:
        return Admit(route.upstream_url.rstrip("/"))
    if isinstance(admitted, Rejection):
        if admitted.reason == REJECT_DRAINING:
            return draining(admitted.retry_after_ms)
        return Respond(429, f"{traffic_class} request not admitted ({admitted.reason})", "admission_rejected",
                       _rejection_headers(admitted.retry_after_ms))
    return Forward(route.upstream_url.rstrip("/"), policy.upstream_priority(traffic_class))


def preempted(retry_after_ms: int) -> Respond:
    """The answer to a loan taken back at restoration (``lend-preempt``): 503 with a retry hint,
    always with a Retry-After of at least 1 s, since the client should come back (its retry waits
    in the gate's queue). Sent as the HTTP answer when no byte went out yet, else as the stream's
    last event (``gate/proxy.py``)."""
    seconds = retry_after_header(retry_after_ms) or "1"
    return Respond(503, "borrowed capacity was taken back for returning interactive demand; retry later",
                   PREEMPTED, (*_ms_headers(retry_after_ms), (RETRY_AFTER, seconds), *_RETRY))


def draining(retry_after_ms: int | None) -> Respond:
    """The answer to a request that was waiting for a grant when the gate began to shut down: 503
    now, not the 429 its wait would have ended in after the shutdown (a supervisor's SIGKILL would
    have cut it first). Always with a Retry-After of at least 1 s: another replica, or this one
    restarted, may serve it at once."""
    headers = () if retry_after_ms is None else _ms_headers(retry_after_ms)
    return Respond(503, "the gate is shutting down; retry", SHUTTING_DOWN,
                   (*headers, (RETRY_AFTER, retry_after_header(retry_after_ms) or "1"), *_RETRY))


def _ms_headers(retry_after_ms: int) -> tuple[tuple[str, str], ...]:
    value = str(retry_after_ms)
    return ((RETRY_AFTER_MS, value), (SDK_RETRY_AFTER_MS, value))


def _rejection_headers(retry_after_ms: int | None) -> tuple[tuple[str, str], ...]:
    if retry_after_ms is None:
        return _RETRY
    seconds = retry_after_header(retry_after_ms)
    if seconds is None:
        return (*_ms_headers(retry_after_ms), *_RETRY)
    return (*_ms_headers(retry_after_ms), (RETRY_AFTER, seconds), *_RETRY)


def static_route(upstream: str | None, model: str | None) -> Routed | UnknownModel:
    """A static upstream table's answer as a route: the URL it picked, or none for ``model``."""
    return Routed(upstream) if upstream is not None else UnknownModel(model or "")
