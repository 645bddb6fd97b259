"""``UpstreamTransport``: a lean keep-alive HTTP/1.1 transport for httpx, on asyncio protocols + httptools.

Why not httpcore: its pool checks every pooled connection (a readability syscall each) on every
request and parses with pure-Python h11 over anyio streams; profiled in the gate that was ~60 % of
~2.6 ms CPU per proxied request. This transport keeps a LIFO stack of idle connections per origin
(O(1) checkout), parses responses with httptools (C) in ``data_received``, writes each request in one
``write`` and streams the body chunk by chunk as it arrives (SSE passes through unbuffered).

It is an ``httpx.AsyncBaseTransport``, so httpx's request/response models and the OpenTelemetry httpx
instrumentation (``AsyncOpenTelemetryTransport`` wraps it) work with it; the gate itself calls
``exchange`` with prepared bytes. HTTP/1.1 only, no
pipelining. Errors are httpx's: ``ConnectError``/``ConnectTimeout``, ``ReadTimeout``, ``PoolTimeout``,
``RemoteProtocolError``. A request that finds its reused keep-alive connection closed by the server
before any answer byte (the idle-timeout race) is retried once on a new connection.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping

import httpx

from .upstream_connection import (
    ConnectionClosed,
    Origin,
    UpstreamConnection,
    origin_of,
    request_bytes,
    serialize_request,
)

__all__ = ["Origin", "UpstreamTransport", "origin_of", "request_bytes"]

#: Idle connections older than this are closed, not reused: uvicorn (vLLM, the simulator) closes
#: keep-alive connections after 5 s idle, and reusing one at that moment races the close.
DEFAULT_KEEPALIVE_EXPIRY_S = 4.0


class _ResponseStream(httpx.AsyncByteStream):
    """The answer body as it arrives; the connection goes back to the pool once it is complete."""

    def __init__(
        self, pool: UpstreamTransport, connection: UpstreamConnection, read_timeout_s: float | None, request: httpx.Request | None
    ) -> None:
        self._pool = pool
        self._connection: UpstreamConnection | None = connection
        self._read_timeout_s = read_timeout_s
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        while connection is not None:
            if connection.chunks:
                yield connection.take()
            elif connection.complete:
                self._finish()
                return
            elif connection.error is not None:
                self._finish()
                raise httpx.RemoteProtocolError("the engine closed the connection mid-answer", request=self._request)
            else:
                await connection.wait(self._read_timeout_s, self._request)

    def _finish(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool._check_in(connection)

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            if not connection.complete:
                connection.close()  # abandoned mid-answer: the rest would poison the next request
            self._pool._check_in(connection)


class UpstreamTransport(httpx.AsyncBaseTransport):
    """Keep-alive HTTP/1.1 to the engines: at most ``max_connections`` open, idle ones reused LIFO."""

    def __init__(
        self,
        *,
        max_connections: int = 512,
        keepalive_expiry_s: float = DEFAULT_KEEPALIVE_EXPIRY_S,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.keepalive_expiry_s = keepalive_expiry_s
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[UpstreamConnection]] = {}
        self._open = 0  # connecting, busy and idle
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    @property
    def open_connections(self) -> int:
        return self._open

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout") or {}
        data = serialize_request(request, await _body(request))
        status, headers, stream = await self.exchange(origin_of(request.url), data, timeouts, request)
        return httpx.Response(status, headers=headers, stream=stream, extensions={"http_version": b"HTTP/1.1"})

    async def exchange(
        self, origin: Origin, data: bytes, timeouts: Mapping[str, float | None], request: httpx.Request | None = None
    ) -> tuple[int, list[tuple[bytes, bytes]], httpx.AsyncByteStream]:
        """Send one serialised request (``request_bytes``) to ``origin``; (status, raw headers, body stream).

        The proxy's path when tracing is off: no httpx Request/Response objects at all.
        """
        read_timeout_s = timeouts.get("read")
        for attempt in (1, 2):
            connection = await self._check_out(origin, timeouts, request, reuse=attempt == 1)
            try:
                connection.send(data)
                while not connection.headers_done:
                    if connection.error is not None:
                        raise connection.error
                    await connection.wait(read_timeout_s, request)
            except ConnectionClosed as closed:
                self._check_in(connection)
                if attempt == 1 and connection.reused and not closed.answered:
                    continue  # the server closed this idle connection as we reused it
                raise httpx.RemoteProtocolError("the engine closed the connection without answering", request=request) from None
            except BaseException:
                connection.close()
                self._check_in(connection)
                raise
            return connection.status, connection.headers, _ResponseStream(self, connection, read_timeout_s, request)
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        self._closed = True
        for stack in self._idle.values():
            for connection in stack:
                connection.close()
        self._idle.clear()

    # --- the pool -------------------------------------------------------------------------------

    async def _check_out(
        self, origin: Origin, timeouts: Mapping[str, float | None], request: httpx.Request | None, *, reuse: bool
    ) -> UpstreamConnection:
        if self._closed:
            raise RuntimeError("the upstream transport is closed")
        stack = self._idle.get(origin) if reuse else None
        now_s = time.monotonic()
        while stack:
            connection = stack.pop()
            if not connection.closed and now_s - connection.idle_since_s < self.keepalive_expiry_s:
                connection.reused = True
                return connection
            connection.close()
            self._forget()
        await self._reserve(timeouts.get("pool"), request)
        return await self._connect(origin, timeouts.get("connect"), request)

    async def _reserve(self, timeout_s: float | None, request: httpx.Request | None) -> None:
        """Count one more open connection, waiting (up to the pool timeout) while at the cap."""
        if self._open >= self.max_connections:
            self._evict_one_idle()
        if self._open < self.max_connections and not self._slot_waiters:
            self._open += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._slot_waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            raise httpx.PoolTimeout("no upstream connection free in time", request=request) from None
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._forget()  # the slot handed to us goes to the next waiter
            raise
        finally:
            if waiter in self._slot_waiters:
                self._slot_waiters.remove(waiter)

    async def _connect(self, origin: Origin, timeout_s: float | None, request: httpx.Request | None) -> UpstreamConnection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        use_ssl = None
        if scheme == "https":
            self._ssl_context = use_ssl = self._ssl_context or httpx.create_ssl_context()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: UpstreamConnection(origin), host, port, ssl=use_ssl), timeout_s
            )
        except TimeoutError:
            self._forget()
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out", request=request) from None
        except OSError as exc:
            self._forget()
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc.strerror or exc}", request=request) from None
        except BaseException:
            self._forget()
            raise
        return connection

    def _check_in(self, connection: UpstreamConnection) -> None:
        """A request is done with ``connection``: keep it for reuse or count it closed."""
        if connection.closed or not connection.complete or not connection.keep_alive or self._closed:
            connection.close()
            self._forget()
            return
        connection.idle_since_s = time.monotonic()
        stack = self._idle.setdefault(connection.origin, [])
        stack.append(connection)
        # LIFO reuse leaves old connections at the bottom: close the expired ones there.
        while stack and connection.idle_since_s - stack[0].idle_since_s >= self.keepalive_expiry_s:
            stack.pop(0).close()
            self._forget()
        if self._slot_waiters:
            self._evict_one_idle()

    def _forget(self) -> None:
        """One connection fewer is open: hand its slot to the first waiter, if any."""
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes over; the count stays
                return
        self._open -= 1

    def _evict_one_idle(self) -> None:
        """At the cap with someone waiting: close the oldest idle connection of any origin."""
        oldest: list[UpstreamConnection] | None = None
        for stack in self._idle.values():
            if stack and (oldest is None or stack[0].idle_since_s < oldest[0].idle_since_s):
                oldest = stack
        if oldest is not None:
            oldest.pop(0).close()
            self._forget()


async def _body(request: httpx.Request) -> bytes:
    try:
        return request.content
    except httpx.RequestNotRead:
        return b"".join([chunk async for chunk in request.stream])  # type: ignore[union-attr]
