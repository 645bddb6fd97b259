"""``GET /v1/models``: every engine's model list merged, asked once per credential at a time.

The listing needs no grant and no token of the gate's own, so anyone who can reach the gate can
call it as often as they like. It therefore has its own small connection pool, never the proxy's:
1,000 concurrent listings with one hung engine once held the shared pool and pushed inference on a
healthy engine from 3 ms to 7 s. Callers with the same ``Authorization`` share one fan-out in
flight and its answer for ``ttl_s`` (engines may list different models per credential).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["Listing", "ModelListing"]

#: Credentials whose listing is kept at once; the oldest is forgotten first.
MAX_CREDENTIALS = 64
#: Connections per engine in the listing's own pool.
CONNECTIONS_PER_ENGINE = 2


@dataclass(frozen=True)
class Listing:
    """The merged answer: model entries by id (first engine wins) and the engines that failed."""

    models: dict[str, dict[str, Any]]
    unreachable: list[dict[str, str]]


@dataclass
class _Fetch:
    task: asyncio.Task[Listing]
    done_at_s: float | None = field(default=None)


async def _list_one(client: httpx.AsyncClient, url: str, authorization: str | None, timeout_s: float) -> tuple[list[dict[str, Any]], str | None]:
    """(the engine's model entries, what went wrong or None). The caller's credentials go along."""
    # As received (Latin-1, as Starlette decoded it): httpx would refuse a str outside ASCII.
    headers = {"authorization": authorization.encode("latin-1")} if authorization is not None else {}
    try:
        async with asyncio.timeout(timeout_s):  # the pool wait included: a hung engine costs each caller timeout_s at most
            response = await client.get(url + "/v1/models", headers=headers, timeout=timeout_s)
    except (TimeoutError, httpx.TimeoutException):
        return [], f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return [], f"unreachable ({type(exc).__name__})"
    if response.status_code != 200:
        return [], f"answered {response.status_code}"
    try:
        data = response.json().get("data", [])
        entries = [e for e in data if isinstance(e, dict) and isinstance(e.get("id"), str)]
    except (ValueError, AttributeError, TypeError):
        return [], "answered something other than an OpenAI model list"
    return entries, None


class ModelListing:
    """Fans ``GET /v1/models`` out to ``urls`` (all at once), shared per credential for ``ttl_s``."""

    def __init__(self, urls: list[str], *, timeout_s: float, ttl_s: float = 1.0) -> None:
        self.urls = sorted(set(urls))
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        limits = httpx.Limits(max_connections=max(1, CONNECTIONS_PER_ENGINE * len(self.urls)), max_keepalive_connections=len(self.urls))
        self._client = httpx.AsyncClient(limits=limits, timeout=timeout_s)
        self._fetches: OrderedDict[str | None, _Fetch] = OrderedDict()
        self._running: set[asyncio.Task[Listing]] = set()  # evicted ones included: aclose cancels them all

    async def get(self, authorization: str | None) -> Listing:
        loop = asyncio.get_running_loop()
        fetch = self._fetches.get(authorization)
        fresh = fetch is not None and (fetch.done_at_s is None or loop.time() - fetch.done_at_s < self.ttl_s)
        if not fresh:
            fetch = _Fetch(loop.create_task(self._fetch(authorization)))
            fetch.task.add_done_callback(lambda _task, f=fetch: setattr(f, "done_at_s", loop.time()))
            self._running.add(fetch.task)
            fetch.task.add_done_callback(self._running.discard)
            self._fetches[authorization] = fetch
            while len(self._fetches) > MAX_CREDENTIALS:
                self._fetches.popitem(last=False)  # its task runs on for whoever already awaits it
        assert fetch is not None
        self._fetches.move_to_end(authorization)
        # Shielded: a caller that leaves must not cancel the fan-out the others wait on.
        return await asyncio.shield(fetch.task)

    async def _fetch(self, authorization: str | None) -> Listing:
        answers = await asyncio.gather(*(_list_one(self._client, url, authorization, self.timeout_s) for url in self.urls))
        models: dict[str, dict[str, Any]] = {}
        unreachable = []
        for url, (entries, problem) in zip(self.urls, answers, strict=True):
            if problem is not None:
                unreachable.append({"upstream": url, "error": problem})
            for entry in entries:
                models.setdefault(entry["id"], entry)
        return Listing(models, unreachable)

    async def aclose(self) -> None:
        for task in list(self._running):
            task.cancel()
        await self._client.aclose()
