"""The gate's keep-alive HTTP/1.1 transport against real sockets.

The engine here is a small raw asyncio server (real TCP on 127.0.0.1) because the cases need what a
framework hides: answer chunked or close-delimited, close a kept-alive connection at a chosen
moment, hold an answer half-sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from restorelens.gate.upstream_transport import UpstreamTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\n\r\n{\"ok\":true}"


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


class Engine:
    """Serve each connection with ``handler(reader, writer, request_number)``; it returns False to hang up."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while (request := await read_request(reader)) is not None:
                self.requests.append(request)
                if not await self.handler(reader, writer, len(self.requests)):
                    break
        finally:
            writer.close()

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()


async def answer_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
    writer.write(OK)
    await writer.drain()
    return True


def post(url: str, body: bytes = b'{"model":"tiny"}', timeout_s: float = 5.0) -> httpx.Request:
    return httpx.Request("POST", url + "/v1/completions", content=body, headers={"x-request-id": "r1"},
                         extensions={"timeout": httpx.Timeout(timeout_s).as_dict()})


async def fetch(transport: UpstreamTransport, request: httpx.Request) -> tuple[httpx.Response, list[bytes]]:
    response = await transport.handle_async_request(request)
    assert isinstance(response.stream, httpx.AsyncByteStream)
    chunks = [chunk async for chunk in response.stream]
    await response.stream.aclose()
    return response, chunks


def test_keep_alive_reuses_one_connection_and_sends_the_request_intact() -> None:
    async def scenario() -> None:
        engine = Engine(answer_ok)
        async with engine as url:
            transport = UpstreamTransport()
            for _ in range(3):
                response, chunks = await fetch(transport, post(url))
                assert response.status_code == 200 and b"".join(chunks) == b'{"ok":true}'
                assert response.headers["content-type"] == "application/json"
            assert engine.connections == 1 and transport.open_connections == 1
            head, _, body = engine.requests[0].partition(b"\r\n\r\n")
            assert head.startswith(b"POST /v1/completions HTTP/1.1\r\n")
            assert b"x-request-id: r1" in head and b"content-length: 16" in head.lower()
            assert body == b'{"model":"tiny"}'
            await transport.aclose()

    asyncio.run(scenario())


def test_stream_yields_chunks_as_they_arrive_and_decodes_chunked() -> None:
    release = asyncio.Event()

    async def sse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b"b\r\ndata: one\n\n\r\n")
        await writer.drain()
        await release.wait()
        writer.write(b"b\r\ndata: two\n\n\r\n0\r\n\r\n")
        await writer.drain()
        return True

    async def scenario() -> None:
        async with Engine(sse) as url:
            transport = UpstreamTransport()
            response = await transport.handle_async_request(post(url))
            assert isinstance(response.stream, httpx.AsyncByteStream)
            chunks = aiter(response.stream)
            assert await anext(chunks) == b"data: one\n\n"  # before the engine sends the rest
            release.set()
            assert [c async for c in chunks] == [b"data: two\n\n"]
            await response.stream.aclose()
            assert transport.open_connections == 1  # complete: kept for reuse
            await transport.aclose()

    asyncio.run(scenario())


def test_idle_connection_closed_by_the_engine_is_not_reused_and_a_lost_race_is_retried() -> None:
    async def hang_up_after_answering(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(OK)
        await writer.drain()
        return False  # keep-alive promised, connection closed anyway

    async def drop_second_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        if number == 2:
            return False  # read the request, close without a byte: the idle-timeout race
        writer.write(OK)
        await writer.drain()
        return True

    async def scenario() -> None:
        engine = Engine(hang_up_after_answering)
        async with engine as url:
            transport = UpstreamTransport()
            await fetch(transport, post(url))
            await asyncio.sleep(0.05)  # the close reaches the idle connection
            response, _ = await fetch(transport, post(url))
            assert response.status_code == 200 and engine.connections == 2
            await transport.aclose()
        racing = Engine(drop_second_request)
        async with racing as url:
            transport = UpstreamTransport()
            await fetch(transport, post(url))
            response, chunks = await fetch(transport, post(url))
            assert response.status_code == 200 and b"".join(chunks) == b'{"ok":true}'
            assert racing.connections == 2 and len(racing.requests) == 3
            await transport.aclose()

    asyncio.run(scenario())


def test_close_delimited_body_and_connection_close_are_not_reused() -> None:
    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\npart one, part two")
        await writer.drain()
        return False

    async def scenario() -> None:
        engine = Engine(until_close)
        async with engine as url:
            transport = UpstreamTransport()
            for _ in range(2):
                _, chunks = await fetch(transport, post(url))
                assert b"".join(chunks) == b"part one, part two"
            assert engine.connections == 2 and transport.open_connections == 0
            await transport.aclose()

    asyncio.run(scenario())


def test_abandoned_answer_closes_its_connection() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b")
        await writer.drain()
        await asyncio.sleep(5)
        return False

    async def scenario() -> None:
        engine = Engine(half)
        async with engine as url:
            transport = UpstreamTransport()
            response = await transport.handle_async_request(post(url))
            assert isinstance(response.stream, httpx.AsyncByteStream)
            assert await anext(aiter(response.stream)) == b"only ten b"
            await response.stream.aclose()
            assert transport.open_connections == 0
            await transport.aclose()

    asyncio.run(scenario())


def test_faults_are_httpx_errors() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        await asyncio.sleep(5)
        return False

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        writer.write(b"this is not HTTP\r\n\r\n")
        await writer.drain()
        return True

    async def scenario() -> None:
        transport = UpstreamTransport()
        async with Engine(silent) as url:
            with pytest.raises(httpx.ReadTimeout):
                await transport.handle_async_request(post(url, timeout_s=0.05))
        async with Engine(garbage) as url:
            with pytest.raises(httpx.RemoteProtocolError):
                await transport.handle_async_request(post(url))
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        dead_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        server.close()
        await server.wait_closed()
        with pytest.raises(httpx.ConnectError):
            await transport.handle_async_request(post(dead_url))
        assert transport.open_connections == 0
        await transport.aclose()

    asyncio.run(scenario())


def test_connection_cap_makes_requests_wait_for_a_free_slot() -> None:
    release = asyncio.Event()

    async def held_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, number: int) -> bool:
        if number == 1:
            await release.wait()
        writer.write(OK)
        await writer.drain()
        return True

    async def scenario() -> None:
        engine = Engine(held_first)
        async with engine as url:
            other = Engine(answer_ok)
            async with other as other_url:
                transport = UpstreamTransport(max_connections=1)
                first = asyncio.create_task(fetch(transport, post(url)))
                await asyncio.sleep(0.05)
                with pytest.raises(httpx.PoolTimeout):
                    await transport.handle_async_request(post(other_url, timeout_s=0.05))
                waiting = asyncio.create_task(fetch(transport, post(other_url)))
                await asyncio.sleep(0.05)
                assert not waiting.done()
                release.set()
                (done, _), (second, _) = await first, await waiting
                assert done.status_code == second.status_code == 200
                assert transport.open_connections == 1  # the idle one of `url` was closed to make room
                await transport.aclose()

    asyncio.run(scenario())


def test_exchange_sends_prepared_bytes_without_httpx_models() -> None:
    from restorelens.gate.upstream_transport import origin_of, request_bytes

    async def scenario() -> None:
        engine = Engine(answer_ok)
        async with engine as url:
            transport = UpstreamTransport()
            target = httpx.URL(url + "/v1/completions?a=1")
            data = request_bytes(b"POST", target.raw_path, target.netloc, [(b"x-request-id", b"r2")], b"{}")
            for _ in range(2):
                status, headers, stream = await transport.exchange(origin_of(target), data, {"read": 5.0})
                assert status == 200 and (b"content-type", b"application/json") in headers
                assert b"".join([chunk async for chunk in stream]) == b'{"ok":true}'
                await stream.aclose()
            assert engine.connections == 1
            assert engine.requests[0].startswith(b"POST /v1/completions?a=1 HTTP/1.1\r\nhost: 127.0.0.1:")
            assert engine.requests[0].endswith(b"x-request-id: r2\r\ncontent-length: 2\r\n\r\n{}")
            await transport.aclose()

    asyncio.run(scenario())
