"""``UpstreamTransport``: a lean keep-alive HTTP/1.1 transport for httpx, on asyncio protocols + httptools.

Why not httpcore: its pool checks every pooled connection (a readability syscall each) on every
request and parses with pure-Python h11 over anyio streams; profiled in the gate that was ~60 % of
~2.6 ms CPU per proxied request. This transport keeps a LIFO stack of idle connections per origin
(O(1) checkout), parses responses with httptools (C) in ``data_received``, writes each request in one
``write`` and streams the body chunk by chunk as it arrives (SSE passes through unbuffered).

It is an ``httpx.AsyncBaseTransport``, so httpx's request/response models and the OpenTelemetry httpx
instrumentation (``AsyncOpenTelemetryTransport`` wraps it) work unchanged. HTTP/1.1 only, no
pipelining. Errors are httpx's: ``ConnectError``/``ConnectTimeout``, ``ReadTimeout``, ``PoolTimeout``,
``RemoteProtocolError``. A request that finds its reused keep-alive connection closed by the server
before any answer byte (the idle-timeout race) is retried once on a new connection.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
import httptools
import httpx

__all__ = ["Origin", "UpstreamTransport", "origin_of", "request_bytes"]

#: Idle connections older than this are closed, not reused: uvicorn (vLLM, the simulator) closes
#: keep-alive connections after 5 s idle, and reusing one at that moment races the close.
DEFAULT_KEEPALIVE_EXPIRY_S = 4.0
#: Body bytes buffered from the engine before reading pauses (the client is slower than the engine).
_HIGH_WATER_BYTES = 256 * 1024

Origin = tuple[str, str, int]


class _Closed(Exception):
    """The connection ended before a complete answer; ``answered`` says whether any byte came back."""

    def __init__(self, answered: bool) -> None:
        super().__init__("upstream closed the connection")
        self.answered = answered


class _Connection(asyncio.Protocol):
    """One TCP connection: write a request, collect the parsed answer, wake the reader."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since_s = 0.0
        self.reused = False
        self._waiter: asyncio.Future[None] | None = None
        self._reset()

    def _reset(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.until_eof = False
        self.answered = False
        self.error: Exception | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # One write per request already; NODELAY keeps the OS from holding small writes anyway.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.complete:
            self.close()  # bytes nobody asked for: the connection cannot be trusted for a next request
            return
        self.answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = httpx.RemoteProtocolError(f"invalid HTTP answer from the engine: {exc}")
            self.close()
        if self.buffered > _HIGH_WATER_BYTES and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and not self.complete and self.until_eof:
            self.complete = True  # a body delimited by the end of the connection
        elif not self.complete and self.error is None:
            self.error = _Closed(self.answered)
        self._wake()

    # --- httptools callbacks -------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.keep_alive = self._parser.should_keep_alive()
        names = {name.lower() for name, _ in self.headers}
        self.until_eof = b"content-length" not in names and b"transfer-encoding" not in names
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # --- used by the transport ------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        self._reset()
        assert self.transport is not None
        self.transport.write(data)

    def take(self) -> bytes:
        chunk = self.chunks.popleft()
        self.buffered -= len(chunk)
        if self.paused and self.buffered <= _HIGH_WATER_BYTES // 2 and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return chunk

    async def wait(self, timeout_s: float | None, request: httpx.Request | None) -> None:
        """Until something arrives (bytes, the end, an error) or ``timeout_s`` passes."""
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if timeout_s is None else loop.call_later(timeout_s, _time_out, waiter)
        try:
            await waiter
        except TimeoutError:
            raise httpx.ReadTimeout("the engine did not answer in time", request=request) from None
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class _ResponseStream(httpx.AsyncByteStream):
    """The answer body as it arrives; the connection goes back to the pool once it is complete."""

    def __init__(
        self, pool: UpstreamTransport, connection: _Connection, read_timeout_s: float | None, request: httpx.Request | None
    ) -> None:
        self._pool = pool
        self._connection: _Connection | None = connection
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
        self._idle: dict[Origin, list[_Connection]] = {}
        self._open = 0  # connecting, busy and idle
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    @property
    def open_connections(self) -> int:
        return self._open

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout") or {}
        data = _serialize(request, await _body(request))
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
            except _Closed as closed:
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
    ) -> _Connection:
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

    async def _connect(self, origin: Origin, timeout_s: float | None, request: httpx.Request | None) -> _Connection:
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        use_ssl = None
        if scheme == "https":
            self._ssl_context = use_ssl = self._ssl_context or httpx.create_ssl_context()
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(origin), host, port, ssl=use_ssl), timeout_s
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

    def _check_in(self, connection: _Connection) -> None:
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
        oldest: list[_Connection] | None = None
        for stack in self._idle.values():
            if stack and (oldest is None or stack[0].idle_since_s < oldest[0].idle_since_s):
                oldest = stack
        if oldest is not None:
            oldest.pop(0).close()
            self._forget()


def origin_of(url: httpx.URL) -> Origin:
    return (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))


def request_bytes(method: bytes, target: bytes, host: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """An HTTP/1.1 request with a Content-Length body; ``headers`` must hold no Host, Content-Length
    or Transfer-Encoding (the proxy strips them as hop-by-hop)."""
    lines = [method, b" ", target, b" HTTP/1.1\r\nhost: ", host, b"\r\n"]
    for name, value in headers:
        lines += [name, b": ", value, b"\r\n"]
    lines += [b"content-length: ", str(len(body)).encode("ascii"), b"\r\n\r\n", body]
    return b"".join(lines)


async def _body(request: httpx.Request) -> bytes:
    try:
        return request.content
    except httpx.RequestNotRead:
        return b"".join([chunk async for chunk in request.stream])  # type: ignore[union-attr]


def _serialize(request: httpx.Request, body: bytes) -> bytes:
    lines = [request.method.encode("ascii"), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    has_length = False
    for name, value in request.headers.raw:
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            continue  # we always send a Content-Length body
        has_length = has_length or lowered == b"content-length"
        lines += [name, b": ", value, b"\r\n"]
    if not has_length and (body or request.method not in ("GET", "HEAD")):
        lines += [b"Content-Length: ", str(len(body)).encode("ascii"), b"\r\n"]
    lines += [b"\r\n", body]
    return b"".join(lines)

