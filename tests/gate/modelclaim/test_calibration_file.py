"""The calibration file on disk (``calibration_file.py``): through symlinks, shared by gates, durable,
and never a hang or a traceback for what is not a regular file (issue #38, item 8)."""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.actions import WakeRecord
from restorelens.gate.modelclaim.calibration import merged_json
from restorelens.gate.modelclaim.config import build_router, check_table
from restorelens.gate.modelclaim.router import ModelClaimRouter

#: Bounds the wait for work that must not block (a FIFO read, a writer once the lock is free).
GUARD_S = 30.0


def table(path: Path, *models: str) -> dict:
    return {
        "pods": [{"name": "pod-1", "gpus": ["24Gi"]}],
        "claims": [{"model": model, "perGPU": {"maximumFootprint": "4Gi", "kvFloor": "1Gi"},
                    "engine_url": "http://127.0.0.1:9"} for model in models or ("m",)],
        "policy": {"sleepAfterSeconds": 60},
        "retry_after_mode": "calibrated",
        "calibration_path": str(path),
    }


def wake(router: ModelClaimRouter, model: str = "m", duration_s: float = 4.5, at_s: float = 10.0) -> None:
    """As the core reports a wake of ``model`` that ended ready (the router writes the file then)."""
    record = WakeRecord(model, "in-place", "pod-1", at_s, at_s + duration_s, "ready", path_started_s=at_s,
                        ready_s=at_s + duration_s, observed_s=at_s + duration_s)
    for listener in router.core.listeners:
        listener.on_wake_finished(record)


def close(router: ModelClaimRouter) -> None:
    asyncio.run(router.backend.close())


def on_file(path: Path) -> dict:
    return json.loads(path.read_text())["wakes"]


def guarded(work: Callable[[], object], fifo: Path | None = None) -> None:
    """Run ``work`` in a thread; if it is still blocked after GUARD_S, open ``fifo``'s writing end
    (a reader blocked in open() then reads an end of file) so the test fails instead of hanging."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(GUARD_S)
    if thread.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(GUARD_S)
        pytest.fail("blocked on the FIFO")
    if errors:
        raise errors[0]


def test_a_symlinked_path_is_written_through_to_the_file_it_names(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target, link = tmp_path / "real" / "wakes.json", tmp_path / "wakes.json"
    link.symlink_to(target)  # dangling until the first write
    router = build_router(table(link))
    wake(router)
    close(router)
    assert link.is_symlink() and os.readlink(link) == str(target)  # before: replaced by a regular file
    assert on_file(target) == {"m": {"in-place": [4.5]}}
    wake_again = build_router(table(link))  # and read back through the link
    assert wake_again.core.calibration.predict_s("m", "in-place") == pytest.approx(4.5)
    close(wake_again)


def test_two_gates_sharing_one_file_keep_both_models_history(tmp_path: Path) -> None:
    path = tmp_path / "wakes.json"
    first = build_router(table(path, "m0"))
    for i in range(5):
        wake(first, "m0", 4.0 + i / 10, at_s=10.0 * i)
    second = build_router(table(path, "m1"))  # starts while the first runs: it reads m0's first five wakes
    for i in range(5, 15):
        wake(first, "m0", 4.0 + i / 10, at_s=10.0 * i)
    wake(second, "m1", 7.0)  # before: its write put back m0 as it read it (5 wakes), or none at all
    assert len(on_file(path)["m0"]["in-place"]) == 15 and on_file(path)["m1"] == {"in-place": [7.0]}
    wake(first, "m0", 5.0, at_s=200.0)  # and the first's next write keeps m1
    assert len(on_file(path)["m0"]["in-place"]) == 16 and on_file(path)["m1"] == {"in-place": [7.0]}
    for router in (first, second):
        close(router)

    both = build_router(table(path, "m0", "m1"))
    assert both.core.calibration.predict_s("m1", "in-place") == 7.0
    assert both.core.calibration.seen("m0", "in-place") == 16
    close(both)


def test_a_write_waits_for_the_lock_and_merges_what_was_written_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "wakes.json"
    router = build_router(table(path))
    other = {"version": 1, "wakes": {"m9": {"in-place": [9.0]}}}
    lock = os.open(tmp_path / ".wakes.json.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another gate in the middle of its write
        writer = threading.Thread(target=wake, args=(router,), daemon=True)
        writer.start()
        writer.join(0.5)
        assert writer.is_alive()  # waiting for the lock, not writing
        path.write_text(json.dumps(other))  # what the other gate writes before it lets go
    finally:
        os.close(lock)
    writer.join(GUARD_S)
    assert not writer.is_alive()
    assert on_file(path) == {"m": {"in-place": [4.5]}, "m9": {"in-place": [9.0]}}
    close(router)


def test_the_file_is_fsynced_before_the_rename_and_its_folder_after(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    fsync, replace = os.fsync, os.replace

    def fsync_seen(fd: int) -> None:
        events.append("fsync folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "fsync file")
        fsync(fd)

    def replace_seen(source, destination) -> None:
        events.append("rename")
        replace(source, destination)

    router = build_router(table(tmp_path / "wakes.json"))
    monkeypatch.setattr(os, "fsync", fsync_seen)
    monkeypatch.setattr(os, "replace", replace_seen)
    wake(router)
    monkeypatch.undo()
    assert events == ["fsync file", "rename", "fsync folder"]
    close(router)


def test_an_empty_file_is_no_history_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "wakes.json"
    path.write_bytes(b"")  # what a crash between the rename and the data reaching the disk left
    with caplog.at_level(logging.WARNING):
        router = build_router(table(path))  # before: "is not a calibration file", the gate did not start
    assert router.core.calibration.predict_s("m", "in-place") is None
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(path) in warning and "empty" in warning and "no wake history" in warning
    wake(router)
    assert on_file(path) == {"m": {"in-place": [4.5]}}
    close(router)


@pytest.mark.parametrize(("make", "kind"), [
    (lambda path: path.mkdir(), "a directory"),
    (lambda path: path.symlink_to("/dev/null"), "a character device"),
    (lambda path: os.mkfifo(path), "a FIFO"),
])
def test_what_is_not_a_regular_file_is_refused_at_start_in_one_line(tmp_path: Path, make, kind: str) -> None:
    path = tmp_path / "wakes.json"
    make(path)
    caught: list[SettingError] = []

    def check() -> None:
        with pytest.raises(SettingError) as error:
            check_table(table(path))
        caught.append(error.value)

    guarded(check, path if kind == "a FIFO" else None)
    [error] = caught
    assert error.setting == f"modelclaim.calibration_path {path}" and f"is {kind}, not a regular file" in str(error)
    assert "\n" not in str(error)


@pytest.mark.parametrize(("make", "kind"), [
    (lambda path: os.mkfifo(path), "a FIFO"),
    (lambda path: path.symlink_to("/dev/null"), "a character device"),
])
def test_a_write_over_what_is_not_a_regular_file_is_refused_and_logged(tmp_path: Path, caplog, make,
                                                                        kind: str) -> None:
    path = tmp_path / "wakes.json"
    router = build_router(table(path))
    make(path)  # put there while the gate runs
    with caplog.at_level(logging.WARNING):
        guarded(lambda: wake(router), path)
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"is {kind}, not a regular file" in warning
    assert path.is_symlink() or stat.S_ISFIFO(os.stat(path).st_mode)  # left as it was
    assert not Path("/dev/.null.lock").exists()  # no lock file made beside a device
    close(router)


def test_a_merge_keeps_other_models_and_refuses_to_overwrite_what_it_cannot_read() -> None:
    on_disk = json.dumps({"version": 1, "wakes": {"a": {"in-place": [1.0]}, "b": {"in-place": [2.0], "x": [3]}}})
    merged = json.loads(merged_json({"b": {"in-place": [5.0]}}, on_disk, "wakes.json"))
    assert merged["wakes"] == {"a": {"in-place": [1.0]}, "b": {"in-place": [5.0]}}  # by model: b is ours, whole
    blank = json.loads(merged_json({"b": {"in-place": [5.0]}}, " \n", "wakes.json"))
    assert blank["wakes"] == {"b": {"in-place": [5.0]}}
    with pytest.raises(SettingError, match=r"wakes\.json:1"):
        merged_json({"b": {"in-place": [5.0]}}, "{not json", "wakes.json")
