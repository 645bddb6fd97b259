"""The DuckDB span store: idempotent inserts, SDK spans in, readers in another process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.rows import ARROW_SCHEMA, SpanRows
from restorelens.collector.store import INCOMING, SpanStore, store_spans
from restorelens.errors import InputError
from restorelens.store import COLUMNS, StoreBusy, open_read_only
from restorelens.spans import SPAN_GATE_REQUEST


def _make_spans(tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    tracer = tracer_provider.get_tracer("test.scope", "1.2.3")
    with tracer.start_as_current_span("root", kind=SpanKind.SERVER, attributes={"n": 3, "f": 0.5}) as root:
        root.add_event("hello", {"k": "v"})
        with tracer.start_as_current_span("child", links=[Link(root.get_span_context(), {"why": "x"})]) as child:
            child.set_status(Status(StatusCode.ERROR, "boom"))


def test_arrow_schema_matches_the_table_columns() -> None:
    assert tuple(ARROW_SCHEMA.names) == COLUMNS


def test_store_spans_is_idempotent_on_trace_and_span_id(
    tmp_path: Path, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    _make_spans(tracer_provider, span_exporter)
    spans = span_exporter.get_finished_spans()
    with SpanStore(tmp_path / "t.duckdb") as store:
        first = store_spans(store, spans)
        again = store_spans(store, spans)
        assert (first.loaded, first.duplicate) == (2, 0)
        assert (again.loaded, again.duplicate) == (0, 2)
        rows = store.connection().execute(
            'select "SpanName", "SpanKind", "StatusCode", "StatusMessage", "ScopeVersion", "SpanAttributes",'
            ' "Events.Name", "Links.SpanId" from otel_traces order by "Timestamp"'
        ).fetchall()
    root, child = rows
    assert root[:5] == ("root", "Server", "Unset", "", "1.2.3")
    assert root[5] == {"n": "3", "f": "0.5"} and root[6] == ["hello"]
    assert child[:4] == ("child", "Internal", "Error", "boom")
    assert child[7] == [format(spans[1].context.span_id, "016x")]


def test_duplicates_inside_one_batch_are_counted_once(tmp_path: Path) -> None:
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "s", "startTimeUnixNano": "1", "status": {}}
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span, dict(span, name="again")]}]}]}
    with SpanStore(tmp_path / "t.duckdb") as store:
        result = store.insert_traces_data(doc)
        assert (result.loaded, result.duplicate, store.count()) == (1, 1, 1)


def test_the_store_survives_reopening(tmp_path: Path) -> None:
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "s", "startTimeUnixNano": "1", "status": {}}
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    with SpanStore(tmp_path / "t.duckdb") as store:
        store.insert_traces_data(doc)
    with open_read_only(tmp_path / "t.duckdb") as con:
        assert con.execute("select count(*) from otel_traces").fetchone() == (1,)


def test_a_store_whose_folder_cannot_be_created_is_an_input_error_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    db = blocker / "sub" / "t.duckdb"  # its folder would have to be made inside a regular file
    with pytest.raises(InputError) as caught:
        SpanStore(db)
    assert caught.value.where == str(db) and "cannot create folder" in caught.value.problem


_READER = textwrap.dedent(
    """
    import sys, time
    from restorelens.store import open_read_only
    with open_read_only(sys.argv[1], timeout_s=30) as con:
        print(con.execute("select count(*) from otel_traces").fetchone()[0], flush=True)
        sys.stdin.readline()  # hold the file until told to go
    """
)


def test_a_reader_in_another_process_waits_for_release_and_blocks_the_writer_meanwhile(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "s", "startTimeUnixNano": "1", "status": {}}
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    store = SpanStore(db, lock_timeout_s=0.2)
    try:
        store.insert_traces_data(doc)
        with subprocess.Popen(
            [sys.executable, "-c", _READER, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        ) as reader:
            assert reader.stdin is not None and reader.stdout is not None
            try:
                store.release()  # the reader, retrying meanwhile, gets in now
                assert reader.stdout.readline().strip() == "1"
                with pytest.raises(StoreBusy, match="in use by another process"):
                    store.insert_traces_data(doc)
            finally:
                reader.stdin.write("\n")
                reader.stdin.flush()
                reader.wait(timeout=30)
        assert reader.returncode == 0
        store.lock_timeout_s = 30
        assert store.insert_traces_data(doc).duplicate == 1
    finally:
        store.close()


def _doc(names_by_span_id: dict[int, str]) -> dict[str, object]:
    spans = [
        {"traceId": "ab" * 16, "spanId": f"{i:016x}", "name": name, "startTimeUnixNano": str(i), "status": {}}
        for i, name in names_by_span_id.items()
    ]
    return {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}


def _rows_of(doc: dict[str, object]) -> SpanRows:
    rows = SpanRows()
    decode_traces_json(doc, rows)
    return rows


def test_a_group_meeting_stored_spans_is_redone_with_exact_counts_per_batch(tmp_path: Path) -> None:
    with SpanStore(tmp_path / "t.duckdb") as store:
        assert store.insert_batches([_rows_of(_doc({1: "a", 2: "a"}))]) == [(2, 0)]
        # One plain insert for the group fails on span 2; the redo goes batch by batch, first copy wins.
        group = [_doc({3: "b"}), _doc({2: "c", 4: "c"}), _doc({4: "d", 5: "d"}), _doc({})]
        assert store.insert_batches([_rows_of(d) for d in group]) == [(1, 0), (1, 1), (1, 1), (0, 0)]
        names = store.connection().execute('select "SpanName" from otel_traces order by "Timestamp"').fetchall()
        assert [n for (n,) in names] == ["a", "a", "b", "c", "d"]
        # A group of new spans goes in whole.
        assert store.insert_batches([_rows_of(_doc({6: "e"})), _rows_of(_doc({7: "e"}))]) == [(1, 0), (1, 0)]
        assert store.count() == 7


@pytest.mark.parametrize("configured", [None, 3])
def test_a_transactions_thread_cap_ends_with_it_committed_or_not(tmp_path: Path, configured: int | None) -> None:
    def threads(store: SpanStore) -> int:
        return int(store.connection().execute("select current_setting('threads')").fetchall()[0][0])

    with SpanStore(tmp_path / "t.duckdb", threads=configured) as store:
        before = threads(store)
        with store.transaction(threads=1) as con:
            assert threads(store) == 1
            store.insert_table(con, _rows_of(_doc({1: "a"})).to_arrow(), skip_existing=False)
        assert threads(store) == before
        with pytest.raises(duckdb.ConstraintException), store.transaction(threads=1) as con:
            store.insert_table(con, _rows_of(_doc({1: "a"})).to_arrow(), skip_existing=False)
        assert threads(store) == before
        assert store.count() == 1
    assert configured is None or before == configured


def _threshold_shown(con: duckdb.DuckDBPyConnection) -> str:
    return str(con.execute("select current_setting('checkpoint_threshold')").fetchall()[0][0])


def _threshold_shown_for(threshold_bytes: int) -> str:
    """How this DuckDB shows the setting (its format is DuckDB's, not ours)."""
    con = duckdb.connect()
    con.execute(f"set checkpoint_threshold = '{threshold_bytes}B'")
    shown = _threshold_shown(con)
    con.close()
    return shown


def test_a_negative_checkpoint_threshold_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="checkpoint_threshold_bytes must be at least 0, not -1"):
        SpanStore(tmp_path / "t.duckdb", checkpoint_threshold_bytes=-1)


@pytest.mark.parametrize("threshold_bytes", [256 * 1024, 64 * 1024 * 1024])
def test_commits_checkpoint_only_past_the_stores_threshold_and_it_holds_after_a_release(
    tmp_path: Path, threshold_bytes: int
) -> None:
    db = tmp_path / "t.duckdb"
    wal = tmp_path / "t.duckdb.wal"
    with SpanStore(db, checkpoint_threshold_bytes=threshold_bytes) as store:
        store.release()  # the setting is the store's, made again on every connection
        largest_wal = 0
        for first in range(0, 2000, 100):
            store.insert_batches([_rows_of(_doc({i: "s" * 200 for i in range(first + 1, first + 101)}))])
            largest_wal = max(largest_wal, wal.stat().st_size if wal.exists() else 0)
        assert store.count() == 2000
        log_now = wal.stat().st_size if wal.exists() else 0
        assert _threshold_shown(store.connection()) == _threshold_shown_for(threshold_bytes)
    if threshold_bytes < 1024 * 1024:
        # checkpointed along the way: the log never reached the threshold (the 20 commits write twice it)
        assert largest_wal < threshold_bytes
    else:
        assert log_now == largest_wal > 2 * 256 * 1024  # nothing checkpointed before the close
    assert not wal.exists()  # closing checkpoints the rest
    with open_read_only(db) as con:
        assert con.execute("select count(*) from otel_traces").fetchall()[0][0] == 2000


@pytest.mark.parametrize("release", [True, False])
def test_the_derivation_before_letting_go_checkpoints_with_its_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, release: bool
) -> None:
    from restorelens.analysis import derived

    db = tmp_path / "t.duckdb"
    wal = tmp_path / "t.duckdb.wal"
    log_after_derivation: list[int] = []
    snapshot = derived.snapshot

    def spy(con: duckdb.DuckDBPyConnection) -> object:  # runs after the derivation commits, before the close
        log_after_derivation.append(wal.stat().st_size if wal.exists() else 0)
        return snapshot(con)

    monkeypatch.setattr(derived, "snapshot", spy)
    store = SpanStore(db, max_underived_spans=10_000, checkpoint_threshold_bytes=64 * 1024 * 1024)
    store.insert_batches([_rows_of(_doc({i: SPAN_GATE_REQUEST for i in range(1, 301)}))])
    assert wal.stat().st_size > 0  # the spans' commit went to the log, derivation still pending
    store.release() if release else store.close()
    assert log_after_derivation == [0]  # spans and derived rows are in the file before it is let go
    assert not wal.exists()
    with open_read_only(db) as con:
        assert con.execute("select count(*) from typed_gate_requests").fetchall()[0][0] == 300
        assert "typed_gate_requests" in derived.fresh_layers(con)


@pytest.mark.parametrize("kind", ["table", "view"])
def test_a_store_holding_the_name_its_inserts_read_the_batch_by_is_refused_not_written_wrong(
    tmp_path: Path, kind: str
) -> None:
    db = tmp_path / "t.duckdb"
    with SpanStore(db):
        pass
    con = duckdb.connect(str(db))
    con.execute(f"create {kind} {INCOMING} as select * from otel_traces")
    con.close()
    # DuckDB would read that table or view instead of the incoming batch: answered 200, stored nothing
    with pytest.raises(InputError, match=f"{db}: holds a table or view named {INCOMING}"):
        SpanStore(db)
    con = duckdb.connect(str(db))
    con.execute(f"drop {kind} {INCOMING}")
    con.close()
    with SpanStore(db) as store:
        assert store.insert_batches([_rows_of(_doc({1: "a"}))]) == [(1, 0)]
        with store.transaction() as c:  # the insert-or-ignore path reads it by the same name
            assert store.insert_table(c, _rows_of(_doc({1: "a", 2: "b"})).to_arrow()) == 1
        assert store.count() == 2
