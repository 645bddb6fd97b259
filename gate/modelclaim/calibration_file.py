"""The calibration file (``[modelclaim] calibration_path``) on disk: read at start, merged and
replaced after each wake. The I/O shell of ``calibration``, which turns it into text and back.

Reading opens nothing that is not a regular file: the path is ``stat``-ed first, opened
non-blocking and the open file checked again, so a FIFO, a device or a directory at the path is a
one-line refusal, never a read that waits forever for a writer. An empty file (what a crash during
a write used to leave) is no history, with a warning.

Writing goes through a symlink to the file it names (the link stays), under an exclusive
``flock`` on a lock file beside that file (``.<name>.lock``, kept: removing it would let two
writers lock two different files), reads what the file holds then, merges this gate's models over
it (``merged_json``: gates sharing the file keep each other's models), writes a temporary file in
the same folder, fsyncs it, renames it over the file and fsyncs the folder, so after a crash the
file is the old one or the new one, whole.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.calibration import MAX_FILE_BYTES, WakeCalibration, Wakes, merged_json, parse_wakes

__all__ = ["read_calibration_text", "read_wakes", "seed_calibration", "write_calibration"]

log = logging.getLogger(__name__)

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_calibration_text(path: Path) -> str | None:
    """The text of the calibration file at ``path``; None when there is none yet (no file, or an
    empty one, which is logged). ``SettingError`` naming the setting and the path for anything else
    that is not a calibration file's text."""
    text = _read(path)
    if text is not None and not text.strip():
        log.warning("%s is empty (a write cut short?): starting with no wake history", _where(path))
        return None
    return text


def write_calibration(path: Path, ours: Mapping[str, Mapping[str, list[float]]]) -> None:
    """Merge ``ours`` (model -> wake path -> seconds) into the file at ``path`` and replace it whole.
    ``OSError`` or ``SettingError`` (the file there is none this gate may overwrite) when it cannot."""
    with _locked(path) as target:
        _replace(target, merged_json(ours, _read(target), _where(target)))


def read_wakes(path: Path) -> Wakes:
    """What the calibration file at ``path`` holds (nothing for no file or an empty one);
    ``SettingError`` naming the setting, the path and the line for what a gate would refuse."""
    text = read_calibration_text(path)
    return parse_wakes(text, _where(path)) if text is not None else {}


def seed_calibration(path: Path, wakes: Mapping[str, Mapping[str, list[float]]]) -> WakeCalibration:
    """Put ``wakes`` (model -> wake path -> seconds, oldest first: history from elsewhere, such as a
    span store) into the file at ``path``: each model and path given replaces the file's entry for
    that model and path, every other entry stays, so seeding twice from the same history gives
    one history. Written as a gate writes. Returns the calibration a gate starting on the file has."""
    with _locked(path) as target:
        where = _where(target)
        on_disk = _read(target)
        known = parse_wakes(on_disk, where) if on_disk is not None and on_disk.strip() else {}
        merged = {model: {**known.get(model, {}), **paths} for model, paths in wakes.items()}
        text = merged_json(merged, on_disk, where)
        _replace(target, text)
    calibration = WakeCalibration()
    calibration.load_json(text, where)
    return calibration


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[Path]:
    """The file ``path`` names (through symlinks: replace the file, not the link), held under an
    exclusive ``flock`` on the lock file beside it: another gate's read-merge-write finishes first."""
    target = Path(os.path.realpath(path))
    _is_regular(target)  # refused before a lock file is made beside a device or a FIFO
    lock_path = target.with_name(f".{target.name}.lock")
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield target
    finally:
        os.close(lock)  # and with it the lock


def _where(path: Path) -> str:
    return f"modelclaim.calibration_path {path}"


def _is_regular(path: Path) -> bool:
    """True for a regular file at ``path``, False for nothing there; ``SettingError`` for anything else."""
    try:
        _check_regular(os.stat(path).st_mode, path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise SettingError(_where(path), f"cannot be read: {exc.strerror or exc}") from None
    return True


def _read(path: Path) -> str | None:
    """The file's text (at most ``MAX_FILE_BYTES``), None when there is no file."""
    where = _where(path)
    try:
        # Non-blocking: a FIFO put there after the stat must not hold the open until a writer comes.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC) if _is_regular(path) else None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SettingError(where, f"cannot be read: {exc.strerror or exc}") from None
    if fd is None:
        return None
    try:
        _check_regular(os.fstat(fd).st_mode, path)  # replaced between the stat and the open
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SettingError(where, f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        raise SettingError(where, f"is larger than {MAX_FILE_BYTES} bytes: not a calibration file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SettingError(where, "is not UTF-8 text: not a calibration file") from None


def _check_regular(mode: int, path: Path) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise SettingError(_where(path), f"is {kind}, not a regular file: give the path of a calibration file")


def _replace(target: Path, text: str) -> None:
    """``target`` becomes ``text`` whole and durably: fsynced before the rename, the folder after it.
    The temporary name is this process's and thread's own."""
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    folder = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(folder)  # the rename itself survives a crash
    finally:
        os.close(folder)
