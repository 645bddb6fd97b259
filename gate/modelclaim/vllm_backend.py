"""Engine control over vLLM's HTTP sleep API, for engines that already run (or the simulator).

vLLM (with ``VLLM_SERVER_DEV_MODE=1``, and ``--enable-sleep-mode`` on GPU platforms: the CPU
backend refuses that flag but serves the API) and ``restorelens sim`` serve:
``POST /sleep?level=N``, ``POST /wake_up``, ``GET /is_sleeping`` -> ``{"is_sleeping": bool}`` and
``GET /health``. Both answer ``/health`` 200 while asleep, so ``/health`` says only that the engine
runs; whether it can serve is the claim's readiness check (``restorelens.readiness``; ``auto``, the
default, asks ``/is_sleeping``).

``start`` attaches: it polls ``/health`` until the engine answers 200, then runs the readiness
check. An engine the check finds asleep (or, for a check that cannot see sleep, that
``/is_sleeping`` says is asleep) is reported attached and asleep, and the lifecycle keeps it
Sleeping until a request wakes it; a ready one is reported attached; otherwise the check is
repeated until it says one or the other, or ``start_timeout_s`` runs out. ``wake`` calls
``/wake_up`` and then repeats the check until it says ready; the ready time is the first moment
the engine said it was awake by that check (for ``auto``, the ``/wake_up`` answer when that says
``awake``, else the first poll that saw it). ``alive`` is ``/health`` alone: a sleeping engine is
alive. ``stop`` does nothing: this backend does not own the engines' processes.

Readiness is polled on ``polls.PollSchedule``: every ``poll_interval_s`` (real seconds: the
operator's setting) until near the time the call is expected to be ready, finely around it. What
is expected comes from the lifecycle (``use_estimates``: the router plugs in its
``WakeEstimates.for_call``); with nothing plugged in, or nothing known, every ``poll_interval_s``.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import httpx

from restorelens.clock import Clock, WallClock
from restorelens.gate.modelclaim.actions import SleepEngine, StartEngine, StopEngine, WakeEngine
from restorelens.gate.modelclaim.backends import EngineAnswer
from restorelens.gate.modelclaim.estimates import START, WAKE
from restorelens.gate.modelclaim.polls import PollSchedule
from restorelens.readiness import ASLEEP, AUTO, ReadinessAnswer, ReadinessCheck, check_ready, sleep_state

__all__ = ["DEFAULT_POLL_INTERVAL_S", "EngineOperationError", "ReadinessPolls", "VllmSleepBackend", "poll_health"]

DEFAULT_POLL_INTERVAL_S = 0.25
DEFAULT_START_TIMEOUT_S = 600.0
DEFAULT_WAKE_TIMEOUT_S = 120.0  # AIBrix's gateway gives a wake 2 minutes


class EngineOperationError(Exception):
    """An engine did not do what it was asked (HTTP error, refused connection, timeout)."""


class ReadinessPolls:
    """The polls of one engine call, on its ``PollSchedule`` in clock seconds, slept in real ones.

    ``interval_s``: the coarse step in real seconds (``poll_interval_s``); ``expected_s``: clock
    seconds from ``called_s`` (default: now) to the expected ready time, or None."""

    def __init__(self, clock: Clock, *, interval_s: float, expected_s: float | None = None,
                 called_s: float | None = None) -> None:
        self.clock = clock
        self.schedule = PollSchedule(interval_s * clock.time_scale, expected_s)
        self.called_s = clock.now_s() if called_s is None else called_s
        self._due_s = self.called_s

    async def wait(self) -> None:
        """Until the next poll is due. From the poll that was due, or the one late past it: a poll a
        timer woke an instant early is not made twice, and a slow one does not shift the grid."""
        self._due_s = self.schedule.next_poll_s(self.called_s, max(self._due_s, self.clock.now_s()))
        await asyncio.sleep(max(0.0, self._due_s - self.clock.now_s()) / self.clock.time_scale)


async def poll_health(
    client: httpx.AsyncClient, url: str, clock: Clock, *, interval_s: float, timeout_s: float,
    still_running: Callable[[], bool] = lambda: True, expected_s: float | None = None,
    polls: ReadinessPolls | None = None,
) -> float:
    """Poll ``url/health`` until it answers 200; return the clock time of that answer. The polls
    follow ``polls``, or a schedule from now with the call ``expected_s`` to be ready then."""
    polls = polls or ReadinessPolls(clock, interval_s=interval_s, expected_s=expected_s)
    deadline_s = clock.now_s() + timeout_s
    while True:
        if not still_running():
            raise EngineOperationError(f"{url}: the engine process exited before it was healthy")
        try:
            response = await client.get(f"{url}/health")
            if response.status_code == 200:
                return clock.now_s()
        except httpx.TransportError:
            pass
        if clock.now_s() >= deadline_s:
            raise EngineOperationError(f"{url}: not healthy within {timeout_s:g} s")
        await polls.wait()


class VllmSleepBackend:
    """Sleep, wake and health-check engines at fixed URLs: ``urls[(model, pod)]`` or ``urls[model]``."""

    def __init__(
        self,
        urls: Mapping[tuple[str, str] | str, str],
        *,
        clock: Clock | None = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        wake_timeout_s: float = DEFAULT_WAKE_TIMEOUT_S,
        client: httpx.AsyncClient | None = None,
        readiness: ReadinessCheck | None = None,
    ) -> None:
        self.urls = dict(urls)
        self.readiness = readiness or ReadinessCheck()
        self.clock = clock or WallClock()
        self.poll_interval_s = poll_interval_s
        self.start_timeout_s = start_timeout_s
        self.wake_timeout_s = wake_timeout_s
        self._client = client
        self._instances: dict[tuple[str, int], str] = {}
        self._expected: Callable[[str, str], float | None] = lambda model, call: None

    def use_estimates(self, expected_s: Callable[[str, str], float | None]) -> None:
        """Plug in what the lifecycle expects: (model, ``START`` or ``WAKE``) -> clock seconds from
        the call to ready, or None (``WakeEstimates.for_call``)."""
        self._expected = expected_s

    def expected_call_s(self, model: str, call: str) -> float | None:
        return self._expected(model, call)

    def polls(self, model: str, call: str) -> ReadinessPolls:
        """The readiness polls of a ``call`` of ``model`` made now."""
        return ReadinessPolls(self.clock, interval_s=self.poll_interval_s, expected_s=self.expected_call_s(model, call))

    def start_polls(self, model: str) -> ReadinessPolls:
        """The readiness polls of a start of ``model`` made now."""
        return self.polls(model, START)

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.wake_timeout_s, connect=5.0))
        return self._client

    def url_for(self, model: str, pod: str) -> str:
        url = self.urls.get((model, pod)) or self.urls.get(model)
        if url is None:
            raise EngineOperationError(f"no engine URL for model {model} on pod {pod}")
        return url.rstrip("/")

    def instance_url(self, model: str, instance_id: int) -> str:
        return self._instances[(model, instance_id)]

    async def start(self, action: StartEngine, now_s: float) -> EngineAnswer:
        url = self.url_for(action.model, action.pod)
        self._instances[(action.model, action.instance_id)] = url
        deadline_s = self.clock.now_s() + self.start_timeout_s
        polls = self.start_polls(action.model)
        await poll_health(self.client, url, self.clock, interval_s=self.poll_interval_s, timeout_s=self.start_timeout_s,
                          polls=polls)
        ready_at_s, answer = await self.await_ready(
            url, action.model, deadline_s=deadline_s, timeout_s=self.start_timeout_s, when="of the attach",
            asleep_answers=True, polls=polls,
        )
        return EngineAnswer(ready_at_s, url, attached=True, asleep=answer.asleep)

    async def wake(self, action: WakeEngine, now_s: float) -> EngineAnswer:
        url = self.instance_url(action.model, action.instance_id)
        polls = self.polls(action.model, WAKE)
        response = await self._post(f"{url}/wake_up")
        said_awake_s: float | None = None
        if self.readiness.kind == AUTO and _json(response).get("status") == "awake":
            # The simulator's /wake_up answers when the engine is awake: the moment auto's check
            # (the sleep state) turned. Another check's ready moment is its own first yes.
            said_awake_s = self.clock.now_s()
        deadline_s = self.clock.now_s() + self.wake_timeout_s
        ready_at_s, _ = await self.await_ready(
            url, action.model, deadline_s=deadline_s, timeout_s=self.wake_timeout_s, when="after /wake_up",
            unreachable_fails=True, polls=polls,
        )
        return EngineAnswer(said_awake_s if said_awake_s is not None else ready_at_s, url)

    async def await_ready(
        self, url: str, model: str, *, deadline_s: float, timeout_s: float, when: str, asleep_answers: bool = False,
        unreachable_fails: bool = False, still_running: Callable[[], bool] = lambda: True,
        polls: ReadinessPolls | None = None,
    ) -> tuple[float, ReadinessAnswer]:
        """Repeat the readiness check until it says ready (or, with ``asleep_answers``, asleep);
        return the clock time of that answer and the answer. ``unreachable_fails``: an engine that
        does not answer at all fails at once (it answered a moment ago: it is gone, not loading).
        ``polls``: the call's poll schedule (default: every ``poll_interval_s`` from now)."""
        polls = polls or ReadinessPolls(self.clock, interval_s=self.poll_interval_s)
        while True:
            if not still_running():
                raise EngineOperationError(f"{url}: the engine process exited before it was ready")
            answer = await check_ready(self.client, url, self.readiness, model=model)
            if unreachable_fails and not answer.reached:
                raise EngineOperationError(f"{url}: {answer.detail} ({when})")
            if not answer.ready and not answer.asleep and asleep_answers and self.readiness.kind != AUTO:
                # The claim's check cannot see sleep (a sleeping engine just fails it): the sleep
                # API can, and an engine found asleep is an answer, not a start that never ends.
                state = await sleep_state(self.client, url)
                answer = state if state is not None and state.asleep else answer
            if answer.ready or (asleep_answers and answer.asleep):
                return self.clock.now_s(), answer
            if self.clock.now_s() >= deadline_s:
                raise EngineOperationError(
                    f"{url}: not ready {when} within {timeout_s:g} s by its readiness check "
                    f"({self.readiness.describe()}); last: {answer.detail}"
                )
            await polls.wait()

    async def sleep(self, action: SleepEngine, now_s: float) -> float:
        url = self.instance_url(action.model, action.instance_id)
        await self._post(f"{url}/sleep", params={"level": str(action.level)})
        return self.clock.now_s()

    async def stop(self, action: StopEngine, now_s: float) -> None:
        self._instances.pop((action.model, action.instance_id), None)

    async def alive(self, model: str, instance_id: int) -> bool:
        url = self._instances.get((model, instance_id))
        if url is None:
            return False
        try:
            return (await self.client.get(f"{url}/health")).status_code == 200
        except httpx.TransportError:
            return False

    async def asleep(self, model: str, instance_id: int) -> bool:
        """What ``/is_sleeping`` says (False when it cannot say: no such route, no answer)."""
        url = self._instances.get((model, instance_id))
        if url is None:
            return False
        answer = await sleep_state(self.client, url)
        return answer is not None and answer.state == ASLEEP

    async def is_sleeping(self, url: str) -> bool:
        try:
            response = await self.client.get(f"{url}/is_sleeping")
        except httpx.TransportError as exc:
            raise EngineOperationError(f"{url}/is_sleeping: {exc}") from None
        if response.status_code != 200:
            raise EngineOperationError(f"{url}/is_sleeping answered {response.status_code}")
        return bool(_json(response).get("is_sleeping"))

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _post(self, url: str, params: Mapping[str, str] | None = None) -> httpx.Response:
        try:
            response = await self.client.post(url, params=params)
        except httpx.TransportError as exc:
            raise EngineOperationError(f"{url}: {exc}") from None
        if response.status_code >= 300:
            raise EngineOperationError(f"{url} answered {response.status_code}")
        return response


def _json(response: httpx.Response) -> dict:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
