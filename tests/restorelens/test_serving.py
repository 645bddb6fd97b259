from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from restorelens.serving import ServerThread


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
