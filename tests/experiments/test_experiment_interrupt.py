"""Ctrl-C in ``restorelens experiment``: a real command, interrupted mid-run by SIGINT, stops its
workers, exits 130 with one line and leaves only whole runs, which ``--resume`` finishes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from restorelens.cli import cli
from restorelens.experiments.matrix import Matrix, play

#: Far more runs than play before the first file shows: the command is mid-matrix when signalled.
MATRIX = ("moflux-balanced", "--arms", "static,lend", "--seeds", "1-200")
CELLS = 2 * 200
#: A hang guard, not a performance figure: how long the test waits for anything at all.
HANG_GUARD_S = 120.0


def _default_sigint() -> None:
    # a test runner started in the background ignores SIGINT, and its children would inherit that
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue  # ended meanwhile
    return found


def _running(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _span_count(path: Path) -> int:
    return sum(len(scope["spans"]) for line in path.read_text().splitlines()
               for resource in json.loads(line)["resourceSpans"] for scope in resource["scopeSpans"])


def _played_again(runs: list[Path], folder: Path) -> dict[str, int]:
    """Each run's span count, the run played again to its end in this process."""
    counts = {}
    for path in runs:
        scenario, arm, seed = re.fullmatch(r"(moflux-balanced)-(\w+)-s(\d+)\.jsonl", path.name).groups()  # type: ignore[union-attr]
        [again] = play(Matrix((scenario,), (arm,), (int(seed),)), folder, workers=1)
        counts[path.name] = _span_count(again)
    return counts


def _whole_runs(out: Path) -> list[Path]:
    runs = out / "runs"
    return sorted(runs.glob("*.jsonl")) if runs.is_dir() else []


@pytest.mark.parametrize(("to", "workers"), [("pid", "2"), ("group", "2"), ("group", "1")],
                         ids=["sigint-to-pid", "ctrl-c-to-group", "ctrl-c-in-process"])
def test_sigint_stops_the_runs_exits_130_and_leaves_only_whole_runs(tmp_path: Path, to: str, workers: str) -> None:
    out = tmp_path / "study"
    proc = subprocess.Popen([sys.executable, "-m", "restorelens", "experiment", *MATRIX, "--workers", workers,
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)
    try:
        deadline_s = time.monotonic() + HANG_GUARD_S
        while not _whole_runs(out) and proc.poll() is None and time.monotonic() < deadline_s:
            time.sleep(0.02)
        assert proc.poll() is None, proc.communicate()
        workers_seen = _children(proc.pid)
        if to == "pid":
            proc.send_signal(signal.SIGINT)
        else:  # as a terminal's Ctrl-C: the whole foreground process group
            os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, stderr
    assert not [pid for pid in workers_seen if _running(pid)], "a worker outlived the command"
    # the runs stopped where they were: not played to the end of the matrix, no store, no summary
    runs = _whole_runs(out)
    assert 0 < len(runs) < CELLS
    assert not list(out.rglob("*.partial"))
    assert sorted(p.name for p in (out / "runs").iterdir()) == [p.name for p in runs]
    # every run file there is the whole run: as many spans as the same run played to its end
    assert {path.name: _span_count(path) for path in runs} == _played_again(runs, tmp_path / "again")
    assert {p.name for p in out.iterdir()} <= {"experiment.json", ".experiment.lock", "runs"}  # no store, no summary

    again = CliRunner().invoke(cli, ["experiment", *MATRIX, "--out", str(out)])
    assert again.exit_code == 1 and "earlier experiment's files" in again.output
    assert _whole_runs(out) == runs
    [line] = stderr.strip().splitlines()
    assert line == f"interrupted: {out} holds {len(runs)} of {CELLS} runs, each whole; --resume finishes them"

    # resumed with fewer seeds (the same settings): the runs there are kept, the rest played, none doubled
    resumed = CliRunner().invoke(cli, ["experiment", *MATRIX[:-1], "1-2", "--out", str(out), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    fresh = CliRunner().invoke(cli, ["experiment", *MATRIX[:-1], "1-2", "--out", str(tmp_path / "fresh")])
    assert fresh.exit_code == 0, fresh.output
    assert (json.loads((out / "summary.json").read_text())["runs"]
            == json.loads((tmp_path / "fresh" / "summary.json").read_text())["runs"])
