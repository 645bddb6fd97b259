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

Which of these a file is, is decided in one place, :func:`sniff_format`, over its first bytes (and,
for a compressed file, over the first bytes of its content); the dashboard's upload check asks the
same function, so what it checks is what the loader reads.

A caller may bound what a file holds once decompressed (``max_decompressed_bytes``): the
decompressed stream and every zstd message in it count, and the load stops with
:class:`DecompressedTooLarge` before more than that is inflated.

Each payload is numbered: the line number for JSON lines, the message number otherwise.
"""

from __future__ import annotations

import contextlib
import enum
import gzip
import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from restorelens.collector.decode_json import loads, may_hold_surrogates
from restorelens.errors import InputError

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_MESSAGE_BYTES",
    "NOT_A_TRACE_FILE",
    "SNIFF_BYTES",
    "DecompressedTooLarge",
    "Payload",
    "StreamFormat",
    "compression",
    "decompressed",
    "is_parquet",
    "open_stream",
    "read_payloads",
    "sniff_format",
]

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_PARQUET_MAGIC = b"PAR1"
#: A JSON document (one line, or one pretty-printed file) is parsed whole; none may be longer.
MAX_DOCUMENT_BYTES = 256 * 1024 * 1024
#: A length prefix above this means the file is not length-prefixed OTLP at all.
MAX_MESSAGE_BYTES = 1024 * 1024 * 1024
#: The format is told from this many first bytes: JSON may start with this much blank space.
SNIFF_BYTES = 64 * 1024
#: A zstd message is inflated this much at a time, so that a bound stops it within a chunk.
_INFLATE_CHUNK_BYTES = 1024 * 1024
#: What a file of no format restorelens reads is.
NOT_A_TRACE_FILE = ("not a trace file restorelens reads: neither JSON (OTLP, Jaeger, Tempo), length-prefixed "
                    "OTLP messages nor Parquet")
#: JSON's own whitespace (RFC 8259), which may come before the first document.
_JSON_BLANK = b" \t\r\n"


class StreamFormat(enum.Enum):
    """What a stream's first bytes say it is (:func:`sniff_format`)."""

    EMPTY = "empty"
    GZIP = "gzip"
    ZSTD = "zstd"
    PARQUET = "Parquet"
    JSON = "JSON (lines)"
    LENGTH_PREFIXED = "length-prefixed messages"
    #: Neither: not JSON, and its first length prefix is cut short or absurd.
    UNKNOWN = "unknown"


def sniff_format(head: bytes) -> StreamFormat:
    """The format of a stream whose first ``SNIFF_BYTES`` bytes (fewer only at its end) are ``head``.

    Compression and Parquet by their magic; then JSON when the first byte after JSON's blank space
    is ``{`` or ``[``, or when ``head`` is all blank (blank lines, more to come); else
    length-prefixed messages when the first length prefix is whole and at most
    ``MAX_MESSAGE_BYTES``. A length prefix of four blank bytes is a 151-MiB message at least, whose
    first byte (a protobuf tag or a zstd magic) is never ``{``: the two cannot be confused.
    """
    if not head:
        return StreamFormat.EMPTY
    if head.startswith(_GZIP_MAGIC):
        return StreamFormat.GZIP
    if head.startswith(_ZSTD_MAGIC):
        return StreamFormat.ZSTD
    if head.startswith(_PARQUET_MAGIC):
        return StreamFormat.PARQUET
    if head.lstrip(_JSON_BLANK)[:1] in (b"", b"{", b"["):
        return StreamFormat.JSON
    if len(head) < 4 or struct.unpack(">I", head[:4])[0] > MAX_MESSAGE_BYTES:
        return StreamFormat.UNKNOWN
    return StreamFormat.LENGTH_PREFIXED


class DecompressedTooLarge(InputError):
    """A file holds more than the caller's bound once decompressed; nothing past it was inflated."""

    def __init__(self, where: str, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        super().__init__(where, f"holds more than {max_bytes} bytes once decompressed")


class _Budget:
    """What is left of a file's decompressed bound, taken by its stream and its zstd messages."""

    def __init__(self, where: str, max_bytes: int) -> None:
        self.where, self.max_bytes, self.left = where, max_bytes, max_bytes

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise DecompressedTooLarge(self.where, self.max_bytes)


class _BoundedReader(io.RawIOBase):
    """Reads a decompressed stream, never asking it for more than one byte past the budget."""

    def __init__(self, stream: IO[bytes], budget: _Budget) -> None:
        self._stream, self._budget = stream, budget

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)[: max(0, self._budget.left) + 1]
        n = self._stream.readinto(view)  # type: ignore[attr-defined]
        self._budget.take(n or 0)
        return n or 0


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


def decompressed(stream: io.BufferedReader) -> io.BufferedReader:
    """``stream`` itself, or its gzip or zstd decompression, told by its first bytes (never a name)."""
    packing = sniff_format(stream.peek(4)[:4])
    if packing is StreamFormat.GZIP:
        # GzipFile buffers itself; another buffer on top would hide the lines read before a truncation.
        return gzip.GzipFile(fileobj=stream)  # type: ignore[return-value]
    if packing is StreamFormat.ZSTD:
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
        return io.BufferedReader(reader)  # type: ignore[arg-type]
    return stream


def _is_stream_error(exc: Exception) -> bool:
    """A truncated or corrupt gzip or zstd stream (zstandard.ZstdError is not an OSError)."""
    return isinstance(exc, (OSError, EOFError, ValueError)) or type(exc).__module__.startswith("zstandard")


def content_head(path: str | os.PathLike[str]) -> bytes:
    """The first ``SNIFF_BYTES`` of ``path``'s content (decompressed), or fewer at its end or at
    a damaged stream (the read proper reports the damage)."""
    parts: list[bytes] = []
    got = 0
    with open(path, "rb") as raw:
        try:
            stream = decompressed(io.BufferedReader(raw))
            while got < SNIFF_BYTES and (part := stream.read(SNIFF_BYTES - got)):
                parts.append(part)
                got += len(part)
        except Exception as exc:
            if not _is_stream_error(exc):
                raise
    return b"".join(parts)


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


def _inflated(number: int, data: bytes, budget: _Budget | None) -> Payload | bytes:
    """The zstd message ``data`` inflated, a chunk at a time: never more than the message bound or
    what is left of ``budget`` is held (past the budget, :class:`DecompressedTooLarge`)."""
    import zstandard

    limit = MAX_MESSAGE_BYTES if budget is None else min(MAX_MESSAGE_BYTES, budget.left + len(data))
    parts: list[bytes] = []
    size = 0
    try:
        declared = zstandard.frame_content_size(data)
        if declared > limit:  # refused from the frame's header: nothing inflated
            size = declared
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        while size <= limit and (chunk := reader.read(_INFLATE_CHUNK_BYTES)):
            parts.append(chunk)
            size += len(chunk)
    except zstandard.ZstdError as exc:
        return Payload(number, error=f"invalid zstd frame: {exc}")
    if budget is not None:
        budget.take(size - len(data))  # its compressed bytes were taken as the stream was read
    if size > MAX_MESSAGE_BYTES:
        return Payload(number, error="decompressed message too large")
    return b"".join(parts)


def _message(number: int, data: bytes, budget: _Budget | None = None) -> Payload:
    if sniff_format(data[:4]) is StreamFormat.ZSTD:
        inflated = _inflated(number, data, budget)
        if isinstance(inflated, Payload):
            return inflated
        data = inflated
    if data.lstrip()[:1] == b"{":
        return _parse_json(number, data)
    return Payload(number, data=data)


def _length_prefixed(stream: io.BufferedReader, budget: _Budget | None) -> Iterator[Payload]:
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
            yield Payload(number, error=NOT_A_TRACE_FILE)
            return
        data = stream.read(size)
        if len(data) < size:
            yield Payload(number, error=f"truncated message: {len(data)} of {size} bytes")
            return
        yield _message(number, data, budget)


@contextlib.contextmanager
def open_stream(
    path: str | os.PathLike[str],
    on_bytes: Callable[[int], None] | None = None,
    max_decompressed_bytes: int | None = None,
) -> Iterator[tuple[io.BufferedReader, bool]]:
    """The decompressed content of ``path`` and whether it is JSON (lines) rather than length-prefixed
    (:func:`sniff_format` of its content); with ``max_decompressed_bytes``, reading past that many
    bytes raises :class:`DecompressedTooLarge`."""
    with _opened(path, on_bytes, max_decompressed_bytes) as (stream, kind, _):
        yield stream, kind in (StreamFormat.JSON, StreamFormat.EMPTY)


@contextlib.contextmanager
def _opened(
    path: str | os.PathLike[str], on_bytes: Callable[[int], None] | None, max_decompressed_bytes: int | None
) -> Iterator[tuple[io.BufferedReader, StreamFormat, _Budget | None]]:
    kind = sniff_format(content_head(path))
    budget = None if max_decompressed_bytes is None else _Budget(str(path), max_decompressed_bytes)
    with open(path, "rb", buffering=0) as raw:
        stream = decompressed(io.BufferedReader(_CountingReader(raw, on_bytes), buffer_size=1 << 20))
        if budget is not None:
            stream = io.BufferedReader(_BoundedReader(stream, budget), buffer_size=1 << 20)
        yield stream, kind, budget


def read_payloads(
    path: str | os.PathLike[str],
    on_bytes: Callable[[int], None] | None = None,
    max_decompressed_bytes: int | None = None,
) -> Iterator[Payload]:
    """Yield every payload of one file; a damaged stream ends with an error payload. Past
    ``max_decompressed_bytes`` (the stream and its zstd messages), :class:`DecompressedTooLarge`."""
    number = 0
    try:
        with _opened(path, on_bytes, max_decompressed_bytes) as (stream, kind, budget):
            if kind is StreamFormat.UNKNOWN:
                yield Payload(1, error=NOT_A_TRACE_FILE)
                return
            is_json = kind in (StreamFormat.JSON, StreamFormat.EMPTY)
            for payload in _json_lines(stream) if is_json else _length_prefixed(stream, budget):
                number = payload.number
                yield payload
    except DecompressedTooLarge:
        raise
    except Exception as exc:
        if not _is_stream_error(exc):
            raise
        yield Payload(number + 1, error=f"cannot read further: {exc}")


def _magic(path: str | os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(4)
    except OSError:
        return b""  # read_payloads, opening it again, reports why


def is_parquet(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` starts with Parquet's magic (a Parquet file cannot be read as a stream)."""
    return sniff_format(_magic(path)) is StreamFormat.PARQUET


def compression(path: str | os.PathLike[str]) -> str:
    """``gzip``, ``zstd`` or '' (none), by the file's first bytes."""
    packing = sniff_format(_magic(path))
    return packing.value if packing in (StreamFormat.GZIP, StreamFormat.ZSTD) else ""
