"""One keep-alive HTTP/1.1 connection to an engine, and the request bytes written on it.

``UpstreamConnection`` is an asyncio protocol that parses the answer with httptools (C) as it
arrives in ``data_received``, buffers body chunks for the reader and pauses reading past a
high-water mark (the client is slower than the engine). The pool (``UpstreamTransport``) checks
connections out and in; the request bytes go out in one ``write``.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque

import httptools
import httpx

__all__ = ["ConnectionClosed", "Origin", "UpstreamConnection", "origin_of", "request_bytes", "serialize_request"]

#: Body bytes buffered from the engine before reading pauses (the client is slower than the engine).
_HIGH_WATER_BYTES = 256 * 1024

Origin = tuple[str, str, int]


class ConnectionClosed(Exception):
    """The connection ended before a complete answer; ``answered`` says whether any byte came back."""

    def __init__(self, answered: bool) -> None:
        super().__init__("upstream closed the connection")
        self.answered = answered


class UpstreamConnection(asyncio.Protocol):
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
            self.error = ConnectionClosed(self.answered)
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


def serialize_request(request: httpx.Request, body: bytes) -> bytes:
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
