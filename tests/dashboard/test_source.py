"""The process folder holding the sample and uploaded stores: made once per dashboard process,
removed when it exits, and the folders killed dashboards left removed at the next start."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from restorelens.dashboard import source



def _aged(path: Path, age_s: float) -> Path:
    path.mkdir()
    (path / "spans.duckdb").write_bytes(b"")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_stale_folders_go_and_live_or_recent_ones_stay(tmp_path: Path) -> None:
    day = source.STALE_AGE_S
    dead = _dead_pid()
    gone = [_aged(tmp_path / f"restorelens-dashboard-{dead}-old", 2 * day),
            _aged(tmp_path / "restorelens-upload-abc", 2 * day),  # left by earlier versions, per upload
            _aged(tmp_path / "restorelens-samples-abc", 2 * day)]
    kept = [_aged(tmp_path / f"restorelens-dashboard-{dead}-new", 60),
            _aged(tmp_path / f"restorelens-dashboard-{os.getpid()}-idle", 2 * day),  # a live, idle dashboard
            _aged(tmp_path / "restorelens-upload-new", 60),
            _aged(tmp_path / "other-old", 2 * day)]
    assert sorted(source.remove_stale_folders(tmp_path)) == sorted(gone)
    assert sorted(p for p in tmp_path.iterdir()) == sorted(kept)


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_process_folder_goes_when_the_process_exits_and_stale_ones_at_start(tmp_path: Path) -> None:
    stale = _aged(tmp_path / f"restorelens-dashboard-{_dead_pid()}-killed", 2 * source.STALE_AGE_S)
    script = ("from restorelens.dashboard import source; folder = source.work_folder(); "
              "(folder / 'spans.duckdb').write_bytes(b'x'); print(folder)")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "TMPDIR": str(tmp_path)},
                          capture_output=True, text=True, check=True, timeout=120)
    folder = Path(done.stdout.strip())
    assert folder.parent == tmp_path and folder.name.startswith("restorelens-dashboard-")
    assert not folder.exists() and not stale.exists()

