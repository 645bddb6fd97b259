from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from restorelens.serving import DEFAULT_MAX_HEADER_BYTES, HeadLimit, ServerThread


async def hello(request: object) -> PlainTextResponse:
    return PlainTextResponse("hello")


APP = Starlette(routes=[Route("/", hello)])


def test_fixture_serves_on_a_free_loopback_port(serve_asgi: Callable[..., ServerThread]) -> None:
    a, b = serve_asgi(APP), serve_asgi(APP)
    assert a.host == "127.0.0.1" and a.port != b.port
    assert httpx.get(a.url).text == "hello"
    assert httpx.get(b.url).text == "hello"


def test_stop_releases_the_port() -> None:
    server = ServerThread(APP).start()
    url = server.url
    server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, timeout=2)


def test_context_manager_starts_and_stops() -> None:
    with ServerThread(APP) as server:
        assert httpx.get(server.url).status_code == 200


def test_ipv6_loopback_is_served() -> None:
    with ServerThread(APP, host="::1") as server:
        assert server.host == "::1"
        assert server.url == f"http://[::1]:{server.port}"
        assert httpx.get(server.url).text == "hello"


# --- bounded request heads ------------------------------------------------------------------------


async def echo_size(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(len(await request.body())))


SIZED = Starlette(routes=[Route("/", echo_size, methods=["GET", "POST"])])


def _raw_exchange(server: ServerThread, chunks: Iterator[bytes]) -> tuple[bytes, int]:
    """(what the server answered, bytes sent before it closed) for a request written chunk by chunk."""
    sent = 0
    with socket.create_connection((server.host, server.port), timeout=30) as sock:
        try:
            for chunk in chunks:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the server closed on us: what it answered first is still readable
        answer = b""
        try:
            while data := sock.recv(65536):
                answer += data
        except OSError:
            pass
    return answer, sent


def test_a_head_under_the_limit_is_served_and_one_over_gets_431_json() -> None:
    with ServerThread(SIZED) as server:
        assert httpx.get(server.url, headers={"x-a": "a" * 60_000}).status_code == 200
        refused = httpx.get(server.url, headers={"x-a": "a" * 70_000})
        assert refused.status_code == 431
        assert refused.headers["connection"] == "close"
        assert refused.json()["error"]["message"] == f"request line and headers exceed {DEFAULT_MAX_HEADER_BYTES} bytes"
        # Many headers, each small, add up: the whole head counts.
        many = {f"x-{i}": "v" * 1000 for i in range(70)}
        assert httpx.get(server.url, headers=many).status_code == 431


def test_a_streamed_huge_header_is_cut_off_after_about_the_limit_and_others_are_served() -> None:
    """The 400 MB header that took uvicorn 314 s: refused once the limit (plus one read) has arrived."""
    with ServerThread(SIZED) as server:
        def chunks() -> Iterator[bytes]:
            yield b"GET / HTTP/1.1\r\nhost: x\r\nx-big: "
            for _ in range(400):
                yield b"a" * 1_000_000

        answer, sent = _raw_exchange(server, chunks())
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert sent < 20_000_000  # 400 MB were offered; the server stopped reading long before
        assert httpx.get(server.url).text == "0"


def test_large_bodies_on_a_kept_alive_connection_do_not_count_as_head() -> None:
    """A body's last chunk arrives while the next head is awaited: it must not be taken for one."""
    with ServerThread(SIZED) as server, httpx.Client(base_url=server.url) as client:
        for _ in range(3):
            assert client.post("/", content=b"x" * 1_000_000, headers={"x-a": "a" * 30_000}).text == "1000000"
            assert client.get("/").text == "0"


def test_pipelined_requests_are_each_measured() -> None:
    with ServerThread(SIZED) as server:
        small = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
        big = b"GET / HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * 70_000 + b"\r\n\r\n"
        last = b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        answer, _ = _raw_exchange(server, iter([small * 3 + big + last]))
        assert answer.count(b"HTTP/1.1 200 ") == 3
        assert answer.count(b"HTTP/1.1 431 ") == 1
        assert answer.endswith(b"}")  # closed after the 431: the request behind it is not guessed at


def test_an_app_sets_its_own_limit_error_shape_and_refusal_count() -> None:
    refused: list[int] = []
    app = Starlette(routes=[Route("/", echo_size)])
    app.state.head_limit = HeadLimit(
        max_header_bytes=1024, answer=lambda status, message: (b"text/plain", message.encode()),
        refused=lambda: refused.append(1),
    )
    with ServerThread(app) as server:
        assert httpx.get(server.url, headers={"x-a": "a" * 700}).status_code == 200
        answer = httpx.get(server.url, headers={"x-a": "a" * 1100})
        assert (answer.status_code, answer.text) == (431, "request line and headers exceed 1024 bytes")
        assert answer.headers["content-type"] == "text/plain"
        assert refused == [1]


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=40_000), min_size=1, max_size=6),
    split=st.integers(min_value=1, max_value=50_000),
)
def test_fuzz_head_sizes_and_read_boundaries(sizes: list[int], split: int) -> None:
    """Heads of any size, cut at any byte: 431 exactly when the head is over the limit (within the
    request line's allowance), and the server still serves the next client."""
    with ServerThread(SIZED) as server:
        head = b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n" + b"".join(f"x-{i}: ".encode() + b"v" * n + b"\r\n" for i, n in enumerate(sizes)) + b"\r\n"
        answer, _ = _raw_exchange(server, iter([head[:split], head[split:]]))
        # The limit is on the request line plus header lines as sent, without the blank line.
        assert answer.startswith(b"HTTP/1.1 431 " if len(head) - 2 > DEFAULT_MAX_HEADER_BYTES else b"HTTP/1.1 200 ")
        assert httpx.get(server.url).text == "0"


@pytest.mark.parametrize("method", ["GET", "OPTIONS"])
def test_the_limit_is_exact_to_the_byte_whatever_the_method(method: str) -> None:
    with ServerThread(SIZED) as server:
        for over in (0, 1):
            start = f"{method} / HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-pad: ".encode()
            pad = DEFAULT_MAX_HEADER_BYTES - len(start) - 2 + over  # the pad line ends in \r\n
            head = start + b"p" * pad + b"\r\n"
            assert len(head) == DEFAULT_MAX_HEADER_BYTES + over
            answer, _ = _raw_exchange(server, iter([head + b"\r\n"]))
            assert answer.startswith(b"HTTP/1.1 431 " if over else b"HTTP/1.1 ")
            assert over or not answer.startswith(b"HTTP/1.1 431 ")


def _chunked(trailer: bytes) -> bytes:
    return (b"POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
            b"10\r\n0123456789abcdef\r\n0\r\n" + trailer + b"\r\n")


def test_trailer_fields_are_refused_and_never_join_the_headers() -> None:
    """uvicorn appended trailers to scope["headers"] (a proxy then forwarded them as headers) and
    httptools grew them by concatenation, past any head limit."""
    seen: list[list[tuple[bytes, bytes]]] = []

    async def record(request: Request) -> PlainTextResponse:
        body = await request.body()
        seen.append(list(request.scope["headers"]))
        return PlainTextResponse(str(len(body)))

    app = Starlette(routes=[Route("/", record, methods=["POST"])])
    with ServerThread(app) as server:
        plain, _ = _raw_exchange(server, iter([_chunked(b"").replace(b"host: x", b"host: x\r\nconnection: close")]))
        assert plain.startswith(b"HTTP/1.1 200 ") and plain.endswith(b"16")
        answer, _ = _raw_exchange(server, iter([_chunked(b"x-traffic-class: interactive\r\n")]))
        assert answer == b""  # closed: the request was already being served, no status can follow
        assert all(b"x-traffic-class" not in dict(headers) for headers in seen)

        def huge_trailer() -> Iterator[bytes]:
            yield _chunked(b"")[:-2] + b"x-big: "
            for _ in range(150):
                yield b"t" * 1_000_000

        _, sent = _raw_exchange(server, huge_trailer())
        assert sent < 20_000_000  # cut off after about the limit, not parsed for 150 MB
        assert httpx.get(server.url).status_code == 405  # and the server serves on


def test_an_upgrade_request_with_an_oversize_head_gets_its_431() -> None:
    with ServerThread(SIZED) as server:
        head = (b"GET / HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n"
                b"x-big: " + b"a" * 70_000 + b"\r\n\r\n")
        answer, _ = _raw_exchange(server, iter([head]))
        assert answer.startswith(b"HTTP/1.1 431 ")


def test_a_gate_stopped_with_sigterm_flushes_its_spans_and_exits_0(tmp_path) -> None:
    """uvicorn raises SIGTERM again after its graceful shutdown; its default action ended the gate
    before the exporter's queue was flushed, so the spans of the last seconds were lost."""
    trace_file = tmp_path / "gate.jsonl"
    gate = subprocess.Popen(
        [sys.executable, "-m", "restorelens", "gate", "--upstream", "http://127.0.0.1:9", "--port", "0",
         "--trace-file", str(trace_file)],
        stderr=subprocess.PIPE, text=True,
    )
    assert gate.stderr is not None
    banner = gate.stderr.readline()
    url = banner.strip().rsplit(" ", 1)[1]
    answer = httpx.post(url + "/v1/completions", json={"model": "tiny", "prompt": "x"})
    assert answer.status_code == 502  # nothing listens on port 9: the gate still records the request
    gate.send_signal(signal.SIGTERM)
    _, errors = gate.communicate(timeout=60)
    assert gate.returncode == 0, errors
    names = [span["name"] for line in trace_file.read_text().splitlines() for span in _spans(json.loads(line))]
    assert "gate.request" in names


def _spans(document: dict) -> Iterator[dict]:
    for resource_spans in document["resourceSpans"]:
        for scope_spans in resource_spans["scopeSpans"]:
            yield from scope_spans["spans"]


def test_sigterm_the_moment_the_start_line_appears_still_ends_in_an_orderly_exit() -> None:
    """Supervisors take the start line for "ready"; a SIGTERM right after it once hit the default
    handler (no handler was installed yet) and ended the gate with -15, its spans unflushed."""
    for _ in range(3):
        gate = subprocess.Popen(
            [sys.executable, "-m", "restorelens", "gate", "--upstream", "http://127.0.0.1:9", "--port", "0", "--no-tracing"],
            stderr=subprocess.PIPE, text=True,
        )
        assert gate.stderr is not None
        assert gate.stderr.readline().startswith("restorelens gate: ")
        gate.send_signal(signal.SIGTERM)
        _, errors = gate.communicate(timeout=60)
        assert gate.returncode == 0, errors


def test_listen_on_names_the_port_when_it_is_busy_and_the_host_when_it_is_not_ours() -> None:
    from restorelens.errors import SettingError
    from restorelens.serving import bind_socket, listen_on

    with bind_socket("127.0.0.1", 0) as busy:
        port = busy.getsockname()[1]
        with pytest.raises(SettingError, match=r"--port.*cannot listen on 127\.0\.0\.1:\d+"):
            listen_on("127.0.0.1", port)
    with pytest.raises(SettingError, match="--host"):
        listen_on("192.0.2.1", 0)  # TEST-NET-1: an address of no machine of ours
    with pytest.raises(SettingError, match="--host"):
        listen_on("no-such-host.invalid", 0)
    with listen_on("127.0.0.1", 0, listen=False) as free:
        assert free.getsockname()[1] > 0
