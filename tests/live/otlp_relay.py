"""An OTLP/HTTP receiver for one vLLM process shared by several tests: it keeps every export body
exactly as vLLM sent it, and forwards each to the collector of the test running at that moment.

vLLM's ``--otlp-traces-endpoint`` is fixed when the engine starts, while each test has a collector
(and a DuckDB store) of its own: the relay sits between them. The kept bodies are what
:func:`write_length_prefixed` saves in the loader's length-prefixed format (a 4-byte big-endian
length, then the message), which ``restorelens load`` reads.
"""

from __future__ import annotations

import gzip
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

#: An empty ExportTraceServiceResponse: no partial success to report.
_EMPTY_RESPONSE = b""


@dataclass(frozen=True)
class Export:
    """One POST /v1/traces as received: its protobuf body (a gzip encoding undone) and arrival."""

    body: bytes
    received_ns: int


@dataclass
class OtlpRelay:
    """The relay's state; ``app`` serves it. ``target`` is a collector's base URL, or None."""

    exports: list[Export] = field(default_factory=list)
    target: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> list[Export]:
        with self._lock:
            return list(self.exports)

    @property
    def app(self) -> Starlette:
        async def traces(request: Request) -> Response:
            body = await request.body()
            if request.headers.get("content-encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            with self._lock:
                self.exports.append(Export(body, time.time_ns()))
                target = self.target
            if target is not None:
                async with httpx.AsyncClient(timeout=30) as client:
                    forwarded = await client.post(
                        f"{target}/v1/traces", content=body, headers={"content-type": "application/x-protobuf"}
                    )
                forwarded.raise_for_status()
            return Response(_EMPTY_RESPONSE, media_type="application/x-protobuf")

        return Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])


def write_length_prefixed(exports: list[Export], path: Path) -> None:
    """Write each export body as one length-prefixed OTLP message (the Collector's ``format: proto``)."""
    with path.open("wb") as out:
        for export in exports:
            out.write(struct.pack(">I", len(export.body)))
            out.write(export.body)
