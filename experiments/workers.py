"""Worker interpreters for ``restorelens experiment``: start them, follow what they print, stop them.

Fresh ``python`` processes rather than multiprocessing: a spawned child re-runs the parent's main
script, which inside a host program (a notebook, a test runner, Streamlit) is not ours.

The parent alone decides when the workers stop. A worker ignores SIGINT (a terminal's Ctrl-C
reaches the whole process group); when anything interrupts the parent (Ctrl-C, an error, a
failed worker) every worker still running is sent SIGTERM, and SIGKILL after ``STOP_GRACE_S``,
and reaped before the interruption propagates, so none outlives the command and none keeps writing
into the output folder. The parent waits on the workers' pipes with ``selectors`` in its own
thread: a signal interrupts that wait at once (a ``Thread.join`` would let it wait for the workers).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from restorelens.errors import RestorelensError

__all__ = ["STOP_GRACE_S", "run_workers", "worker_script"]

#: How long a worker sent SIGTERM has to exit before it is killed.
STOP_GRACE_S = 1.0


def worker_script(body: str) -> str:
    """A worker's ``python -c`` program: ``body`` with SIGINT ignored (the parent stops the worker)."""
    return "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" + body


def run_workers(script: str, jobs: Sequence[str], on_line: Callable[[int, str], None]) -> None:
    """Run ``script`` once per job, the job on its stdin; ``on_line(job index, line)`` for every line
    a worker prints, as it prints it. A ``RestorelensError`` with a failed worker's last line of
    stderr once every worker has ended; on any interruption every worker is stopped first."""
    workers: list[_Worker] = []
    try:
        for job in jobs:
            workers.append(_Worker(script))
        for worker, job in zip(workers, jobs, strict=True):
            worker.send(job)
        _follow(workers, on_line)
        errors = [worker.error() for worker in workers]
    except BaseException:
        _stop(workers)
        raise
    finally:
        for worker in workers:
            worker.close()
    failed = [error for error in errors if error]
    if failed:
        raise RestorelensError(f"a run failed: {failed[0]}")


class _Worker:
    def __init__(self, script: str) -> None:
        # stderr to a file: a chatty worker must not fill a pipe nobody reads until it ends
        self.stderr: IO[bytes] = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr)
        self.pending = b""

    def send(self, job: str) -> None:
        assert self.proc.stdin is not None
        # a worker that died at once has closed its stdin: ``error`` says why
        with contextlib.suppress(BrokenPipeError), self.proc.stdin:
            self.proc.stdin.write(job.encode())

    def error(self) -> str | None:
        """After the worker ended: None when it succeeded, else its last line of stderr."""
        code = self.proc.wait()
        if code == 0:
            return None
        self.stderr.seek(0)
        tail = self.stderr.read().decode("utf-8", "replace").strip().splitlines()
        return tail[-1] if tail else f"a worker exited with {code}"

    def close(self) -> None:
        for stream in (self.proc.stdin, self.proc.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _follow(workers: list[_Worker], on_line: Callable[[int, str], None]) -> None:
    """Read every worker's stdout until each has closed it, handing on each whole line."""
    with selectors.DefaultSelector() as selector:
        for index, worker in enumerate(workers):
            assert worker.proc.stdout is not None
            selector.register(worker.proc.stdout, selectors.EVENT_READ, index)
        while selector.get_map():
            for key, _ in selector.select():
                worker = workers[key.data]
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                *lines, worker.pending = (worker.pending + chunk).split(b"\n")
                for line in lines:
                    on_line(key.data, line.decode("utf-8", "replace").strip())


def _stop(workers: list[_Worker]) -> None:
    """SIGTERM every worker still running, SIGKILL what remains after ``STOP_GRACE_S``; reap them all."""
    with _sigint_ignored():  # a second Ctrl-C must not leave workers running
        alive = [worker.proc for worker in workers if worker.proc.poll() is None]
        for proc in alive:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        deadline_s = time.monotonic() + STOP_GRACE_S
        for proc in alive:
            try:
                proc.wait(max(0.0, deadline_s - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: Any = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
