"""How restorelens serves ASGI apps: uvicorn on 127.0.0.1, with bounded heads and connections, and a
shutdown bounded in time.

``uvicorn_config`` is the one place every server (gate, collector, engine simulator, demo, tests,
benchmarks) gets its uvicorn settings, so each one bounds request heads in size and time and its
open connections in number (``http_protocol.py``: uvicorn's httptools protocol bounds none of them).

A shutdown (SIGTERM, SIGINT, ``ServerThread.stop``) first tells the app (``app.state.begin_drain``,
which answers the requests the app keeps waiting by choice), then waits for the requests in service
for at most ``drain_timeout_s``; past it every connection still open is cut, so a stream of many
minutes cannot hold a shutdown past a supervisor's grace period (Kubernetes: 30 s, then SIGKILL,
and the spans not yet exported are lost). The app sees its clients disconnect and ends its requests
(and their spans) as it does for any client that leaves.

``ServerThread`` runs one in a background thread (the demo runs several servers in one process).
Binding the socket ourselves (port 0 by default) makes free-port selection race-free.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import uvicorn

from restorelens.errors import SettingError
from restorelens.http_protocol import (
    DEFAULT_MAX_HEADER_BYTES, BoundedHttpToolsProtocol, ConnectionBook, HeadLimit, client_connection_bound,
)
from restorelens.settings import DEFAULT_DRAIN_TIMEOUT_S, DEFAULT_HEAD_TIMEOUT_S

__all__ = [
    "DEFAULT_DRAIN_TIMEOUT_S", "DEFAULT_HEAD_TIMEOUT_S", "DEFAULT_MAX_HEADER_BYTES", "HeadLimit", "ServerThread",
    "ServingLimits", "bind_socket", "listen_on", "serve", "uvicorn_config",
]

DEFAULT_HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
#: ``ServerThread``'s drain (tests, the demo, experiments): their requests are short.
THREAD_DRAIN_TIMEOUT_S = 5.0
#: After the cut, how long the app has to end its requests before uvicorn cancels their tasks.
CUT_GRACE_S = 2.0


@dataclass(frozen=True)
class ServingLimits:
    """A server's bounds in time and connections (the size of a head is the app's ``HeadLimit``)."""

    #: From a connection's opening, or a request head's first byte, to the head's end (408 beyond).
    head_timeout_s: float = DEFAULT_HEAD_TIMEOUT_S
    #: Client connections open at once; None: from the open-file limit (``client_connection_bound``).
    max_client_connections: int | None = None
    #: At shutdown, how long requests in service may finish before their connections are cut.
    drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S


class _ServerConfig(uvicorn.Config):
    """uvicorn's config plus what our server shares between its connections."""

    book: ConnectionBook[BoundedHttpToolsProtocol]
    limits: ServingLimits


def uvicorn_config(app: Any, limits: ServingLimits | None = None, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for one of our servers: quiet, no access log, heads and connections bounded.

    Raises ``SettingError`` when ``limits.max_client_connections`` reaches the open-file limit.
    """
    limits = limits or ServingLimits()
    head_limit = getattr(getattr(app, "state", None), "head_limit", None) or HeadLimit()
    book: ConnectionBook[BoundedHttpToolsProtocol] = ConnectionBook(client_connection_bound(limits.max_client_connections))
    options.setdefault("log_level", "warning")
    options.setdefault("access_log", False)
    options.setdefault("ws", "none")  # no app here speaks WebSocket; an upgrade is served as plain HTTP
    # The backstop of the drain's cut (_DrainingServer): tasks still running are cancelled.
    options.setdefault("timeout_graceful_shutdown", limits.drain_timeout_s + CUT_GRACE_S)
    http = functools.partial(BoundedHttpToolsProtocol, head_limit=head_limit, head_timeout_s=limits.head_timeout_s,
                             book=book)
    config = _ServerConfig(app, http=http, **options)
    config.book, config.limits = book, limits
    return config


def bind_socket(host: str = DEFAULT_HOST, port: int = 0, *, listen: bool = True) -> socket.socket:
    """A bound TCP socket, listening unless ``listen=False``; port 0 lets the kernel pick a free one.

    Listening at once: a server prints its address before uvicorn starts accepting, and whoever
    reads it may connect at once; the kernel queues that connection instead of refusing it. The
    address family follows the host (``::1`` binds IPv6, names resolve as the resolver says).
    """
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        if listen:
            sock.listen()
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def listen_on(host: str, port: int, *, listen: bool = True) -> socket.socket:
    """``bind_socket``, with a failure as the one line every server command gives: the host when it
    does not resolve or is no address of this machine, else the port (busy, privileged, out of range)."""
    try:
        return bind_socket(host, port, listen=listen)
    except socket.gaierror as exc:
        raise SettingError("--host", f"cannot listen on {host!r}: {exc.strerror or exc}") from None
    except (OSError, OverflowError) as exc:
        setting = "--host" if getattr(exc, "errno", None) == errno.EADDRNOTAVAIL else "--port"
        problem = getattr(exc, "strerror", None) or exc
        raise SettingError(setting, f"cannot listen on {host}:{port}: {problem}") from None


def serve(app: Any, sock: socket.socket, *, ready: str | None = None, limits: ServingLimits | None = None) -> None:
    """Serve ``app`` on ``sock`` in this (main) thread until SIGINT or SIGTERM, then return.

    uvicorn shuts down gracefully on either signal and then raises it again; SIGTERM's default action
    would then end the process before the caller's ``finally`` runs, so a gate stopped the way
    Kubernetes and systemd stop it lost the spans still in its exporter's queue. Our handler,
    installed before ``ready`` is printed (supervisors take that line for "started"), asks the
    server to stop: a signal before uvicorn installs its own ends the server once started, and the
    one uvicorn raises again after shutting down is absorbed, so the caller finishes and exits 0.
    """
    server = _DrainingServer(uvicorn_config(app, limits))

    def stop(signum: int, frame: object) -> None:
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if ready is not None:
            print(ready, file=sys.stderr, flush=True)
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _DrainingServer(uvicorn.Server):
    """Tells the app that it is shutting down (``app.state.begin_drain()``, on the server's loop)
    before waiting for its requests: a request the app keeps waiting by choice (the gate holding one
    while its model wakes, or queueing one for a grant) is answered then, instead of holding the
    shutdown up for as long. Cuts the connections still open once ``drain_timeout_s`` has passed,
    after telling the app (``app.state.cut_requests()``)."""

    config: _ServerConfig

    async def shutdown(self, sockets: Any = None) -> None:
        if (begin_drain := self._app_hook("begin_drain")) is not None:
            begin_drain()
        cut = asyncio.get_running_loop().call_later(self.config.limits.drain_timeout_s, self._cut)
        try:
            await super().shutdown(sockets=sockets)
        finally:
            cut.cancel()

    def _app_hook(self, name: str) -> Callable[[], None] | None:
        return getattr(getattr(self.config.app, "state", None), name, None)

    def _cut(self) -> None:
        if (cut_requests := self._app_hook("cut_requests")) is not None:
            cut_requests()  # the app learns why its clients are about to leave
        connections = self.config.book.connections()
        if connections:
            print(f"drain deadline ({self.config.limits.drain_timeout_s:g} s) passed: cutting {len(connections)} "
                  "connection(s) still open", file=sys.stderr, flush=True)
        for connection in connections:
            connection.cut()


class _QuietServer(_DrainingServer):
    # Signal handling belongs to the main thread's owner (the CLI or pytest), not to this thread.
    def install_signal_handlers(self) -> None:  # pragma: no cover - uvicorn < 0.29 only
        pass


class ServerThread:
    """Run ``app`` under uvicorn until ``stop()``; usable as a context manager.

    ``url`` is ``http://127.0.0.1:PORT`` once started.
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str = DEFAULT_HOST,
        port: int = 0,
        log_level: str = "warning",
        limits: ServingLimits | None = None,
        **uvicorn_options: Any,
    ) -> None:
        self._sock = bind_socket(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        limits = limits or ServingLimits(drain_timeout_s=THREAD_DRAIN_TIMEOUT_S)
        config = uvicorn_config(app, limits, log_level=log_level, lifespan="auto", **uvicorn_options)
        self._server = _QuietServer(config)
        self._thread = threading.Thread(target=self._run, name=f"uvicorn:{self.port}", daemon=True)
        self._error: BaseException | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host  # IPv6 literals need brackets
        return f"http://{host}:{self.port}"

    def _run(self) -> None:
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # surfaced by start()/stop(), not lost in the thread
            self._error = exc

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"server on {self.url} failed to start: {self._error!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.url} did not start within {START_TIMEOUT_S} s")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=START_TIMEOUT_S)
        self._sock.close()
        if self._thread.is_alive():
            raise RuntimeError(f"server on {self.url} did not stop")

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
