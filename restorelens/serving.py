"""How restorelens serves ASGI apps: uvicorn with a bounded request head, on 127.0.0.1.

``uvicorn_config`` is the one place every server (gate, collector, engine simulator, demo, tests,
benchmarks) gets its uvicorn settings, so each one refuses an oversize request head (request line
plus headers) with 431 as soon as it is seen. uvicorn's httptools protocol has no such limit: a
150 MB header stalled ``/health`` for seconds and a 400 MB one took 314 s and 1 GB of RSS to parse,
because the parser grows a header value by concatenation.

``ServerThread`` runs one in a background thread (the demo runs several servers in one process).
Binding the socket ourselves (port 0 by default) makes free-port selection race-free.
"""

from __future__ import annotations

import functools
import json
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["DEFAULT_MAX_HEADER_BYTES", "HeadLimit", "ServerThread", "bind_socket", "serve", "uvicorn_config"]

DEFAULT_HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
#: Request line plus headers, per request. Real clients send a few KiB (a traceparent, a bearer
#: token); nginx's default buffers hold 32 KiB, h11's 16 KiB.
DEFAULT_MAX_HEADER_BYTES = 64 * 1024


def _plain_answer(status: int, message: str) -> tuple[bytes, bytes]:
    return b"application/json", json.dumps({"error": {"message": message, "code": status}}).encode()


@dataclass(frozen=True)
class HeadLimit:
    """An app's bound on its request heads: the size, the body of the 431, and who counts refusals.

    An app that sets ``app.state.head_limit`` gets its own; others get the default size and a
    generic JSON error body.
    """

    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    #: (content type, body) of the 431, in the app's own error shape.
    answer: Callable[[int, str], tuple[bytes, bytes]] = _plain_answer
    #: Called once per refused request head (a metric's increment).
    refused: Callable[[], None] = field(default=lambda: None)

    def message(self) -> str:
        return f"request line and headers exceed {self.max_header_bytes} bytes"


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that answers 431 and closes once a request head passes its limit.

    Counted per received chunk while a head is incomplete, so the parser never buffers more than the
    limit plus one socket read; checked exactly (line plus headers) when a head completes within
    one chunk. A refused connection is closed: what follows its head cannot be framed reliably.

    Trailer fields of a chunked body are refused too, by closing the connection (the request is
    already being served, so no status can be sent): uvicorn would append them to the request's
    headers, where the app has already read them and a proxy would forward them, and httptools
    grows them by concatenation just like a head. Bytes that arrive during a body but carry none of
    it (chunk framing, trailers) count against the same limit.
    """

    def __init__(self, *args: Any, head_limit: HeadLimit, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_limit = head_limit
        self._head_open = True  # bytes received now belong to a request head
        self._head_bytes = 0
        self._heads_completed = 0
        self._refused = False
        self._body_bytes_seen = 0  # on_body calls add to it: tells a read that carried body from one that did not
        self._framing_bytes = 0  # received during a body since its last body byte

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        whole_chunk_is_head = self._head_open
        heads_before = self._heads_completed
        body_before = self._body_bytes_seen
        super().data_received(data)
        if not self._head_open and not self._refused and heads_before == self._heads_completed:
            if self._body_bytes_seen != body_before:
                self._framing_bytes = 0  # at most one read of framing after the last body byte goes uncounted
            else:
                self._framing_bytes += len(data)
                if self._framing_bytes > self._head_limit.max_header_bytes:
                    self._abort()
                    return
        if self._head_open and not self._refused:
            if whole_chunk_is_head and heads_before == self._heads_completed:
                self._head_bytes += len(data)
            else:
                # A head began after a body ended inside this chunk: its share is unknown, so it is
                # counted from the next chunk on (at most one read under) and exactly once complete.
                self._head_bytes = 0
            if self._head_bytes > self._head_limit.max_header_bytes:
                self._refused = True
        if self._refused:
            self._send_431()

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        if not self._head_open:
            self._abort()  # a trailer field: see the class docstring
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._head_open = False
        self._head_bytes = 0
        self._framing_bytes = 0
        self._heads_completed += 1
        # The size on the wire: "METHOD URL HTTP/1.1\r\n", then "name: value\r\n" per header.
        request_line = len(self.parser.get_method()) + 1 + len(self.url) + len(" HTTP/1.1\r\n")
        size = request_line + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self._head_limit.max_header_bytes:
            self._refused = True
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            self._body_bytes_seen += len(body)
            super().on_body(body)

    def _should_upgrade(self) -> bool:
        # A refused head has no scope to upgrade with: it gets its 431 like any other.
        return not self._refused and super()._should_upgrade()

    def _abort(self) -> None:
        """Close the connection mid-request; the app sees the client disconnect."""
        self._refused = True
        self._head_limit.refused()
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        self.transport.close()

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._head_open = True
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refused:
            self._send_431()  # the requests pipelined ahead of the refused one are answered first

    def _send_431(self) -> None:
        if self.transport.is_closing() or self.pipeline or (self.cycle is not None and not self.cycle.response_complete):
            return  # on_response_complete calls again once the requests ahead have their answers
        self._head_limit.refused()
        content_type, body = self._head_limit.answer(431, self._head_limit.message())
        head = [b"HTTP/1.1 431 Request Header Fields Too Large\r\n"]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"content-type: " + content_type + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n")
        head.append(b"connection: close\r\n\r\n")
        self.transport.write(b"".join(head) + body)
        self.transport.close()


def uvicorn_config(app: Any, **options: Any) -> uvicorn.Config:
    """uvicorn's settings for one of our servers: quiet, no access log, request heads bounded."""
    head_limit = getattr(getattr(app, "state", None), "head_limit", None) or HeadLimit()
    options.setdefault("log_level", "warning")
    options.setdefault("access_log", False)
    return uvicorn.Config(app, http=functools.partial(BoundedHttpToolsProtocol, head_limit=head_limit), **options)


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


def serve(app: Any, sock: socket.socket, *, ready: str | None = None) -> None:
    """Serve ``app`` on ``sock`` in this (main) thread until SIGINT or SIGTERM, then return.

    uvicorn shuts down gracefully on either signal and then raises it again; SIGTERM's default action
    would then end the process before the caller's ``finally`` runs, so a gate stopped the way
    Kubernetes and systemd stop it lost the spans still in its exporter's queue. Our handler,
    installed before ``ready`` is printed (supervisors take that line for "started"), asks the
    server to stop: a signal before uvicorn installs its own ends the server once started, and the
    one uvicorn raises again after shutting down is absorbed, so the caller finishes and exits 0.
    """
    server = _DrainingServer(uvicorn_config(app))

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
    before waiting for its requests: a request the app holds open by choice (the gate holding one
    while its model wakes) is answered then, instead of holding the shutdown up for as long."""

    async def shutdown(self, sockets: Any = None) -> None:
        begin_drain = getattr(getattr(self.config.app, "state", None), "begin_drain", None)
        if begin_drain is not None:
            begin_drain()
        await super().shutdown(sockets=sockets)


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
        **uvicorn_options: Any,
    ) -> None:
        self._sock = bind_socket(host, port)
        self.host, self.port = self._sock.getsockname()[:2]
        config = uvicorn_config(
            app,
            log_level=log_level,
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
