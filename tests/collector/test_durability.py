"""A 200 means committed: kill -9 the receiver process right after its answers and nothing is lost.

Also: a reader in another process gets in while a receiver runs, and while it holds the file the
receiver answers 503/429 with Retry-After instead of accepting what it cannot store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import httpx

from restorelens.collector.receiver import create_receiver_app
from restorelens.store import open_read_only
from restorelens.serving import ServerThread

_RECEIVER = textwrap.dedent(
    """
    import sys, threading
    from restorelens.collector.receiver import create_receiver_app
    from restorelens.serving import ServerThread
    server = ServerThread(create_receiver_app(sys.argv[1])).start()
    print(server.url, flush=True)
    threading.Event().wait()
    """
)

_READER = textwrap.dedent(
    """
    import sys
    from restorelens.store import open_read_only
    with open_read_only(sys.argv[1], timeout_s=30) as con:
        print(con.execute("select count(*) from otel_traces").fetchone()[0], flush=True)
        sys.stdin.readline()
    """
)


def _batch(batch: int, spans: int) -> bytes:
    items = [
        {
            "traceId": f"{batch:032x}",
            "spanId": f"{i + 1:016x}",
            "name": "s",
            "startTimeUnixNano": str(1_700_000_000_000_000_000 + i),
            "endTimeUnixNano": str(1_700_000_000_000_000_500 + i),
            "attributes": [{"key": "i", "value": {"intValue": str(i)}}],
            "status": {},
        }
        for i in range(spans)
    ]
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": items}]}]}).encode()


def _post(url: str, body: bytes) -> httpx.Response:
    return httpx.post(url + "/v1/traces", content=body, headers={"content-type": "application/json"}, timeout=30)


def _count(db: Path) -> int:
    with open_read_only(db) as con:
        row = con.execute("select count(*) from otel_traces").fetchone()
    return int(row[0]) if row else -1


def test_kill_9_after_the_answers_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    with subprocess.Popen([sys.executable, "-c", _RECEIVER, str(db)], stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            answers = [_post(url, _batch(b, 100)).status_code for b in range(1, 21)]
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    assert answers == [200] * 20
    assert proc.returncode == -signal.SIGKILL
    assert _count(db) == 2000


def test_a_reader_in_another_process_meets_a_running_receiver(
    tmp_path: Path, serve_asgi: Callable[..., ServerThread]
) -> None:
    db = tmp_path / "t.duckdb"
    app = create_receiver_app(db, lock_timeout_s=1.0, max_pending_spans=150)
    url = serve_asgi(app).url
    assert _post(url, _batch(1, 100)).status_code == 200
    with subprocess.Popen(
        [sys.executable, "-c", _READER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as reader:
        assert reader.stdin is not None and reader.stdout is not None
        try:
            assert reader.stdout.readline().strip() == "100"  # got in between the receiver's batches
            blocked: list[httpx.Response] = []
            waiting = threading.Thread(target=lambda: blocked.append(_post(url, _batch(2, 100))))
            waiting.start()
            while app.state.writer.pending_spans < 100:  # bounded: the thread has queued or failed soon
                if not waiting.is_alive():
                    break
                threading.Event().wait(0.01)
            overloaded = _post(url, _batch(3, 100))
            waiting.join(timeout=30)
        finally:
            reader.stdin.write("\n")
            reader.stdin.flush()
            reader.wait(timeout=30)
    assert overloaded.status_code == 429 and overloaded.headers["retry-after"] == "1"
    assert blocked[0].status_code == 503 and blocked[0].headers["retry-after"] == "1"
    assert "in use by another process" in blocked[0].json()["message"]
    assert _post(url, _batch(2, 100)).status_code == 200  # the client's retry succeeds
    assert _count(db) == 200
