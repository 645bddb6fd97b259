"""An uploaded trace file, loaded into a store of its own in this process's folder.

An upload is untrusted: its size is bounded before and after decompression (the CLI's
``--max-upload-bytes``), it is decompressed one chunk at a time, and its name only ever appears in
messages, never in a path. Its format is the collector's decision (``sniff_format``), the one the
loader then reads it by; the loader keeps the same bound over every zstd message it inflates.
"""

from __future__ import annotations

import io
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import IO, Any

from restorelens.collector import (
    NOT_A_TRACE_FILE,
    SNIFF_BYTES,
    DecompressedTooLarge,
    StreamFormat,
    decompressed,
    sniff_format,
)
from restorelens.dashboard import source
from restorelens.errors import InputError

__all__ = [
    "CHUNK_BYTES",
    "MAX_SHOWN_NAME_CHARS",
    "MIB",
    "copy_upload",
    "load_upload",
    "shown_name",
    "upload_size_mib",
]

MIB = 1024 * 1024
#: Decompression reads and writes this much at a time, whatever the upload holds.
CHUNK_BYTES = MIB
#: A browser may send any name, of any length: messages show at most this many characters of it.
MAX_SHOWN_NAME_CHARS = 120


def upload_size_mib(max_bytes: int) -> int:
    """Streamlit's upload bound (``server.maxUploadSize``, whole MiB) that lets ``max_bytes`` through."""
    return max(1, -(-max_bytes // MIB))


def shown_name(name: str) -> str:
    """An uploaded file's name as messages show it: its last part, printable, at most
    ``MAX_SHOWN_NAME_CHARS`` characters (the browser sends any name)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(ch if ch.isprintable() else "?" for ch in base).strip() or "upload"
    return base if len(base) <= MAX_SHOWN_NAME_CHARS else base[: MAX_SHOWN_NAME_CHARS - 1] + "…"


def _limit_text(max_bytes: int) -> str:
    size = f"{max_bytes // MIB} MiB" if max_bytes % MIB == 0 else f"{max_bytes}-byte"
    return f"the {size} limit (restorelens dashboard --max-upload-bytes)"


def _too_large(shown: str, max_bytes: int) -> InputError:
    return InputError(shown, f"holds more than {_limit_text(max_bytes)} once decompressed")


class _Bounded(io.RawIOBase):
    """Reads ``source`` and refuses past ``max_bytes``: the compressed side of the bound."""

    def __init__(self, source: IO[bytes], max_bytes: int, shown: str) -> None:
        self._source, self._max_bytes, self._shown = source, max_bytes, shown
        self._read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._source.read(len(buffer))
        self._read += len(data)
        if self._read > self._max_bytes:
            raise InputError(self._shown, f"the upload is larger than {_limit_text(self._max_bytes)}")
        buffer[: len(data)] = data
        return len(data)


def copy_upload(upload: IO[bytes], name: str, out: Path, max_bytes: int) -> None:
    """Write the uploaded content to ``out``, gzip or zstd decompressed, one chunk at a time.

    More than ``max_bytes`` read, or written once decompressed, is an ``InputError`` naming ``name``
    and the limit; so is a damaged gzip or zstd stream. Memory stays at a chunk, whatever the ratio.
    """
    shown = shown_name(name)
    bounded = io.BufferedReader(_Bounded(upload, max_bytes, shown), buffer_size=CHUNK_BYTES)
    written = 0
    with decompressed(bounded) as stream, out.open("wb") as sink:
        while chunk := _next_chunk(stream, shown):
            written += len(chunk)
            if written > max_bytes:
                raise _too_large(shown, max_bytes)
            sink.write(chunk)


def _next_chunk(stream: IO[bytes], shown: str) -> bytes:
    """The next chunk of the decompressed stream; a damaged stream is an ``InputError``."""
    try:
        return stream.read(CHUNK_BYTES)
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise InputError(shown, f"cannot decompress it: {exc}") from None
    except Exception as exc:  # zstandard.ZstdError is not an OSError
        if type(exc).__module__.startswith("zstandard"):
            raise InputError(shown, f"cannot decompress it: {exc}") from None
        raise


#: Why the upload does not take a decompressed copy of each of these formats.
_NOT_TAKEN = {
    StreamFormat.EMPTY: "holds no data",
    StreamFormat.GZIP: "holds a compressed stream inside its compression: decompress it once",
    StreamFormat.ZSTD: "holds a compressed stream inside its compression: decompress it once",
    StreamFormat.PARQUET: "is Parquet, which the upload does not take: load it with restorelens load and "
                          "open the store with restorelens dashboard --db",
    StreamFormat.UNKNOWN: NOT_A_TRACE_FILE,
}


def _require_stream(path: Path, shown: str) -> None:
    """Only what the loader reads as a stream is taken (JSON, JSON lines, length-prefixed OTLP),
    told as the loader tells it, so that the loader's bound covers all it inflates: pyarrow
    decompresses Parquet out of its reach. Compression inside compression is no file anyone writes."""
    with path.open("rb") as copy:
        problem = _NOT_TAKEN.get(sniff_format(copy.read(SNIFF_BYTES)))
    if problem is not None:
        raise InputError(shown, problem)


def load_upload(upload: IO[bytes], name: str, *, max_bytes: int, folder: Path | None = None) -> Path:
    """A new store (in ``folder``, default ``source.work_folder()``) holding the spans of one uploaded file.

    The decompressed copy goes once it is loaded, and everything made goes when the load fails. The
    copy is never named after the upload: a name can be 300 bytes long or ``../../x``.
    """
    shown = shown_name(name)
    target = Path(tempfile.mkdtemp(prefix="upload-", dir=source.work_folder() if folder is None else folder))
    copy = target / "upload.jsonl"
    try:
        copy_upload(upload, name, copy, max_bytes)
        _require_stream(copy, shown)
        try:
            return source.load_into_store([copy], target / "spans.duckdb", shown_as=shown,
                                          max_decompressed_bytes=max_bytes)
        except DecompressedTooLarge:  # a zstd message of a length-prefixed file, stopped at the bound
            raise _too_large(shown, max_bytes) from None
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    finally:
        copy.unlink(missing_ok=True)
