"""Where the dashboard's spans come from: the ``--db`` store, the sample traces, or an uploaded file.

No Streamlit here. The store named by ``--db`` reaches the Streamlit process through
``DB_ENV``, and the window it is read for (``--since``, ``--until``, ``--run``) through
``WINDOW_ENV``; sample and uploaded traces are loaded into a temporary store by the collector's loader,
in one folder per dashboard process (``work_folder``), removed when the process exits.

An upload is untrusted: its size is bounded before and after decompression (``MAX_UPLOAD_ENV``),
it is decompressed one chunk at a time, and its name only ever appears in messages, never in a path.
"""

from __future__ import annotations

import atexit
import functools
import gzip
import io
import json
import os
import shutil
import tempfile
import time
import zlib
from pathlib import Path
from typing import IO, Any

import duckdb

from restorelens.analysis.window import Window
from restorelens.collector import load_paths
from restorelens.store import TABLE, open_read_only
from restorelens.errors import InputError, SettingError

__all__ = [
    "DB_ENV",
    "DEFAULT_MAX_UPLOAD_BYTES",
    "LABELS_ENV",
    "LIMITS_ENV",
    "MAX_UPLOAD_ENV",
    "MAX_WINDOW_ENV_CHARS",
    "SAMPLE_DIR",
    "WINDOW_ENV",
    "configured_labels",
    "configured_limits",
    "configured_max_upload_bytes",
    "configured_window",
    "copy_upload",
    "load_into_store",
    "labels_env_value",
    "load_upload",
    "remove_stale_folders",
    "sample_files",
    "shown_name",
    "store_stamp",
    "store_window",
    "upload_size_mib",
    "is_warehouse",
    "validate_store",
    "window_env_value",
    "work_folder",
]

#: The span store the CLI's ``--db`` names (an absolute path).
DB_ENV = "RESTORELENS_DASHBOARD_DB"
#: Limits (``view.metric.stat=N``, separated by ``;``) the CLI's ``--max`` options name.
LIMITS_ENV = "RESTORELENS_DASHBOARD_LIMITS"
#: The label mapping (``--label``, ``--config``'s ``[analysis.labels]``) as one JSON object of
#: label -> attribute name: data for ``json.loads``, never code or SQL.
LABELS_ENV = "RESTORELENS_DASHBOARD_LABELS"
#: The mapping's longest JSON text: six labels of 256-character names fit many times over, and the
#: app reads no more than this from its environment before parsing it.
MAX_LABELS_ENV_CHARS = 16 * 1024
#: The window (``--since``, ``--until``, ``--run``) as one JSON object ``{"since_ns": int | null,
#: "until_ns": int | null, "runs": [str, ...]}``: data for ``json.loads``, never code or SQL. It
#: applies to the ``DB_ENV`` store only.
WINDOW_ENV = "RESTORELENS_DASHBOARD_WINDOW"
#: The window's longest JSON text: thousands of run ids, and well inside what Linux lets one
#: environment string hold (128 KiB); the app reads no more than this before parsing it.
MAX_WINDOW_ENV_CHARS = 64 * 1024
#: Recorded traces shipped with the repository (present in a source checkout).
SAMPLE_DIR = Path(__file__).resolve().parents[1] / "sample_traces"

#: ClickHouse frames are read again after this long (a fleet's table grows all the time).
WAREHOUSE_REFRESH_S = 60
#: How long a page waits for a writer (``restorelens collect``) to release the store.
READ_LOCK_TIMEOUT_S = 5.0

#: The largest upload in bytes, as sent and once decompressed (the CLI's ``--max-upload-bytes``).
MAX_UPLOAD_ENV = "RESTORELENS_DASHBOARD_MAX_UPLOAD_BYTES"
#: 256 MiB: the collector's own bound on one JSON document, and hundreds of times a recorded run.
DEFAULT_MAX_UPLOAD_BYTES = 256 * 1024 * 1024
MIB = 1024 * 1024
#: Decompression reads and writes this much at a time, whatever the upload holds.
CHUNK_BYTES = MIB
#: A browser may send any name, of any length: messages show at most this many characters of it.
MAX_SHOWN_NAME_CHARS = 120

#: One folder per dashboard process holds its uploaded and sample stores: ``<prefix><pid>-<random>``.
WORK_PREFIX = "restorelens-dashboard-"
#: A process folder is left over (its dashboard was killed) when its pid is gone and it is this old.
STALE_AGE_S = 24 * 3600.0
#: Folders earlier versions made per upload or sample load and never removed: stale at the same age.
LEGACY_PREFIXES = ("restorelens-upload-", "restorelens-samples-")

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def configured_limits() -> tuple[str, ...] | None:
    text = os.environ.get(LIMITS_ENV)
    if text is None:
        return None
    return tuple(part.strip() for part in text.split(";") if part.strip())


def labels_env_value(labels: dict[str, str]) -> str:
    """The mapping as ``LABELS_ENV`` carries it (checked by the CLI before it gets here)."""
    text = json.dumps(labels, ensure_ascii=True, sort_keys=True)
    if len(text) > MAX_LABELS_ENV_CHARS:
        raise SettingError("--label", f"the label mapping is longer than {MAX_LABELS_ENV_CHARS} characters")
    return text


def configured_labels() -> dict[str, str]:
    """The label mapping the CLI set (``LABELS_ENV``), checked again as the analysis checks it:
    the environment is the app's input too. None set: no mapping."""
    from restorelens.analysis import checked_labels

    text = os.environ.get(LABELS_ENV)
    if not text:
        return {}
    if len(text) > MAX_LABELS_ENV_CHARS:
        raise SettingError(LABELS_ENV, f"longer than {MAX_LABELS_ENV_CHARS} characters")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: a deeply nested array
        raise SettingError(LABELS_ENV, "not a JSON object of label -> attribute name") from None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise SettingError(LABELS_ENV, "not a JSON object of label -> attribute name")
    return checked_labels(LABELS_ENV, value)


def window_env_value(window: Window) -> str:
    """The window as ``WINDOW_ENV`` carries it (checked by the CLI before it gets here); runs longer
    than ``MAX_WINDOW_ENV_CHARS`` together are a ``SettingError`` naming ``--run``."""
    text = json.dumps({"since_ns": window.since_ns, "until_ns": window.until_ns, "runs": list(window.runs)},
                      ensure_ascii=True, sort_keys=True)
    if len(text) > MAX_WINDOW_ENV_CHARS:
        raise SettingError("--run", f"the run ids take more than {MAX_WINDOW_ENV_CHARS} characters together "
                                    "(as JSON): name fewer runs, or a time window instead")
    return text


def configured_window() -> Window:
    """The window the CLI set (``WINDOW_ENV``), checked again as the CLI checks it: the environment
    is the app's input too. None set: every span."""
    from restorelens.analysis.window import checked_window

    text = os.environ.get(WINDOW_ENV)
    if not text:
        return Window()
    if len(text) > MAX_WINDOW_ENV_CHARS:
        raise SettingError(WINDOW_ENV, f"longer than {MAX_WINDOW_ENV_CHARS} characters")
    shape = 'not a JSON object {"since_ns": int | null, "until_ns": int | null, "runs": [str, ...]}'
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: a deeply nested array
        raise SettingError(WINDOW_ENV, shape) from None
    if (not isinstance(value, dict) or not set(value) <= {"since_ns", "until_ns", "runs"}
            or not isinstance(value.get("runs", []), list)):
        raise SettingError(WINDOW_ENV, shape)
    window = Window(since_ns=value.get("since_ns"), until_ns=value.get("until_ns"), runs=tuple(value.get("runs", [])))
    return checked_window(window, since=f"{WINDOW_ENV} since_ns", until=f"{WINDOW_ENV} until_ns",
                          run=f"{WINDOW_ENV} runs")


def store_window(path: str | os.PathLike[str]) -> Window:
    """The window ``path`` is read for: the CLI's (``configured_window``) for the store the CLI
    named (``DB_ENV``), every span of any other (the sample traces, an upload)."""
    return configured_window() if str(path) == os.environ.get(DB_ENV) else Window()


def configured_max_upload_bytes() -> int:
    """The upload limit the CLI set (``MAX_UPLOAD_ENV``), or ``DEFAULT_MAX_UPLOAD_BYTES``."""
    text = os.environ.get(MAX_UPLOAD_ENV)
    if text is None:
        return DEFAULT_MAX_UPLOAD_BYTES
    try:
        value = int(text)
    except ValueError:
        raise SettingError(MAX_UPLOAD_ENV, f"{text!r} is not a whole number of bytes") from None
    if value < 1:
        raise SettingError(MAX_UPLOAD_ENV, f"{value} is not a positive number of bytes")
    return value


def upload_size_mib(max_bytes: int) -> int:
    """Streamlit's upload bound (``server.maxUploadSize``, whole MiB) that lets ``max_bytes`` through."""
    return max(1, -(-max_bytes // MIB))


def sample_files(folder: Path | None = None) -> list[Path]:
    folder = SAMPLE_DIR if folder is None else folder
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith((".jsonl", ".json", ".jsonl.gz")))


def is_warehouse(store: str | os.PathLike[str]) -> bool:
    """Whether ``store`` names ClickHouse or chDB (``--source``) rather than a DuckDB file."""
    return str(store).startswith(("chdb:", "clickhouse://", "clickhouses://"))


def store_stamp(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """Size and modification time of the store and its write-ahead log: a cache key that changes
    whenever a writer commits, so cached frames never outlive new spans. ClickHouse has no file to
    look at: its frames are kept for the minute (``WAREHOUSE_REFRESH_S``)."""
    if is_warehouse(path):
        return (int(time.time() // WAREHOUSE_REFRESH_S),)
    stamp: list[int] = []
    for candidate in (Path(path), Path(f"{path}.wal")):
        try:
            info = candidate.stat()
        except FileNotFoundError:
            stamp += [-1, -1]
        else:
            stamp += [info.st_size, info.st_mtime_ns]
    return tuple(stamp)


def validate_store(path: str | os.PathLike[str], *, timeout_s: float = READ_LOCK_TIMEOUT_S,
                   window: Window = Window()) -> None:
    """A one-line ``InputError`` unless ``path`` is a DuckDB file holding ``otel_traces``, or a
    ClickHouse / chDB source (``--source``) whose ``otel_traces`` can be read (for ``window``)."""
    if is_warehouse(path):
        from restorelens.analysis.sources import open_analysis
        from restorelens.sources import parse_source

        with open_analysis(parse_source(str(path)), window=window) as analysis:
            analysis.probe()
        return
    con = open_read_only(path, timeout_s=timeout_s)
    try:
        tables = {row[0] for row in con.execute("select table_name from duckdb_tables()").fetchall()}
    except duckdb.Error as exc:
        raise InputError(str(path), f"cannot read the store: {str(exc).splitlines()[0]}") from None
    finally:
        con.close()
    if TABLE not in tables:
        raise InputError(str(path), f"not a restorelens span store (no {TABLE} table)")


def load_into_store(files: list[Path], db_path: Path, *, shown_as: str | None = None) -> Path:
    """Load OTLP JSON(L) ``files`` into a new store at ``db_path``; nothing usable is an InputError.

    ``shown_as`` names the one file in messages instead of its path (an upload's temporary copy,
    which means nothing to the user who sent it).
    """

    def named(text: str) -> str:
        return text.replace(str(files[0]), shown_as) if shown_as is not None and files else text

    try:
        summary = load_paths(files, db_path)
    except duckdb.Error as exc:
        raise InputError(named(str(files[0])) if files else "", named(str(exc).splitlines()[0])) from None
    if summary.loaded + summary.duplicate == 0:
        reason = named(summary.errors[0]) if summary.errors else "no spans in it"
        raise InputError("", f"no OTLP spans could be read: {reason}")
    return db_path


# --- the process folder -----------------------------------------------------------------------


@functools.cache
def work_folder() -> Path:
    """This process's folder for uploaded and sample stores, made on first use and removed at exit.

    Streamlit returns normally on Ctrl-C and SIGTERM, so the exit hook runs then; a killed process
    cannot clean up, so the folders killed dashboards left are removed here first.
    """
    parent = Path(tempfile.gettempdir())
    remove_stale_folders(parent)
    folder = Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-", dir=parent))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def remove_stale_folders(parent: Path, *, now_s: float | None = None) -> list[Path]:
    """Remove the folders under ``parent`` that dashboards gone for good left behind; returns them.

    A process folder goes when its pid is not running and it is older than ``STALE_AGE_S``: the age
    keeps a live dashboard another pid namespace hides; the pid keeps a long idle one. Folders of
    earlier versions go by age alone. Another user's folders stay (removing them fails quietly).
    """
    now_s = time.time() if now_s is None else now_s
    removed = []
    for prefix in (WORK_PREFIX, *LEGACY_PREFIXES):
        for folder in parent.glob(f"{prefix}*"):
            try:
                old = now_s - folder.stat().st_mtime > STALE_AGE_S
            except OSError:  # removed meanwhile by another dashboard
                continue
            if not folder.is_dir() or not old:
                continue
            if prefix == WORK_PREFIX and _running(_pid_in(folder.name[len(prefix):])):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _pid_in(rest: str) -> int | None:
    head = rest.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _running(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


# --- uploads ----------------------------------------------------------------------------------


def shown_name(name: str) -> str:
    """An uploaded file's name as messages show it: its last part, printable, at most
    ``MAX_SHOWN_NAME_CHARS`` characters (the browser sends any name)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(ch if ch.isprintable() else "?" for ch in base).strip() or "upload"
    return base if len(base) <= MAX_SHOWN_NAME_CHARS else base[: MAX_SHOWN_NAME_CHARS - 1] + "…"


def _limit_text(max_bytes: int) -> str:
    size = f"{max_bytes // MIB} MiB" if max_bytes % MIB == 0 else f"{max_bytes}-byte"
    return f"the {size} limit (restorelens dashboard --max-upload-bytes)"


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


def _decompressing(stream: io.BufferedReader) -> IO[bytes]:
    """``stream`` itself, or its gzip or zstd decompression, told by the first bytes (never the name)."""
    head = stream.peek(4)[:4]
    if head.startswith(_GZIP_MAGIC):
        return gzip.GzipFile(fileobj=stream)
    if head == _ZSTD_MAGIC:
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
    return stream


def copy_upload(upload: IO[bytes], name: str, out: Path, max_bytes: int) -> None:
    """Write the uploaded content to ``out``, gzip or zstd decompressed, one chunk at a time.

    More than ``max_bytes`` read, or written once decompressed, is an ``InputError`` naming ``name``
    and the limit; so is a damaged gzip or zstd stream. Memory stays at a chunk, whatever the ratio.
    """
    shown = shown_name(name)
    bounded = io.BufferedReader(_Bounded(upload, max_bytes, shown), buffer_size=CHUNK_BYTES)
    written = 0
    with _decompressing(bounded) as stream, out.open("wb") as sink:
        while chunk := _next_chunk(stream, shown):
            written += len(chunk)
            if written > max_bytes:
                raise InputError(shown, f"holds more than {_limit_text(max_bytes)} once decompressed")
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


def _require_json(path: Path, shown: str) -> None:
    """Only JSON (lines) is taken: a length-prefixed file may hold zstd frames the loader would
    inflate past the limit, and compression inside the compression would escape it the same way."""
    with path.open("rb") as copy:
        head = copy.read(64 * 1024).lstrip()
    if not head:
        raise InputError(shown, "holds no data")
    if head[:1] not in (b"{", b"["):
        raise InputError(shown, "not OTLP JSON or JSON lines (plain, gzip or zstd)")


def load_upload(upload: IO[bytes], name: str, *, max_bytes: int, folder: Path | None = None) -> Path:
    """A new store (in ``folder``, default ``work_folder()``) holding the spans of one uploaded file.

    The decompressed copy goes once it is loaded, and everything made goes when the load fails. The
    copy is never named after the upload: a name can be 300 bytes long or ``../../x``.
    """
    shown = shown_name(name)
    target = Path(tempfile.mkdtemp(prefix="upload-", dir=work_folder() if folder is None else folder))
    copy = target / "upload.jsonl"
    try:
        copy_upload(upload, name, copy, max_bytes)
        _require_json(copy, shown)
        return load_into_store([copy], target / "spans.duckdb", shown_as=shown)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    finally:
        copy.unlink(missing_ok=True)
