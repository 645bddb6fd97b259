"""Bounded, streaming request-body decoding: identity, gzip, deflate (zlib or raw), zstd.

The size limit applies to the compressed bytes received and to the decompressed bytes produced,
checked while decompressing chunk by chunk, so a small gzip bomb is stopped after ``limit + 1``
bytes of output instead of being inflated in memory. Sans-I/O: feed chunks, then ``finish()``.
"""

from __future__ import annotations

import io
import zlib

__all__ = ["BodyDecoder", "BodyTooLarge", "CorruptBody", "UnsupportedEncoding", "body_decoder"]


class BodyTooLarge(Exception):
    """The body (compressed or decompressed) is larger than the limit."""


class UnsupportedEncoding(Exception):
    """The Content-Encoding is not one this receiver decodes."""


class CorruptBody(Exception):
    """The compressed stream is invalid or truncated."""


class BodyDecoder:
    """Identity: collect bytes up to the limit.

    ``take()`` hands over what has been decoded so far, for a reader that reads as the body
    arrives; ``finish()`` the rest (all of it, when nothing was taken).
    """

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._received = 0
        self._produced = 0
        self._out: list[bytes] = []  # pieces, joined once: growing one buffer copied it again and again

    def feed(self, chunk: bytes) -> None:
        self._received += len(chunk)
        if self._received > self.limit_bytes:
            raise BodyTooLarge(f"request body exceeds {self.limit_bytes} bytes")
        self._decode(chunk)

    def _decode(self, chunk: bytes) -> None:
        self._out.append(chunk)

    def _emit(self, data: bytes) -> None:
        self._produced += len(data)
        if self._produced > self.limit_bytes:
            raise BodyTooLarge(f"decompressed request body exceeds {self.limit_bytes} bytes")
        self._out.append(data)

    def take(self) -> bytes:
        """The bytes decoded since the last ``take``."""
        out = b"".join(self._out)
        self._out.clear()
        return out

    def finish(self) -> bytes:
        return self.take()


class _ZlibDecoder(BodyDecoder):
    def __init__(self, limit_bytes: int, wbits: int | None) -> None:
        super().__init__(limit_bytes)
        self._wbits = wbits  # None: decide from the first bytes (zlib header or raw deflate)
        self._inflater: zlib._Decompress | None = None
        self._pending = b""

    def _decode(self, chunk: bytes) -> None:
        data = self._pending + chunk
        self._pending = b""
        while data:
            if self._inflater is None:
                if self._wbits is None and len(data) < 2:
                    self._pending = data
                    return
                self._inflater = zlib.decompressobj(self._wbits if self._wbits is not None else _deflate_wbits(data))
            room = self.limit_bytes - self._produced + 1
            try:
                self._emit(self._inflater.decompress(data, room))
            except zlib.error as exc:
                raise CorruptBody(f"invalid compressed body: {exc}") from None
            if self._inflater.unconsumed_tail:  # output hit the limit with input left over
                raise BodyTooLarge(f"decompressed request body exceeds {self.limit_bytes} bytes")
            data = b""
            if self._inflater.eof and self._wbits == 31 and self._inflater.unused_data:
                data = self._inflater.unused_data  # another gzip member follows
                self._inflater = None

    def finish(self) -> bytes:
        if self._pending or (self._inflater is not None and not self._inflater.eof):
            raise CorruptBody("compressed body is truncated")
        return super().finish()


def _deflate_wbits(head: bytes) -> int:
    """HTTP 'deflate' is the zlib format (RFC 9110), but some clients send raw deflate."""
    is_zlib = (head[0] & 0x0F) == 8 and (head[0] << 8 | head[1]) % 31 == 0
    return 15 if is_zlib else -15


class _ZstdDecoder(BodyDecoder):
    def __init__(self, limit_bytes: int) -> None:
        super().__init__(limit_bytes)
        self._compressed = bytearray()

    def _decode(self, chunk: bytes) -> None:
        self._compressed += chunk  # bounded by the received-bytes limit

    def finish(self) -> bytes:
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(self._compressed)), read_across_frames=True)
        try:
            out = reader.read(self.limit_bytes + 1)  # never inflates past the limit
        except zstandard.ZstdError as exc:
            raise CorruptBody(f"invalid zstd body: {exc}") from None
        if len(out) > self.limit_bytes:
            raise BodyTooLarge(f"decompressed request body exceeds {self.limit_bytes} bytes")
        _check_complete_zstd(bytes(self._compressed))
        return out


def _check_complete_zstd(data: bytes) -> None:
    """CorruptBody unless ``data`` is whole zstd frames: the stream reader returns what it could
    decode of a truncated frame without a word, and the receiver then answered 200 for spans it lost.
    Decoding again is bounded: the reader has just shown that all of it fits the limit."""
    import zstandard

    while data:
        frame = zstandard.ZstdDecompressor().decompressobj()
        try:
            frame.decompress(data)
        except zstandard.ZstdError as exc:
            raise CorruptBody(f"invalid zstd body: {exc}") from None
        if not frame.eof:
            raise CorruptBody("compressed body is truncated")
        data = frame.unused_data


def body_decoder(content_encoding: str, limit_bytes: int) -> BodyDecoder:
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity", "none"):
        return BodyDecoder(limit_bytes)
    if encoding in ("gzip", "x-gzip"):
        return _ZlibDecoder(limit_bytes, 31)
    if encoding == "deflate":
        return _ZlibDecoder(limit_bytes, None)
    if encoding == "zstd":
        return _ZstdDecoder(limit_bytes)
    raise UnsupportedEncoding(f"unsupported Content-Encoding {encoding!r}, supported: gzip, deflate, zstd, identity")
