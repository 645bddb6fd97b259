"""The derived tables (typed spans, trace layers): written with every batch, equal to the layers they stand for."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from restorelens.analysis import Analysis
from restorelens.analysis.layers import DERIVED_LAYERS, SPAN_LAYERS, TRACE_LAYERS, macros_of, register_macros, sql_text
from restorelens.collector import SpanStore, load_paths
from restorelens.analysis import derived
from restorelens.analysis.derived import META_TABLE, fingerprint, fresh_layers
from restorelens.store import TABLE

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _differences(con: duckdb.DuckDBPyConnection, name: str) -> int:
    """Rows in the stored table and not in the layer computed from otel_traces, or the reverse."""
    Analysis(con, use_derived=False)  # every layer as a temporary view over otel_traces
    stored = derived._qualified(con, name)
    row = con.execute(
        f"select count(*) from ((select * from {stored} except all select * from temp.{name}) "
        f"union all (select * from temp.{name} except all select * from {stored}))"
    ).fetchone()
    assert row is not None
    return int(row[0])


def _all_equal(con: duckdb.DuckDBPyConnection) -> None:
    assert fresh_layers(con) == frozenset(DERIVED_LAYERS)
    for name in DERIVED_LAYERS:
        assert _differences(con, name) == 0, name


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("derived") / "samples.duckdb"
    load_paths(sorted(SAMPLES.glob("*.jsonl")), db)
    return db


def test_loading_fills_every_table_with_exactly_its_layer(sample_store: Path) -> None:
    with duckdb.connect(str(sample_store), read_only=True) as con:
        for name, span_name in SPAN_LAYERS.items():
            stored = con.execute(f"select count(*) from {name}").fetchone()
            spans = con.execute(f'select count(*) from {TABLE} where "SpanName" = $n', {"n": span_name}).fetchone()
            assert stored == spans
        for name in TRACE_LAYERS:
            assert con.execute(f"select count(*) from {name}").fetchone() > (0,), name
        rows = dict(con.execute(f"select name, fingerprint from {META_TABLE}").fetchall())
        assert rows == {name: fingerprint(name) for name in DERIVED_LAYERS}
        _all_equal(con)


def _all_spans(db: Path) -> pa.Table:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.sql(f"select * from {TABLE} order by \"TraceId\", \"SpanId\"").to_arrow_table()


def test_spans_already_stored_add_no_derived_rows(sample_store: Path, tmp_path: Path) -> None:
    spans = _all_spans(sample_store)
    half = spans.slice(0, spans.num_rows // 2)
    with SpanStore(tmp_path / "s.duckdb") as store:
        assert store.insert_tables([half]) == [half.num_rows]
        # the whole set again, one span twice: only the other half is new, each span once
        again = pa.concat_tables([spans, spans.slice(spans.num_rows - 1, 1)])
        assert store.insert_tables([again]) == [spans.num_rows - half.num_rows]
        _all_equal(store.connection())


def test_a_store_changed_behind_the_collector_is_not_trusted_until_reopened(sample_store: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    spans = _all_spans(sample_store)
    SpanStore(db).insert_tables([spans.slice(0, 100)])
    with duckdb.connect(str(db)) as con:
        con.from_arrow(spans.slice(100)).insert_into(TABLE)  # bypasses the collector
        assert fresh_layers(con) < frozenset(SPAN_LAYERS)  # and no trace layer: their inputs are stale
        con.execute(f"update {META_TABLE} set fingerprint = 'older-sql' where name = 'typed_model_wakes'")
        assert "typed_model_wakes" not in fresh_layers(con)
    with SpanStore(db) as store:  # a writer brings every table up to date when it opens the store
        _all_equal(store.connection())


def test_the_collector_imports_no_polars() -> None:
    # the receiver and the loader run the layers' SQL through the catalog on every write; polars
    # would cost each of them its import time and memory for nothing
    code = (
        "import sys\n"
        "import restorelens.analysis.derived, restorelens.collector.store\n"
        "import restorelens.collector.loader, restorelens.collector.receiver, restorelens.collector.writer\n"
        "assert 'restorelens.analysis.layers' in sys.modules\n"
        "assert 'polars' not in sys.modules, sorted(m for m in sys.modules if m.startswith('restorelens'))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_macro_is_part_of_the_fingerprint_of_every_layer_that_calls_it(monkeypatch: pytest.MonkeyPatch) -> None:
    before = {name: fingerprint(name) for name in DERIVED_LAYERS}
    calls = {name for name in DERIVED_LAYERS if "rl_span_key" in macros_of(name)}
    reads = {name for name, inputs in TRACE_LAYERS.items() if calls & set(inputs)}
    fingerprint.cache_clear()
    try:
        monkeypatch.setattr(derived, "sql_text", lambda name: sql_text(name) + ("\n" if name == "rl_span_key" else ""))
        after = {name: fingerprint(name) for name in DERIVED_LAYERS}
    finally:
        fingerprint.cache_clear()  # nothing else may see the edited macro's fingerprints
    assert calls and reads
    assert {name for name in DERIVED_LAYERS if after[name] != before[name]} == calls | reads


def test_traces_whose_spans_arrive_in_many_commits_are_derived_as_if_loaded_at_once(
    sample_store: Path, tmp_path: Path
) -> None:
    spans = _all_spans(sample_store)
    # shuffled: most traces are spread over several commits, children often before their parents
    order = random.Random(7).sample(range(spans.num_rows), spans.num_rows)
    shuffled = spans.take(pa.array(order))
    with SpanStore(tmp_path / "s.duckdb") as store:
        for start in range(0, shuffled.num_rows, 400):
            store.insert_tables([shuffled.slice(start, 400)])
        _all_equal(store.connection())


def test_a_trace_layer_is_stale_once_spans_of_any_kind_are_added_behind_the_collector(
    sample_store: Path, tmp_path: Path
) -> None:
    db = tmp_path / "s.duckdb"
    spans = _all_spans(sample_store)
    SpanStore(db).insert_tables([spans])
    unrelated = spans.slice(0, 1).set_column(
        spans.schema.get_field_index("SpanId"), "SpanId", pa.array(["00000000000000aa"])
    ).set_column(spans.schema.get_field_index("SpanName"), "SpanName", pa.array(["not.a.layer"]))
    with duckdb.connect(str(db)) as con:
        assert fresh_layers(con) == frozenset(DERIVED_LAYERS)
        con.from_arrow(unrelated).insert_into(TABLE)  # no typed table counts it; the total changes
        assert fresh_layers(con) == frozenset(SPAN_LAYERS)


def test_incremental_writes_never_refresh_a_trace_layer_left_by_other_sql(sample_store: Path, tmp_path: Path) -> None:
    spans = _all_spans(sample_store)
    db = tmp_path / "s.duckdb"
    SpanStore(db).insert_tables([spans.slice(0, 100)])
    with duckdb.connect(str(db)) as con:
        con.execute(f"update {META_TABLE} set fingerprint = 'older-sql' where name = 'gate_requests'")
        rest = spans.slice(100)
        first = derived.next_rowid(con)
        con.from_arrow(rest).insert_into(TABLE)
        derived.insert_stored(con, first, rest.num_rows)
        # request_attempts reads gate_requests: stale with it
        assert fresh_layers(con) == frozenset(SPAN_LAYERS)


def test_a_store_from_before_the_trace_layers_is_read_and_then_upgraded(sample_store: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    SpanStore(db).insert_tables([_all_spans(sample_store)])
    with duckdb.connect(str(db)) as con:  # as the previous version left it
        for name in TRACE_LAYERS:
            con.execute(f"drop table {name}")
        con.execute(f"delete from {META_TABLE} where name in $names", {"names": list(TRACE_LAYERS)})
        con.execute(f"alter table {META_TABLE} drop column spans")
        assert fresh_layers(con) == frozenset(SPAN_LAYERS)
    with SpanStore(db) as store:
        _all_equal(store.connection())


def test_deferred_derivation_catches_up_when_the_store_is_let_go(sample_store: Path, tmp_path: Path) -> None:
    spans = _all_spans(sample_store)
    db = tmp_path / "s.duckdb"
    store = SpanStore(db, max_underived_spans=10_000)
    for start in range(0, spans.num_rows, 100):  # many small commits, as the receiver makes them
        store.insert_tables([spans.slice(start, 100)])
    assert fresh_layers(store.connection()) < frozenset(SPAN_LAYERS)  # not yet written
    store.release()  # as the writer does when a reader asks, when idle, or at stop
    with duckdb.connect(str(db), read_only=True) as con:
        _all_equal(con)


def test_deferred_rows_of_a_rolled_back_transaction_are_forgotten(sample_store: Path, tmp_path: Path) -> None:
    spans = _all_spans(sample_store)
    with SpanStore(tmp_path / "s.duckdb", max_underived_spans=10_000) as store:
        store.insert_tables([spans.slice(0, 50)])
        with pytest.raises(duckdb.ConstraintException), store.transaction() as con:
            store.insert_table(con, spans.slice(50, 50), skip_existing=False)
            store.insert_table(con, spans.slice(0, 10), skip_existing=False)  # already stored
        store.derive_pending()
        con = store.connection()
        assert fresh_layers(con) == frozenset(DERIVED_LAYERS)  # counts match: 50 spans, not 100
        assert store.count() == 50


def test_a_failed_derivation_never_reads_as_spans_not_stored(
    sample_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from restorelens.analysis import derived

    spans = _all_spans(sample_store)
    db = tmp_path / "s.duckdb"

    def broken(con: object, first_rowid: int, spans: int) -> None:
        raise RuntimeError("derivation broke")

    with monkeypatch.context() as patch:
        patch.setattr(derived, "insert_stored", broken)
        with SpanStore(db) as store:
            assert store.insert_tables([spans]) == [spans.num_rows]  # stored, and said so
            assert store.count() == spans.num_rows
            assert fresh_layers(store.connection()) == frozenset()  # stale, so readers compute
    with SpanStore(db) as store:  # the next writer rebuilds them
        _all_equal(store.connection())


def _split_off_an_engine_span(spans: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(most spans, one engine span whose trace's request rows depend on it, one span of another
    trace), from spans sorted by trace."""
    names = spans.column("SpanName").to_pylist()
    index = names.index(SPAN_LAYERS["typed_engine_requests"])
    other = spans.num_rows - 1
    assert spans.column("TraceId")[other] != spans.column("TraceId")[index]
    keep = pa.array([i not in (index, other) for i in range(spans.num_rows)])
    return spans.filter(keep), spans.slice(index, 1), spans.slice(other, 1)


def _store_as_an_older_writer(con: duckdb.DuckDBPyConnection, spans: pa.Table) -> None:
    """What a writer from before the trace layers does: the spans and their typed rows, nothing else."""
    con.from_arrow(spans).insert_into(TABLE)
    register_macros(con)
    con.register("older_batch", spans)
    for name in SPAN_LAYERS:
        con.execute(f"insert into {name} {derived._from('older_batch', name)}")
    con.unregister("older_batch")


def test_a_trace_layer_left_behind_is_never_marked_complete_by_a_later_batch(
    sample_store: Path, tmp_path: Path
) -> None:
    spans = _all_spans(sample_store)
    rest, engine, later = _split_off_an_engine_span(spans)
    db = tmp_path / "s.duckdb"
    SpanStore(db).insert_tables([rest])
    with duckdb.connect(str(db)) as con:
        _store_as_an_older_writer(con, engine)  # typed tables complete, trace layers behind
        assert fresh_layers(con) == frozenset(SPAN_LAYERS)
        first = derived.next_rowid(con)
        con.from_arrow(later).insert_into(TABLE)
        derived.insert_stored(con, first, later.num_rows)  # recomputes that span's trace only
        assert fresh_layers(con) == frozenset(SPAN_LAYERS)
        assert any(_differences(con, name) for name in TRACE_LAYERS)  # what a reader must not see


def test_a_writer_taking_the_file_back_checks_it_when_another_writer_was_there(
    sample_store: Path, tmp_path: Path
) -> None:
    spans = _all_spans(sample_store)
    rest, engine, later = _split_off_an_engine_span(spans)
    store = SpanStore(tmp_path / "s.duckdb", max_underived_spans=10_000)
    store.insert_tables([rest])
    store.release()  # as the receiver does when a reader asks or it is idle
    with duckdb.connect(str(tmp_path / "s.duckdb")) as con:
        _store_as_an_older_writer(con, engine)
    store.insert_tables([later])  # takes the file back: sees the change, rebuilds
    store.close()
    with duckdb.connect(str(tmp_path / "s.duckdb"), read_only=True) as con:
        _all_equal(con)


def test_a_failed_rebuild_changes_nothing(
    sample_store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.duckdb"
    spans = _all_spans(sample_store)
    SpanStore(db).insert_tables([spans.slice(0, 100)])
    with duckdb.connect(str(db)) as con:
        con.from_arrow(spans.slice(100)).insert_into(TABLE)  # typed tables short of rows
        before = {name: con.execute(f"select count(*) from {name}").fetchall() for name in DERIVED_LAYERS}

        def broken(*args: object, **kwargs: object) -> str:
            raise RuntimeError("trace layer SQL broke")

        monkeypatch.setattr(derived, "_from_tables", broken)  # after the typed tables are rebuilt
        derived.ensure(con)
        assert fresh_layers(con) == frozenset()
        assert {name: con.execute(f"select count(*) from {name}").fetchall() for name in DERIVED_LAYERS} == before


def test_spans_stored_after_rows_were_deleted_by_hand_are_derived_exactly_once(
    sample_store: Path, tmp_path: Path
) -> None:
    # deleted rows keep their row ids, so the next spans are found by row id, not by the span count
    spans = _all_spans(sample_store)
    db = tmp_path / "s.duckdb"
    SpanStore(db).insert_tables([spans.slice(0, 200)])
    with duckdb.connect(str(db)) as con:
        con.execute(f'delete from {TABLE} where rowid in (3, 50, 120)')
    with SpanStore(db, max_underived_spans=10_000) as store:  # rebuilds: the counts no longer match
        store.insert_tables([spans.slice(200, 100)])
        store.insert_tables([spans.slice(300, 100), spans.slice(0, 5)])  # some already stored
        store.derive_pending()
        _all_equal(store.connection())


def test_a_duplicate_only_batch_leaves_no_stale_row_id_behind(sample_store: Path, tmp_path: Path) -> None:
    # nothing stored, the file let go, another writer appends: its spans are its own to derive
    spans = _all_spans(sample_store)
    db = tmp_path / "s.duckdb"
    store = SpanStore(db, max_underived_spans=10_000)
    store.insert_tables([spans.slice(0, 100)])
    store.derive_pending()
    assert store.insert_tables([spans.slice(0, 10)]) == [0]
    store.release()
    SpanStore(db).insert_tables([spans.slice(100, 100)])  # another writer, deriving its own
    store.insert_tables([spans.slice(200, 100)])
    store.close()
    with duckdb.connect(str(db), read_only=True) as con:
        _all_equal(con)


def test_unordered_appends_end_with_the_transaction_committed_or_aborted() -> None:
    con = duckdb.connect()
    con.execute("create table t (i integer primary key)")

    def preserved() -> bool:
        return bool(con.execute("select current_setting('preserve_insertion_order')").fetchall()[0][0])

    with derived.unordered(con):
        con.begin()
        assert not preserved()
        con.execute("insert into t values (1)")
        con.commit()
    assert preserved()
    with pytest.raises(duckdb.ConstraintException), derived.unordered(con):
        con.begin()
        try:
            con.execute("insert into t values (1)")  # aborts the transaction
        finally:
            con.rollback()
    assert preserved()
