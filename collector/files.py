"""Read trace files, one payload (or Arrow table) at a time.

Recognised by content, not by name:
- JSON lines: one document per line (the Collector file exporter's ``format: json``, one
  ``TracesData`` per line); a single pretty-printed document (the OTLP repo's
  ``examples/trace.json``, a Jaeger or Tempo download) also works. Which JSON it is (OTLP, Jaeger,
  Tempo) is the loader's to tell;
- length-prefixed messages: a 4-byte big-endian length, then the message (``format: proto``, or
  ``compression: zstd``, where each message is a zstd frame holding JSON or protobuf);
- either of those inside a gzip or zstd stream (``.gz``, ``.zst`` made by rotation or by hand);
- Parquet in the ``otel_traces`` layout (``restorelens export --format parquet``), by its
  ``PAR1`` magic (:func:`is_parquet`), read as Arrow tables by ``parquet.py``.

Each payload is numbered: the line number for JSON lines, the message number otherwise.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from restorelens.collector.decode_json import loads, may_hold_surrogates

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_MESSAGE_BYTES",
    "Payload",
    "compression",
    "is_parquet",
    "open_stream",
    "read_payloads",
]

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PARQUET_MAGIC = b"PAR1"
#: A JSON document (one line, or one pretty-printed file) is parsed whole; none may be longer.
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024
#: A length prefix above this means the file is not length-prefixed OTLP at all.
MAX_MESSAGE_BYTES = 1024 * 1024 * 1024


@dataclass(frozen=True)
class Payload:
    """One TracesData: ``parsed`` JSON object, or protobuf ``data``; or the ``error`` that stopped it."""

    number: int
    parsed: Any = None
    data: bytes | None = None
    error: str = ""
    #: The JSON text could decode to a lone surrogate (``decode_json.may_hold_surrogates``).
    may_hold_surrogates: bool = True


class _CountingReader(io.RawIOBase):
    """Counts bytes read from the file on disk, for progress over compressed input."""

    def __init__(self, raw: IO[bytes], on_bytes: Callable[[int], None] | None) -> None:
        self._raw = raw
        self._on_bytes = on_bytes

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        if n and self._on_bytes is not None:
            self._on_bytes(n)
        return n or 0


def _decompressed(stream: io.BufferedReader) -> io.BufferedReader:
    head = stream.peek(4)[:4]
    if head.startswith(_GZIP_MAGIC):
        # GzipFile buffers itself; another buffer on top would hide the lines read before a truncation.
        return gzip.GzipFile(fileobj=stream)  # type: ignore[return-value]
    if head == _ZSTD_MAGIC:
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
        return io.BufferedReader(reader)  # type: ignore[arg-type]
    return stream


def _first_byte(stream: io.BufferedReader) -> bytes:
    head = stream.peek(64)[:64]
    stripped = head.lstrip()
    return stripped[:1] if stripped else head[:1]


def _parse_json(number: int, line: bytes) -> Payload:
    try:
        return Payload(number, parsed=loads(line), may_hold_surrogates=may_hold_surrogates(line))
    except (ValueError, RecursionError) as exc:
        return Payload(number, error=f"invalid JSON: {exc}")


def _lines(stream: io.BufferedReader) -> Iterator[tuple[int, bytes | None]]:
    """Numbered lines, each at most ``MAX_DOCUMENT_BYTES`` long; a longer one is skipped as None,
    so that one line without a newline (a huge one-line document) never takes unbounded memory."""
    number = 0
    while True:
        limit = MAX_DOCUMENT_BYTES
        line = stream.readline(limit + 1)
        if not line:
            return
        number += 1
        if len(line) > limit and not line.endswith(b"\n"):
            while (rest := stream.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
            yield number, None
        else:
            yield number, line


def _json_lines(stream: io.BufferedReader) -> Iterator[Payload]:
    first = True
    for number, line in _lines(stream):
        if line is None:
            too_long = f"line longer than {MAX_DOCUMENT_BYTES} bytes, the most one JSON document may be"
            yield Payload(number, error=too_long)
            first = False
            continue
        if not line.strip():
            continue
        payload = _parse_json(number, line)
        if first and payload.error and line.strip() in (b"{", b"["):
            # Not JSON lines: one pretty-printed document.
            rest = stream.read(MAX_DOCUMENT_BYTES - len(line) + 1)
            if len(line) + len(rest) > MAX_DOCUMENT_BYTES:
                yield Payload(number, error=f"multi-line JSON document longer than {MAX_DOCUMENT_BYTES} bytes, "
                                            "the most one JSON document may be (write JSON lines instead)")
                return
            whole = _parse_json(number, line + rest)
            if whole.error:
                yield Payload(number, error=f"{whole.error} (multi-line JSON document)")
                return
            yield whole
            return
        first = False
        yield payload


def _message(number: int, data: bytes) -> Payload:
    if data.startswith(_ZSTD_MAGIC):
        import zstandard

        try:
            reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
            data = reader.read(MAX_MESSAGE_BYTES + 1)
        except zstandard.ZstdError as exc:
            return Payload(number, error=f"invalid zstd frame: {exc}")
        if len(data) > MAX_MESSAGE_BYTES:
            return Payload(number, error="decompressed message too large")
    if data.lstrip()[:1] == b"{":
        return _parse_json(number, data)
    return Payload(number, data=data)


def _length_prefixed(stream: io.BufferedReader) -> Iterator[Payload]:
    number = 0
    while True:
        prefix = stream.read(4)
        if not prefix:
            return
        number += 1
        if len(prefix) < 4:
            yield Payload(number, error="truncated length prefix at end of file")
            return
        (size,) = struct.unpack(">I", prefix)
        if size > MAX_MESSAGE_BYTES:
            yield Payload(number, error="not a trace file restorelens reads: neither JSON (OTLP, Jaeger, Tempo), "
                                        "length-prefixed OTLP messages nor Parquet")
            return
        data = stream.read(size)
        if len(data) < size:
            yield Payload(number, error=f"truncated message: {len(data)} of {size} bytes")
            return
        yield _message(number, data)


@contextlib.contextmanager
def open_stream(
    path: str | os.PathLike[str], on_bytes: Callable[[int], None] | None = None
) -> Iterator[tuple[io.BufferedReader, bool]]:
    """The decompressed content of ``path`` and whether it is JSON (lines) rather than length-prefixed."""
    with open(path, "rb", buffering=0) as raw:
        stream = _decompressed(io.BufferedReader(_CountingReader(raw, on_bytes), buffer_size=1 << 20))
        yield stream, _first_byte(stream) in (b"{", b"[")


def read_payloads(path: str | os.PathLike[str], on_bytes: Callable[[int], None] | None = None) -> Iterator[Payload]:
    """Yield every payload of one file; a damaged stream ends with an error payload."""
    number = 0
    try:
        with open_stream(path, on_bytes) as (stream, is_json):
            for payload in _json_lines(stream) if is_json else _length_prefixed(stream):
                number = payload.number
                yield payload
    except (OSError, EOFError, ValueError) as exc:  # truncated or corrupt gzip/zstd stream
        yield Payload(number + 1, error=f"cannot read further: {exc}")
    except Exception as exc:  # zstandard.ZstdError is not an OSError
        if type(exc).__module__.startswith("zstandard"):
            yield Payload(number + 1, error=f"cannot read further: {exc}")
        else:
            raise


def _magic(path: str | os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(4)
    except OSError:
        return b""  # read_payloads, opening it again, reports why


def is_parquet(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` starts with Parquet's magic (a Parquet file cannot be read as a stream)."""
    return _magic(path) == _PARQUET_MAGIC


def compression(path: str | os.PathLike[str]) -> str:
    """``gzip``, ``zstd`` or '' (none), by the file's first bytes."""
    head = _magic(path)
    if head.startswith(_GZIP_MAGIC):
        return "gzip"
    return "zstd" if head == _ZSTD_MAGIC else ""
