"""Engine control over vLLM's HTTP sleep API, for engines that already run (or the simulator).

vLLM (with ``VLLM_SERVER_DEV_MODE=1 --enable-sleep-mode``) and ``restorelens sim`` serve:
``POST /sleep?level=N``, ``POST /wake_up``, ``GET /is_sleeping`` -> ``{"is_sleeping": bool}`` and
``GET /health``. ``start`` attaches: it polls ``/health`` until the engine answers 200. ``wake``
calls ``/wake_up`` and then polls ``/is_sleeping`` until false; the ready time is the first moment
the engine said it was awake (the ``/wake_up`` answer when that says ``awake``, else the first
poll that saw it). ``stop`` does nothing: this backend does not own the engines' processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import httpx

from restorelens.clock import Clock, WallClock
from restorelens.gate.modelclaim.actions import SleepEngine, StartEngine, StopEngine, WakeEngine
from restorelens.gate.modelclaim.backends import EngineAnswer
from restorelens.readiness import ReadinessCheck

__all__ = ["DEFAULT_POLL_INTERVAL_S", "EngineOperationError", "VllmSleepBackend", "poll_health"]

DEFAULT_POLL_INTERVAL_S = 0.25
DEFAULT_START_TIMEOUT_S = 600.0
DEFAULT_WAKE_TIMEOUT_S = 120.0  # AIBrix's gateway gives a wake 2 minutes


class EngineOperationError(Exception):
    """An engine did not do what it was asked (HTTP error, refused connection, timeout)."""


async def poll_health(
    client: httpx.AsyncClient, url: str, clock: Clock, *, interval_s: float, timeout_s: float,
    still_running: Callable[[], bool] = lambda: True,
) -> float:
    """Poll ``url/health`` until it answers 200; return the clock time of that answer."""
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
        await asyncio.sleep(interval_s)


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
        ready_at_s = await poll_health(
            self.client, url, self.clock, interval_s=self.poll_interval_s, timeout_s=self.start_timeout_s
        )
        return EngineAnswer(ready_at_s, url)

    async def wake(self, action: WakeEngine, now_s: float) -> EngineAnswer:
        url = self.instance_url(action.model, action.instance_id)
        response = await self._post(f"{url}/wake_up")
        ready_at_s: float | None = None
        if _json(response).get("status") == "awake":
            ready_at_s = self.clock.now_s()
        deadline_s = self.clock.now_s() + self.wake_timeout_s
        while await self.is_sleeping(url):
            if self.clock.now_s() >= deadline_s:
                raise EngineOperationError(f"{url}: still asleep {self.wake_timeout_s:g} s after /wake_up")
            await asyncio.sleep(self.poll_interval_s)
        if ready_at_s is None:
            ready_at_s = self.clock.now_s()
        return EngineAnswer(ready_at_s, url)

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
