"""``restorelens demo``: every part on loopback, every scenario time-scaled, then the report.

A collector receiver (OTLP/HTTP into a DuckDB file) starts first. Each scenario then runs live
against its own servers on 127.0.0.1, all exporting to that one collector:

- Balanced and Long-context MoFlux protocols, each under the ``lend`` arm and its baseline
  ``static`` (same seed, so the policy summary pairs them): the simulated engine behind the gate,
  driven by the retrying client;
- the four ModelClaim wake paths (in place, make room, move, cold start): the gate with the
  lifecycle router and two simulated models' engines (started, slept and woken through their
  sleep API), driven by the same client.

Then every span is flushed, the collector stops (its writer commits), the analysis report is
printed and, unless told otherwise, the dashboard is served on the store until Ctrl-C. Every
server is stopped on the way out, whatever ends the run: SIGTERM is turned into the same interrupt
as Ctrl-C, because Python's default for it ends the process at once and the dashboard (a child
process) would keep running.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from restorelens.errors import RestorelensError, SettingError

__all__ = ["DemoResult", "play_scenarios", "prepare_db", "print_report", "run_demo", "serve_dashboard",
           "sigterm_interrupts", "signals_held"]

#: Protocol seconds of each scenario (any arm), for the progress bar (MoFlux: 105 s; wakes: setup + wake).
PROTOCOL_S = {
    "moflux-balanced": 105.0, "moflux-long-context": 105.0, "moflux-fixed-burst": 105.0, "modelclaim-in-place": 90.0,
    "modelclaim-make-room": 215.0, "modelclaim-move": 140.0, "modelclaim-cold-start": 55.0,
}


@dataclass
class DemoResult:
    db: Path
    summaries: list[dict[str, Any]] = field(default_factory=list)


def prepare_db(db: str | None) -> Path:
    """The store to write: ``db`` (must not exist yet) or a new file in a fresh temporary folder."""
    if db is None:
        return Path(tempfile.mkdtemp(prefix="restorelens-demo-")) / "spans.duckdb"
    path = Path(db).resolve()
    if path.exists():
        raise SettingError("--db", f"{path} exists already; the demo writes a new store")
    if not path.parent.is_dir():
        raise SettingError("--db", f"folder {path.parent} does not exist")
    return path


@contextlib.contextmanager
def collector(db: Path) -> Iterator[str]:
    """A collector receiver on a free loopback port; yields its OTLP/HTTP traces endpoint."""
    from restorelens.collector import create_receiver_app
    from restorelens.serving import ServerThread

    with ServerThread(create_receiver_app(str(db))) as server:
        yield f"{server.url}/v1/traces"


def play_scenarios(endpoint: str, *, time_scale: float, seed: int,
                   on_progress: Callable[[str, float], None] = lambda name, done_s: None) -> list[dict[str, Any]]:
    """Run every demo scenario live, spans to ``endpoint``; returns each run's summary."""
    from restorelens.experiments.record import SAMPLE_SCENARIOS, sample_run_name, sample_scenario
    from restorelens.experiments.run_telemetry import RunTelemetry
    from restorelens.experiments.runner import run_live

    summaries = []
    for name, arm in SAMPLE_SCENARIOS:
        run_name = sample_run_name(name, arm)
        scenario, run_id = sample_scenario(name, arm), f"demo-{run_name}"
        on_progress(run_name, 0.0)
        # one telemetry per run: its id and scenario are resource attributes of every span it sends
        with RunTelemetry("otlp", endpoint=endpoint, run_id=run_id, scenario=scenario.name) as telemetry:
            report = run_live(scenario, seed, telemetry.providers, run_id, time_scale=time_scale)
        summaries.append(report.summary())  # leaving RunTelemetry flushed every span into the collector
        on_progress(run_name, PROTOCOL_S.get(name, 0.0))
    return summaries


def total_protocol_s() -> float:
    """Protocol seconds of every scenario the demo plays."""
    from restorelens.experiments.record import SAMPLE_SCENARIOS

    return sum(PROTOCOL_S.get(name, 0.0) for name, _ in SAMPLE_SCENARIOS)


def print_report(db: Path, echo: Callable[[str], None]) -> dict[str, Any]:
    """Render the analysis report of ``db``; returns the sections (polars frames)."""
    from restorelens.analysis import Analysis
    from restorelens.analysis.report import build_report, render

    with Analysis.open(db, materialize=True) as analysis:
        sections = build_report(analysis)
    echo(render(sections, "table"))
    return sections


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_dashboard(db: Path, echo: Callable[[str], None], *, port: int | None = None) -> None:
    """Run ``restorelens dashboard --db DB`` until Ctrl-C or SIGTERM (or until it exits), then stop it."""
    port = port or free_port()
    command = [sys.executable, "-m", "restorelens", "dashboard", "--db", str(db), "--port", str(port)]
    process = None
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        echo(f"dashboard: http://127.0.0.1:{port}  (Ctrl-C stops it)")
        code = process.wait()
        if code != 0:
            raise RestorelensError(f"the dashboard exited with status {code}")
    except KeyboardInterrupt:
        echo("stopping the dashboard")
    finally:
        if process is not None:
            with signals_held():  # a second Ctrl-C or SIGTERM must not cut the stop short
                stop_process(process)


def stop_process(process: subprocess.Popen[Any], timeout_s: float = 10.0) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside, SIGTERM raises ``KeyboardInterrupt`` as Ctrl-C does, so every ``finally`` runs and
    stops its server or child; the previous handler comes back after. Python's default for SIGTERM
    ends the process at once. Off the main thread (no handler can be set there) it does nothing."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done, then act (an interrupt raised after it).

    Not around starting a child: a child inherits the blocked signals and could not be stopped.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def run_demo(db: str | None, *, time_scale: float, seed: int, dashboard: bool,
             echo: Callable[[str], None], progress: Any = None) -> DemoResult:
    """The whole demo; ``progress`` is a rich ``Progress`` (or None for plain lines). SIGTERM stops
    it as Ctrl-C does: every server and the dashboard's process are stopped."""
    with sigterm_interrupts():
        return _run_demo(db, time_scale=time_scale, seed=seed, dashboard=dashboard, echo=echo, progress=progress)


def _run_demo(db: str | None, *, time_scale: float, seed: int, dashboard: bool,
              echo: Callable[[str], None], progress: Any) -> DemoResult:
    path = prepare_db(db)
    echo(f"spans go to {path} (live servers on 127.0.0.1, time x{time_scale:g})")
    started = time.monotonic()
    with collector(path) as endpoint:
        if progress is None:
            summaries = play_scenarios(endpoint, time_scale=time_scale, seed=seed,
                                       on_progress=lambda name, done: echo(f"  {name}: {'done' if done else 'running'}"))
        else:
            total = total_protocol_s()
            task = progress.add_task("scenarios", total=total)
            with progress:
                def update(name: str, done_s: float) -> None:
                    progress.update(task, advance=done_s, description=f"{name} ({'done' if done_s else 'running'})")

                summaries = play_scenarios(endpoint, time_scale=time_scale, seed=seed, on_progress=update)
    echo(f"{len(summaries)} scenarios played in {time.monotonic() - started:.0f} s; report:")
    print_report(path, echo)
    if dashboard:
        serve_dashboard(path, echo)
    else:
        echo(f"store: {path}  (restorelens dashboard --db {path})")
    return DemoResult(path, summaries)

