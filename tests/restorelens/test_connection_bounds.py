"""Request heads bounded in time and client connections in number: a slow or silent client, or a
thousand of them, never keeps a server from answering its health check or its requests in service."""

from __future__ import annotations

import asyncio
import resource
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from restorelens.errors import SettingError
from restorelens.http_protocol import RESERVED_FILES, ConnectionBook, client_connection_bound
from restorelens.serving import ServerThread, ServingLimits

GUARD_S = 30.0  # hang guard of every socket read: a test that waits this long has failed


def _closed_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (the guard's timeout raises if it never does)."""
    sock.settimeout(GUARD_S)
    answer = b""
    try:
        while data := sock.recv(65536):
            answer += data
    except ConnectionResetError:
        pass
    return answer


def _health_app() -> tuple[Starlette, threading.Event]:
    release = threading.Event()

    async def health(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def slow(request: Request) -> Response:
        # In service until the test says so: the connection that must never be closed for room.
        await asyncio.to_thread(release.wait, GUARD_S)
        return PlainTextResponse("done")

    return Starlette(routes=[Route("/health", health), Route("/slow", slow)]), release


def test_a_half_sent_head_is_answered_408_and_closed_after_the_head_timeout() -> None:
    app, _ = _health_app()
    with ServerThread(app, limits=ServingLimits(head_timeout_s=0.3)) as server:
        with socket.create_connection((server.host, server.port)) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-slow: ")
            answer = _closed_answer(sock)
        assert answer.startswith(b"HTTP/1.1 408 ") and b"connection: close" in answer
        assert b"within 0.3 s" in answer
        assert httpx.get(server.url + "/health").text == "ok"


def test_a_connection_that_sends_nothing_is_closed_after_the_head_timeout() -> None:
    app, _ = _health_app()
    with ServerThread(app, limits=ServingLimits(head_timeout_s=0.3)) as server:
        with socket.create_connection((server.host, server.port)) as sock:
            assert _closed_answer(sock) == b""


def test_a_head_sent_a_byte_at_a_time_is_timed_as_a_whole() -> None:
    """Slowloris: each byte comes well within the timeout, the head never ends; per-read timers
    would keep it open forever."""
    app, _ = _health_app()
    with ServerThread(app, limits=ServingLimits(head_timeout_s=0.5)) as server:
        with socket.create_connection((server.host, server.port)) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\n")
            closed = False
            for _ in range(int(GUARD_S / 0.05)):  # bounded: the guard
                try:
                    sock.sendall(b"x")
                except OSError:
                    closed = True
                    break
                sock.settimeout(0.05)
                try:
                    if sock.recv(65536):
                        closed = True  # the 408 came
                        break
                except TimeoutError:
                    continue
            assert closed


def test_kept_alive_requests_each_get_their_own_head_time() -> None:
    """The timeout bounds a head, not a connection: a client that uses its connection for longer
    than the timeout, request after request, is served throughout."""
    app, _ = _health_app()
    with ServerThread(app, limits=ServingLimits(head_timeout_s=0.3)) as server, httpx.Client(base_url=server.url) as client:
        for _ in range(4):
            assert client.get("/health").text == "ok"
            time.sleep(0.15)
        assert len(server._server.config.book) <= 1


def test_past_the_connection_bound_the_longest_waiting_make_room_never_a_request_in_service() -> None:
    app, release = _health_app()
    limits = ServingLimits(head_timeout_s=GUARD_S, max_client_connections=10)
    with ServerThread(app, limits=limits) as server:
        answers: list[httpx.Response] = []
        in_service = threading.Thread(target=lambda: answers.append(httpx.get(server.url + "/slow", timeout=GUARD_S)))
        in_service.start()
        book = server._server.config.book
        deadline = time.monotonic() + GUARD_S
        while len(book) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        half_sent = []
        for _ in range(40):
            sock = socket.create_connection((server.host, server.port))
            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")  # never ends
            half_sent.append(sock)
        try:
            for _ in range(3):
                assert httpx.get(server.url + "/health", timeout=GUARD_S).text == "ok"
            # The oldest half-sent heads made room, answered 503; the newest are still open.
            first = _closed_answer(half_sent[0])
            assert first.startswith(b"HTTP/1.1 503 ") and b"too many open connections" in first
            assert len(book) <= limits.max_client_connections
        finally:
            release.set()
            in_service.join(GUARD_S)
            for sock in half_sent:
                sock.close()
        assert [a.text for a in answers] == ["done"]


def test_the_book_evicts_the_longest_waiting_and_refuses_a_newcomer_only_when_all_serve() -> None:
    book: ConnectionBook[str] = ConnectionBook(2)
    assert book.opened("a") is None and book.opened("b") is None
    book.serving("a")
    assert book.opened("c") == "b"  # a serves; b waited longest
    book.waiting("a")  # a's answer went out: it waits again, as the newest
    assert book.opened("d") == "c"
    book.serving("a")
    book.serving("d")
    assert book.opened("e") == "e"  # everyone else serves: the newcomer is refused
    assert sorted(book.connections()) == ["a", "d"]
    book.closed("a")
    assert book.opened("f") is None


def test_the_default_bound_stays_below_the_file_limit_and_a_larger_one_is_refused() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert client_connection_bound(None) < soft - RESERVED_FILES
    assert client_connection_bound(10) == 10
    with pytest.raises(SettingError, match="max_client_connections.*open-file limit"):
        client_connection_bound(soft)


def _limited_files(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


def _engine() -> tuple[Starlette, threading.Event]:
    release = threading.Event()

    async def completions(request: Request) -> Response:
        async def events() -> Iterator[bytes]:  # type: ignore[misc]
            yield b'data: {"choices":[{"text":"a"}]}\n\n'
            await asyncio.to_thread(release.wait, GUARD_S)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])]), release


def test_a_gate_at_its_file_limit_still_answers_health_and_finishes_a_request_in_flight() -> None:
    """Half-sent heads past a 256-file limit left the gate unable to accept: /health failed 37 of
    37 times. The gate's default connection bound sits below its file limit."""
    engine_app, release = _engine()
    with ServerThread(engine_app) as engine:
        gate = subprocess.Popen(
            [sys.executable, "-m", "restorelens", "gate", "--upstream", engine.url, "--port", "0", "--no-tracing"],
            stderr=subprocess.PIPE, text=True, preexec_fn=lambda: _limited_files(256),
        )
        half_sent: list[socket.socket] = []
        try:
            assert gate.stderr is not None
            url = gate.stderr.readline().strip().rsplit(" ", 1)[1]
            host, port = url.removeprefix("http://").rsplit(":", 1)
            chunks: list[bytes] = []
            with httpx.Client(base_url=url, timeout=GUARD_S) as client:
                with client.stream("POST", "/v1/completions", json={"model": "m", "prompt": "x", "stream": True}) as stream:
                    lines = stream.iter_raw()
                    chunks.append(next(lines))  # in flight: the engine holds the rest
                    for _ in range(400):
                        try:
                            sock = socket.create_connection((host, int(port)), timeout=GUARD_S)
                            sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
                        except OSError:
                            continue  # the server made room by closing it: fine
                        half_sent.append(sock)
                    for _ in range(5):
                        assert httpx.get(url + "/health", timeout=10).status_code == 200
                    release.set()
                    chunks.extend(lines)
            assert b"[DONE]" in b"".join(chunks)
        finally:
            release.set()
            for sock in half_sent:
                sock.close()
            gate.terminate()
            gate.communicate(timeout=GUARD_S)
