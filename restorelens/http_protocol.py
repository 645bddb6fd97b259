"""The per-connection HTTP protocol of every restorelens server: request heads bounded in size and in
time, and open connections bounded in number.

uvicorn's httptools protocol has none of these bounds. A head is parsed as it arrives, without a
size limit: a 150 MB header stalled ``/health`` for seconds and a 400 MB one took 314 s and 1 GB of
RSS, because the parser grows a header value by concatenation. Nor is a head timed: uvicorn's
``timeout_keep_alive`` runs only between requests, and stops at the first byte of the next head, so
a client that sends a head a byte at a time (or never sends one) keeps its connection, and its
file, forever; 1,100 such connections against a 1,024-file limit left the gate unable to accept
``/health``. Its ``limit_concurrency`` answers 503 to new requests once too many are open, which is
exactly the wrong victim: the health check, never the idle connections.

``ConnectionBook`` (no I/O) decides which connection makes room; ``BoundedHttpToolsProtocol``
carries its decisions and the head's bounds out.
"""

from __future__ import annotations

import asyncio
import json
import resource
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from restorelens.errors import SettingError

__all__ = [
    "DEFAULT_MAX_HEADER_BYTES", "RESERVED_FILES", "BoundedHttpToolsProtocol",
    "ConnectionBook", "HeadLimit", "client_connection_bound",
]

#: Request line plus headers, per request. Real clients send a few KiB (a traceparent, a bearer
#: token); nginx's default buffers hold 32 KiB, h11's 16 KiB.
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
#: Files a server keeps for itself beyond its client connections (its listening socket, store and
#: trace files, logs, the Python runtime's own), when the client bound comes from the file limit.
RESERVED_FILES = 64

C = TypeVar("C")


def client_connection_bound(requested: int | None, setting: str = "max_client_connections") -> int:
    """The most client connections a server keeps open: ``requested``, or by default half of what the
    open-file limit leaves after ``RESERVED_FILES`` (the other half is for what serving them opens:
    the gate's engine connections). A request at or past the file limit is refused: past it, the
    server could no longer accept a connection at all, the health check's included."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    usable = (1 << 20 if soft == resource.RLIM_INFINITY else soft) - RESERVED_FILES
    if requested is None:
        return max(1, usable // 2)
    if requested > usable:
        raise SettingError(setting, f"{requested} is not below the open-file limit ({soft}, less {RESERVED_FILES} "
                                    f"the server keeps for itself): lower it, or raise the limit (ulimit -n)")
    return requested


class ConnectionBook(Generic[C]):
    """The open client connections of one server, and which one closes when there are too many.

    A connection *waits* while no request of it is in service: just opened, sending its head, or
    idle between keep-alive requests; otherwise it *serves*. Past ``limit`` open connections, the
    one that has waited longest makes room: a slow, silent or idle client, never a request in
    service. A new connection (a health check's) thus gets in however many half-sent heads are
    held open, and is itself refused only when every other connection is serving.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit {limit} must be at least 1")
        self.limit = limit
        self._open: set[C] = set()
        self._waiting: dict[C, None] = {}  # insertion order: the longest waiting first

    def __len__(self) -> int:
        return len(self._open)

    def connections(self) -> list[C]:
        return list(self._open)

    def opened(self, connection: C) -> C | None:
        """``connection`` was accepted; returns the one to close now (it may be ``connection``)."""
        self._open.add(connection)
        self._waiting[connection] = None
        if len(self._open) <= self.limit:
            return None
        victim = next(iter(self._waiting))
        self.closed(victim)  # counted out now: its close completes later
        return victim

    def serving(self, connection: C) -> None:
        """A request of ``connection`` is in service (its head is complete)."""
        self._waiting.pop(connection, None)

    def waiting(self, connection: C) -> None:
        """Every request of ``connection`` is answered: it waits for its next head."""
        if connection in self._open:
            self._waiting.pop(connection, None)
            self._waiting[connection] = None

    def closed(self, connection: C) -> None:
        self._open.discard(connection)
        self._waiting.pop(connection, None)


def _plain_answer(status: int, message: str) -> tuple[bytes, bytes]:
    return b"application/json", json.dumps({"error": {"message": message, "code": status}}).encode()


@dataclass(frozen=True)
class HeadLimit:
    """An app's bound on its request heads: the size, the body of its refusals, and who counts them.

    An app that sets ``app.state.head_limit`` gets its own; others get the default size and a
    generic JSON error body.
    """

    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    #: (content type, body) of a refusal (431, 408, 503) in the app's own error shape.
    answer: Callable[[int, str], tuple[bytes, bytes]] = _plain_answer
    #: Called once per request head refused for its size (a metric's increment).
    refused: Callable[[], None] = field(default=lambda: None)

    def message(self) -> str:
        return f"request line and headers exceed {self.max_header_bytes} bytes"


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded request heads and a bounded number of connections.

    Size: a head past its limit is answered 431 and the connection closed. Counted per received
    chunk while a head is incomplete, so the parser never buffers more than the limit plus one
    socket read; checked exactly (line plus headers) when a head completes within one chunk. A
    refused connection is closed: what follows its head cannot be framed reliably.

    Trailer fields of a chunked body are refused too, by closing the connection (the request is
    already being served, so no status can be sent): uvicorn would append them to the request's
    headers, where the app has already read them and a proxy would forward them, and httptools
    grows them by concatenation just like a head. Bytes that arrive during a body but carry none of
    it (chunk framing, trailers) count against the same limit.

    Time: a head must be complete within ``head_timeout_s`` of its connection's opening or of its
    own first byte (between requests uvicorn's keep-alive timeout holds). Whole, not per read: a
    byte a second does not keep it open. A late head is answered 408 and closed; a connection that
    sent nothing is closed. A late head pipelined behind a request in service is refused once that
    request is answered, never by cutting it.

    Number: the server's ``ConnectionBook`` names the connection that makes room for a new one; it
    is answered 503 when part of a head had arrived, else closed.
    """

    def __init__(self, *args: Any, head_limit: HeadLimit, head_timeout_s: float,
                 book: ConnectionBook[BoundedHttpToolsProtocol], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_limit = head_limit
        self._head_timeout_s = head_timeout_s
        self._book = book  # the server's: shared by all of its connections
        self._head_open = True  # bytes received now belong to a request head
        self._head_bytes = 0
        self._heads_completed = 0
        self._refused = False
        self._body_bytes_seen = 0  # on_body calls add to it: tells a read that carried body from one that did not
        self._framing_bytes = 0  # received during a body since its last body byte
        self._head_begun = False  # a head's first byte arrived and its end did not
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_overdue = False

    # --- connections ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()  # a client that never sends a byte holds a file as long as a slow one
        victim = self._book.opened(self)
        if victim is not None:
            victim.make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self._book.closed(self)
        super().connection_lost(exc)

    def make_room(self) -> None:
        """Close for a newer connection (``ConnectionBook``): 503 when part of a head had arrived."""
        if self._head_begun:
            self._answer_and_close(503, "too many open connections; retry")
        else:
            self._refused = True
            self.transport.close()

    def cut(self) -> None:
        """The server's drain deadline passed: end the connection now, whatever it is doing (the app
        sees its client disconnect)."""
        self.transport.abort()

    def _serving(self) -> bool:
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def _arm_head_timer(self) -> None:
        self._head_timer = self.loop.call_later(self._head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self._refused:
            return
        self._head_overdue = True
        if not self._serving():  # else on_response_complete refuses it
            self._refuse_late_head()

    def _refuse_late_head(self) -> None:
        if self._head_begun:
            self._answer_and_close(408, f"request head not complete within {self._head_timeout_s:g} s")
        else:
            self._refused = True
            self.transport.close()

    # --- parsing -------------------------------------------------------------------------------

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
        elif self._head_begun and self._head_timer is None and not self._head_overdue:
            # Armed here, not per head: a head that arrives whole in one read costs no timer.
            self._arm_head_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_begun = True

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
        self._head_begun = False
        self._disarm_head_timer()
        self._head_bytes = 0
        self._framing_bytes = 0
        self._heads_completed += 1
        # The size on the wire: "METHOD URL HTTP/1.1\r\n", then "name: value\r\n" per header.
        request_line = len(self.parser.get_method()) + 1 + len(self.url) + len(" HTTP/1.1\r\n")
        size = request_line + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self._head_limit.max_header_bytes:
            self._refused = True
            return
        self._book.serving(self)
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
        elif not self.transport.is_closing() and not self._serving():
            self._book.waiting(self)
            if self._head_overdue:
                self._refuse_late_head()

    def _send_431(self) -> None:
        if self.transport.is_closing() or self._serving():
            return  # on_response_complete calls again once the requests ahead have their answers
        self._head_limit.refused()
        self._answer_and_close(431, self._head_limit.message())

    def _answer_and_close(self, status: int, message: str) -> None:
        """Answer the request whose head is arriving with the app's error, then close."""
        self._refused = True
        content_type, body = self._head_limit.answer(status, message)
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"content-type: " + content_type + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n")
        head.append(b"connection: close\r\n\r\n")
        self.transport.write(b"".join(head) + body)
        self.transport.close()
