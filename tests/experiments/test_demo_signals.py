"""``restorelens demo`` stopped by a signal stops its dashboard: a real demo process, a real Streamlit child.

The scenarios and the report are replaced by no-ops in the demo's process (tests/experiments/test_demo.py
plays them): what is under test is the path from the signal to the dashboard's process.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

#: The real CLI, with the demo's scenarios and report as no-ops.
DEMO = """
import sys
from restorelens.experiments import demo
demo.play_scenarios = lambda endpoint, **options: []
demo.print_report = lambda db, echo: {}
from restorelens.cli import cli
cli(["demo", "--db", sys.argv[1]], prog_name="restorelens")
"""
STARTUP_S = 120.0  # bounds, not speed claims: a collector and Streamlit start on a busy 2-core machine
STOP_S = 60.0


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text() if entry.name.isdigit() else ""
        except OSError:  # ended meanwhile
            continue
        if stat and int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    """The process exists and is no zombie (an orphan's zombie may linger under a container's pid 1)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(condition, what: str, timeout_s: float, log: Path):
    deadline = time.monotonic() + timeout_s
    while not (found := condition()):
        assert time.monotonic() < deadline, f"{what} within {timeout_s:g} s; log:\n{log.read_text()}"
        time.sleep(0.25)
    return found


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
            return answer.read() == b"ok"
    except OSError:
        return False


def stop(pid: int) -> None:
    """End a process this test started (left running only when the test fails)."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        if not running(pid):
            return
        os.kill(pid, signum)
        deadline = time.monotonic() + 15
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_demo_stops_its_dashboard(tmp_path: Path, signum: signal.Signals) -> None:
    log = tmp_path / "demo.log"
    with log.open("wb") as out:
        # its own session, so that no signal meant for the test runner reaches it
        demo = subprocess.Popen([sys.executable, "-c", DEMO, str(tmp_path / "spans.duckdb")], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    streamlit: list[int] = []
    try:
        url = wait_for(lambda: re.search(r"dashboard: (http://127\.0\.0\.1:\d+)", log.read_text()), "no dashboard URL",
                       STARTUP_S, log).group(1)
        wait_for(lambda: healthy(url), "the dashboard was not healthy", STARTUP_S, log)
        streamlit = [pid for pid in children(demo.pid)
                     if b"streamlit" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(streamlit) == 1, children(demo.pid)

        demo.send_signal(signum)
        demo.wait(timeout=STOP_S)
        assert not running(streamlit[0]), "the demo ended, its Streamlit child still runs"
        text = log.read_text()
        assert "stopping the dashboard" in text and "Traceback" not in text
        assert demo.returncode == 0, text
    finally:
        for pid in (*streamlit, demo.pid):
            stop(pid)
        demo.wait(timeout=STOP_S)
