"""``[modelclaim]`` retry_after_mode, hold_s and calibration_path: parsed, checked, and the
calibration carried across a restart through its file."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.actions import WakeRecord
from restorelens.gate.modelclaim.config import build_core, build_router, check_table

TABLE = {
    "pods": [{"name": "pod-1", "gpus": ["24Gi"]}],
    "claims": [{"model": "m", "perGPU": {"maximumFootprint": "10Gi", "kvFloor": "4Gi"},
                "engine_url": "http://127.0.0.1:9"}],
    "policy": {"sleepAfterSeconds": 60},
}


def test_defaults_are_aibrix_s_fixed_table_without_hold() -> None:
    core, _ = build_core(TABLE)
    assert (core.hints.mode, core.hints.hold_s, core.hints.hint_mode) == ("fixed", None, "fixed")


def test_calibrated_mode_and_hold_are_taken() -> None:
    core, _ = build_core({**TABLE, "retry_after_mode": "calibrated", "hold_s": 30})
    assert (core.hints.mode, core.hints.hold_s, core.hints.hint_mode) == ("calibrated", 30.0, "hold")


def test_max_hint_s_defaults_to_what_the_openai_sdk_follows() -> None:
    assert build_core(TABLE)[0].hints.max_hint_s == 120
    assert build_core({**TABLE, "max_hint_s": 60})[0].hints.max_hint_s == 60


@pytest.mark.parametrize(("key", "value", "message"), [
    ("retry_after_mode", "smart", "modelclaim.retry_after_mode"),
    ("hold_s", 0, "modelclaim.hold_s"),
    ("hold_s", "30", "modelclaim.hold_s"),
    ("calibration_path", "", "modelclaim.calibration_path"),
    ("max_hint_s", 0, "modelclaim.max_hint_s"),
    ("max_hint_s", 90.5, "modelclaim.max_hint_s"),
    ("max_hint_s", "120", "modelclaim.max_hint_s"),
    ("calibration_path", "/no/such/dir/wakes.json", "does not exist"),
])
def test_bad_values_name_the_setting(key: str, value: object, message: str) -> None:
    with pytest.raises(SettingError, match=message):
        check_table({**TABLE, key: value})


def test_a_corrupt_calibration_file_is_refused_with_its_name_and_line(tmp_path: Path) -> None:
    path = tmp_path / "wakes.json"
    path.write_text('{"version": 1,\n "wakes": oops}\n')
    with pytest.raises(SettingError, match=r"wakes\.json:2"):
        check_table({**TABLE, "calibration_path": str(path)})


def test_what_was_learnt_survives_a_restart_through_the_file(tmp_path: Path) -> None:
    path = tmp_path / "wakes.json"
    table = {**TABLE, "retry_after_mode": "calibrated", "calibration_path": str(path)}
    first = build_router(table)
    assert first.core.calibration.predict_s("m", "in-place") is None and not path.exists()  # a first run
    for listener in first.core.listeners:  # as the core reports a wake that ended ready
        listener.on_wake_finished(WakeRecord("m", "in-place", "pod-1", 10.0, 14.5, "ready", path_started_s=10.0,
                                             ready_s=14.2, observed_s=14.5))
    assert path.exists()
    asyncio.run(first.backend.close())

    again = build_router(table)
    assert again.core.calibration.predict_s("m", "in-place") == pytest.approx(4.5)
    asyncio.run(again.backend.close())


def test_a_failed_write_is_retried_at_the_next_wake(tmp_path: Path) -> None:
    path = tmp_path / "wakes.json"
    router = build_router({**TABLE, "retry_after_mode": "calibrated", "calibration_path": str(path)})
    path.mkdir()  # in the way: replacing a directory by the file fails, whoever runs this
    record = WakeRecord("m", "in-place", "pod-1", 10.0, 14.5, "ready", path_started_s=10.0, ready_s=14.2,
                        observed_s=14.5)
    for listener in router.core.listeners:
        listener.on_wake_finished(record)
    assert path.is_dir()
    path.rmdir()
    later = WakeRecord("m", "in-place", "pod-1", 20.0, 24.0, "ready", path_started_s=20.0, ready_s=23.9,
                       observed_s=24.0)
    for listener in router.core.listeners:
        listener.on_wake_finished(later)
    assert path.is_file() and '"in-place": [\n    4.5,\n    4.0\n   ]' in path.read_text()  # both wakes written
    # No temporary file left behind; the lock file beside it stays (calibration_file.py says why).
    assert sorted(p.name for p in tmp_path.iterdir()) == [".wakes.json.lock", "wakes.json"]
    asyncio.run(router.backend.close())
