"""The store writer thread: group commits, and letting a reader in when asked rather than by timers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb

from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.rows import SpanRows
from restorelens.store import read_request_path, read_requested
from restorelens.collector.writer import CHECKPOINT_THRESHOLD_BYTES, StoreWriter


def _rows(span_id: int) -> SpanRows:
    span = {"traceId": "ab" * 16, "spanId": f"{span_id:016x}", "name": "s", "startTimeUnixNano": "1", "status": {}}
    rows = SpanRows()
    decode_traces_json({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, rows)
    return rows


_READER = textwrap.dedent(
    """
    import sys
    from restorelens.store import open_read_only
    with open_read_only(sys.argv[1], timeout_s=30) as con:
        print(con.execute("select count(*) from otel_traces").fetchone()[0], flush=True)
    """
)


def test_a_reader_in_another_process_asks_and_the_writer_lets_go_long_before_its_timers(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    # Timers far beyond the reader's 30 s timeout: only the read request can let it in.
    writer = StoreWriter(db, idle_release_s=600, max_hold_s=600, reader_window_s=0.05).start()
    try:
        assert writer.submit(_rows(1)).result(timeout=30) == (1, 0)
        assert writer._store.is_open  # held, not released after the commit
        reader = subprocess.run([sys.executable, "-c", _READER, str(db)], capture_output=True, text=True, timeout=60)
        assert (reader.returncode, reader.stdout.strip()) == (0, "1"), reader.stderr
        assert not read_request_path(db).exists()  # the reader withdrew its request once in
        assert writer.submit(_rows(2)).result(timeout=30) == (1, 0)
        assert writer.submit(_rows(2)).result(timeout=30) == (0, 1)
    finally:
        writer.stop()
    assert not read_requested(db)


def test_a_stale_read_request_is_ignored(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    read_request_path(db).touch()
    assert read_requested(db)
    assert not read_requested(db, within_s=0.0)
    assert not read_requested(tmp_path / "other.duckdb")


def test_the_writers_store_checkpoints_at_its_own_threshold_not_duckdbs_default(tmp_path: Path) -> None:
    writer = StoreWriter(tmp_path / "t.duckdb", checkpoint_threshold_bytes=48 * 1024 * 1024).start()
    try:
        assert writer.submit(_rows(1)).result(timeout=30) == (1, 0)
    finally:
        writer.stop()
    store = writer._store  # its thread has stopped: reopened here as the thread would reopen it
    setting = store.connection().execute("select current_setting('checkpoint_threshold')").fetchall()
    store.close()
    fresh = duckdb.connect()  # DuckDB's own way of showing 48 MiB
    fresh.execute("set checkpoint_threshold = '48MiB'")
    assert setting == fresh.execute("select current_setting('checkpoint_threshold')").fetchall()
    assert setting != duckdb.connect().execute("select current_setting('checkpoint_threshold')").fetchall()
    assert StoreWriter(tmp_path / "u.duckdb")._store.checkpoint_threshold_bytes == CHECKPOINT_THRESHOLD_BYTES
