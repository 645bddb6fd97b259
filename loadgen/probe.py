"""The first-request probe: how long a sleeping (or cold) model behind a gateway takes to serve.

Point it at any OpenAI-compatible gateway (AIBrix, the restorelens gate, vLLM itself). It sends one
request with the retrying traced client and, when given a readiness URL, polls it alongside. What
it measures from the client's side has names of its own, never a wake episode's (t0 is when the
first attempt was sent):

- ``first_status`` / ``retry_after_s``: what the first answer said;
- ``polled_ready_s``: the first readiness poll that said ready (an upper bound on engine
  readiness, within one poll interval; ``polled_not_ready_s`` is the last poll that still said not
  ready). What says ready is a ``restorelens.readiness`` check: by default the engine's own sleep
  state (``GET /is_sleeping`` false), because vLLM answers ``/health`` 200 while asleep;
  ``readiness`` says which check answered, and whether the engine's sleep state was known;
- ``success_s``: when the client's successful attempt ended;
- ``polled_overshoot_s``: start of the successful attempt minus ``polled_ready_s``;
- ``polled_hint_error_s``: ``retry_after_s - polled_ready_s`` (positive: the hint was pessimistic);
- ``attempts`` and ``first_chunk_s`` (first chunk of the answer, or its end).

``ready_s``, ``observed_s``, ``overshoot_s``, ``hint_s`` and ``hint_error_s`` are the wake
episode's (docs/analysis.md, ``wake_episodes``), filled by ``with_episode`` from the report's own
row for this request when the span store holding the lifecycle's spans is given (``restorelens
probe --db``): one definition, whichever command prints them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import httpx

from restorelens.clock import Clock
from restorelens.loadgen.client import TracedClient
from restorelens.loadgen.request import ClientRequest, RequestResult
from restorelens.readiness import AUTO, JSON, ReadinessCheck, check_ready

__all__ = ["EPISODE_FIELDS", "ProbeReport", "ReadinessPoller", "decompose", "readiness_target", "run_probe"]

DEFAULT_POLL_INTERVAL_S = 0.5
#: Check paths a readiness URL may end in: the URL is then read as the engine's base URL.
CHECK_PATHS = ("/health", "/is_sleeping", "/v1/completions")
#: The wake episode's columns the probe shows, under the report's names.
EPISODE_FIELDS = ("wake_path", "ready_s", "observed_s", "overshoot_s", "hint_s", "hint_error_s", "censored_reason")


@dataclass(frozen=True, slots=True)
class ProbeReport:
    outcome: str
    first_status: int | None
    retry_after_s: float | None
    retry_after_raw: str | None
    retry_after_invalid: str | None
    polled_ready_s: float | None
    polled_not_ready_s: float | None
    success_s: float | None
    polled_overshoot_s: float | None
    polled_hint_error_s: float | None
    attempts: int
    statuses: tuple[int | None, ...]
    first_chunk_s: float
    readiness: str | None = None
    #: The wake episode of this request (``EPISODE_FIELDS``), when a span store was read.
    wake_path: str | None = None
    ready_s: float | None = None
    observed_s: float | None = None
    overshoot_s: float | None = None
    hint_s: float | None = None
    hint_error_s: float | None = None
    censored_reason: str | None = None
    #: Why the wake episode's figures are missing (no store given, no episode found), else None.
    episode_note: str | None = "no span store read (--db)"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def with_episode(self, row: dict[str, Any] | None, note: str | None = None) -> ProbeReport:
        """This report with the wake episode's figures from ``row`` (a ``wake_episodes`` row), or
        with ``note`` saying why there are none."""
        if row is None:
            return replace(self, episode_note=note)
        return replace(self, episode_note=None, **{name: row[name] for name in EPISODE_FIELDS})

    def lines(self) -> list[str]:
        def s(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f} s"

        hint = s(self.retry_after_s)
        if self.retry_after_invalid:
            hint = f"{hint} (invalid: {self.retry_after_raw!r}, {self.retry_after_invalid})"
        return [
            f"outcome        {self.outcome}",
            f"first status   {self.first_status if self.first_status is not None else 'no answer'}",
            f"retry-after    {hint}",
            f"polled ready   {s(self.polled_ready_s)}"
            + (f" (not yet at {s(self.polled_not_ready_s)})" if self.polled_not_ready_s is not None else ""),
            f"success        {s(self.success_s)}",
            f"polled oversh. {s(self.polled_overshoot_s)}",
            f"attempts       {self.attempts} ({', '.join(str(x) if x is not None else 'failed' for x in self.statuses)})",
            f"first chunk    {s(self.first_chunk_s)}",
        ] + ([f"readiness      {self.readiness}"] if self.readiness else []) + self._episode_lines(s)

    def _episode_lines(self, s: Callable[[float | None], str]) -> list[str]:
        if self.episode_note is not None:
            return [f"wake episode   - ({self.episode_note})"]
        censored = f", censored: {self.censored_reason}" if self.censored_reason else ""
        return [
            f"wake episode   {self.wake_path} (the report's figures{censored})",
            f"  ready        {s(self.ready_s)}",
            f"  observed     {s(self.observed_s)}",
            f"  overshoot    {s(self.overshoot_s)}",
            f"  hint         {s(self.hint_s)}",
            f"  hint error   {s(self.hint_error_s)}",
        ]


def readiness_target(url: str, check: ReadinessCheck) -> tuple[str, ReadinessCheck, str | None]:
    """The engine base URL and check a readiness URL means, and the check path it ended in, if any.

    A JSON check's URL is the full URL of its answer (its path becomes the check's path). For the
    other checks, a URL ending in ``/health``, ``/is_sleeping`` or ``/v1/completions`` is read as
    the engine's base URL with that path: the check picks its own path, so ``http://ENGINE/health``
    with ``auto`` asks ``/is_sleeping`` (the ``/health`` of a sleeping vLLM says 200).
    """
    parts = httpx.URL(url)
    path = parts.raw_path.decode("ascii")
    root = str(parts.copy_with(raw_path=b"/")).rstrip("/")
    if check.kind == JSON:
        return root, ReadinessCheck(JSON, path or "/", check.field, check.equals), None
    bare = path.split("?", 1)[0].rstrip("/")
    for suffix in CHECK_PATHS:
        if bare.endswith(suffix):
            return root + bare[: -len(suffix)], check, suffix
    return root + bare, check, None


class ReadinessPoller:
    """Run ``check`` against the engine at ``url`` until it says ready; records the last not-ready
    and the first ready time. ``url`` is a base URL (``readiness_target`` makes one); ``model`` is
    what a ``completion`` check asks for."""

    def __init__(
        self, url: str, clock: Clock, sleep: Callable[[float], Awaitable[Any]], interval_s: float,
        check: ReadinessCheck | None = None, model: str | None = None,
    ) -> None:
        self.url, self.clock, self.sleep, self.interval_s = url, clock, sleep, interval_s
        self.check, self.model = check or ReadinessCheck(AUTO), model
        self.ready_at_s: float | None = None
        self.not_ready_at_s: float | None = None
        self.ready_detail: str | None = None

    async def run(self, http: httpx.AsyncClient) -> None:
        while self.ready_at_s is None:
            sent_s = self.clock.now_s()
            answer = await check_ready(http, self.url, self.check, model=self.model)
            if answer.ready:
                # Readiness was reached between the last negative poll and this one's send.
                self.ready_at_s = sent_s
                self.ready_detail = answer.detail
            else:
                self.not_ready_at_s = sent_s
                await self.sleep(self.interval_s)


def decompose(
    result: RequestResult, ready_at_s: float | None = None, not_ready_at_s: float | None = None,
    readiness: str | None = None,
) -> ProbeReport:
    """The wake decomposition of one probed request (absolute times in, times after t0 out);
    ``readiness`` says what said ready."""
    first = result.attempts[0]
    t0 = first.start_s
    success = next((a for a in result.attempts if a.status is not None and 200 <= a.status < 300), None)
    ready_s = None if ready_at_s is None else max(0.0, ready_at_s - t0)
    hint = first.retry_after
    end_s = result.first_chunk_s if result.first_chunk_s is not None else result.end_s
    return ProbeReport(
        outcome=result.outcome,
        first_status=first.status,
        retry_after_s=hint.seconds,
        retry_after_raw=hint.raw,
        retry_after_invalid=hint.invalid,
        polled_ready_s=ready_s,
        polled_not_ready_s=None if not_ready_at_s is None or ready_at_s is None else max(0.0, not_ready_at_s - t0),
        success_s=None if success is None else success.end_s - t0,
        polled_overshoot_s=None if success is None or ready_s is None else max(0.0, success.start_s - t0 - ready_s),
        polled_hint_error_s=None if hint.seconds is None or ready_s is None else hint.seconds - ready_s,
        attempts=len(result.attempts),
        statuses=result.statuses,
        first_chunk_s=end_s - t0,
        readiness=readiness,
    )


async def run_probe(
    client: TracedClient,
    request: ClientRequest,
    *,
    readiness_url: str | None = None,
    readiness: ReadinessCheck | None = None,
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    clock: Clock | None = None,
    sleep: Callable[[float], Awaitable[Any]] | None = None,
) -> ProbeReport:
    """Send ``request`` through ``client`` while running ``readiness`` (default ``auto``) against
    ``readiness_url`` (read by ``readiness_target``); decompose the wait."""
    clock = clock or client.clock
    if readiness_url is None:
        return decompose(await client.request(request))
    base_url, check, _ = readiness_target(readiness_url, readiness or ReadinessCheck(AUTO))
    poller = ReadinessPoller(base_url, clock, sleep or client.sleep, poll_interval_s, check, request.model)
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as http:
        polling = asyncio.ensure_future(poller.run(http))
        try:
            result = await client.request(request)
            # A success means the model is ready: give the poller one more chance to see it.
            if result.outcome == "ok" and not polling.done():
                await asyncio.wait({polling}, timeout=poll_interval_s * 2 + 1.0)
        finally:
            polling.cancel()
            await asyncio.gather(polling, return_exceptions=True)
    said = f"{check.describe()}; ready when {poller.ready_detail}" if poller.ready_detail else check.describe()
    return decompose(result, poller.ready_at_s, poller.not_ready_at_s, said)
