"""Serve an ASGI app with a real uvicorn server on 127.0.0.1 in a background thread.

Used by the demo (several servers in one process), the test fixtures and the benchmarks. Binding the
socket ourselves (port 0 by default) makes free-port selection race-free.
"""

from __future__ import annotations

import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

__all__ = ["ServerThread", "bind_socket"]

DEFAULT_HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0


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


class _QuietServer(uvicorn.Server):
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
        **uvicorn_options: Any,
    ) -> None:
        self._sock = bind_socket(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        config = uvicorn.Config(
            app,
            log_level=log_level,
            access_log=False,
            lifespan="auto",
            timeout_graceful_shutdown=5,
            **uvicorn_options,
        )
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
