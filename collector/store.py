"""The durable span store: one DuckDB file holding ``otel_traces``, idempotent on (TraceId, SpanId).

Each insert is one transaction: once it returns, DuckDB has committed it to its write-ahead log.
Opening the file, and sharing it with readers in other processes, is the store package's
(``restorelens.store``); the derived tables written with the spans are the analysis's
(``analysis/derived.py``): this writer asks it to maintain them.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
import pyarrow as pa

from restorelens.analysis import derived
from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.phases import ARROW_BUILD, COMMIT, DEDUPE, DERIVED, INSERT, OPEN_CLOSE, Phases
from restorelens.collector.proto_columns import decode_traces_proto_columns
from restorelens.collector.rows import SpanRows, concat_spans
from restorelens.collector.staging import StagedBlock
from restorelens.errors import InputError
from restorelens.store import COLUMNS, DEFAULT_LOCK_TIMEOUT_S, ENGINE_METRICS_TABLE, TABLE, connect, create_schema

__all__ = ["INCOMING", "InsertResult", "SpanStore", "store_spans"]

log = logging.getLogger(__name__)

#: The name the store's inserts read the incoming batch by. DuckDB resolves a table or view of the
#: store's own first, which would take the batch's place: the store refuses to open over one.
INCOMING = "rl_incoming"


@dataclass(frozen=True)
class InsertResult:
    """Spans newly stored, already present (same TraceId and SpanId), and rejected, with reasons."""

    loaded: int
    duplicate: int
    rejected: int
    errors: tuple[str, ...] = ()


class SpanStore:
    """Write spans to a DuckDB file (or ``":memory:"``); a context manager.

    The connection opens on first use and again after :meth:`release`. ``threads`` caps DuckDB's
    worker threads (the receiver uses 1: its inserts are small and extra threads only cost CPU).
    ``checkpoint_threshold_bytes`` is how much write-ahead log DuckDB lets grow before a commit
    checkpoints it into the file (DuckDB's own default, 16 MiB, when None); closing checkpoints
    whatever is left.

    The derived tables (``analysis/derived.py``) are written after the spans' transaction commits, in their
    own, for all spans stored since the last time: at once by default (``max_underived_spans=0``),
    or, with a larger ``max_underived_spans``, when that many wait or the connection is released or
    closed. Deriving many batches at once costs less (the receiver: seven statements per small
    commit group halved its throughput; the loader: per Arrow block it cost 35 % more CPU and 80 %
    more memory than once per 200k spans). Until then readers see the tables stale and compute
    those layers; a crash in between is repaired by the next writer that opens the store. Taking
    the file back after :meth:`release`, the store checks the derived tables again if anyone else
    wrote meanwhile (``derived.snapshot``), so another writer's spans are never left underived.

    ``phases`` collects the seconds each step takes (``phases.py``; ``bench_collector`` prints them).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
        threads: int | None = None,
        max_underived_spans: int = 0,
        checkpoint_threshold_bytes: int | None = None,
        phases: Phases | None = None,
    ) -> None:
        if checkpoint_threshold_bytes is not None and checkpoint_threshold_bytes < 0:
            raise ValueError(f"checkpoint_threshold_bytes must be at least 0, not {checkpoint_threshold_bytes}")
        self.path = str(path)
        self.checkpoint_threshold_bytes = checkpoint_threshold_bytes
        self.phases = phases if phases is not None else Phases()
        self.lock_timeout_s = lock_timeout_s
        self.threads = threads
        self.max_underived_spans = max_underived_spans
        # stored spans whose derived rows are not written yet: how many, and the row id of the first
        # (derived.next_rowid; None while there are none)
        self._underived_spans = 0
        self._underived_from: int | None = None
        self._con: duckdb.DuckDBPyConnection | None = None
        # derived.snapshot() when this store last let the file go with every derived row written:
        # unchanged when it comes back, nobody else wrote and the (costlier) freshness check is
        # skipped; None checks
        self._left_as: tuple[Any, ...] | None = None
        self._derive_failed = False  # since the last check: the tables are stale until rebuilt
        self.connection()  # fail early on a bad path, create the schema

    def connection(self) -> duckdb.DuckDBPyConnection:
        if self._con is None:
            with self.phases.timing(OPEN_CLOSE):
                self._con = self._open()
        return self._con

    def _open(self) -> duckdb.DuckDBPyConnection:
        if self.path != ":memory:":
            folder = Path(self.path).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(self.path, f"cannot create folder {folder}: {exc.strerror or exc}") from None
        con = connect(self.path, read_only=False, timeout_s=self.lock_timeout_s)
        try:
            if self.threads:
                con.execute(f"set threads = {int(self.threads)}")  # an int, not user text
            # A bulk append flushes each full row group (122,880 rows) to the file as it fills
            # rather than gathering DuckDB's default 5 first: a 1M-span file's load peaked at
            # 876 MiB with 5 and 685 MiB with 1, no slower (the receiver's groups are smaller
            # than a row group, so it is unaffected).
            con.execute("set write_buffer_row_group_count = 1")
            if self.checkpoint_threshold_bytes is not None:
                # an int, not user text
                con.execute(f"set checkpoint_threshold = '{int(self.checkpoint_threshold_bytes)}B'")
            create_schema(con)
            hidden = con.execute(
                "select 1 from duckdb_tables() where table_name = $name "
                "union all select 1 from duckdb_views() where view_name = $name and not internal",
                {"name": INCOMING},
            ).fetchall()
            if hidden:
                raise InputError(self.path, f"holds a table or view named {INCOMING}, a name the collector "
                                 "reserves for the spans it is inserting; rename or drop it")
            if self._left_as is None or derived.snapshot(con) != self._left_as:
                derived.ensure(con)  # first open, or another writer (maybe older) was here
                self._derive_failed = False
        except BaseException:
            con.close()
            raise
        return con

    @property
    def is_open(self) -> bool:
        return self._con is not None

    def release(self) -> None:
        """Close the connection so that other processes can open the file (in-memory stores stay)."""
        if self._con is not None and self.path != ":memory:":
            self._let_go()

    def close(self) -> None:
        if self._con is not None:
            self._let_go()

    def _let_go(self) -> None:
        assert self._con is not None
        if self._underived_spans and self.path != ":memory:":
            # Closing checkpoints the whole log anyway: the last derivation's commit checkpoints
            # instead, and DuckDB then writes a large transaction's rows once, straight into the
            # file, rather than to the log first (its auto_checkpoint_skip_wal_threshold). The
            # receiver, deriving at each release, spent 4 % less CPU (benchmarks/RESULTS.md).
            with contextlib.suppress(duckdb.Error):  # a broken connection: closing reports it
                self._con.execute("set checkpoint_threshold = '0B'")
        derived_all = self.derive_pending() and not self._derive_failed
        self._left_as = None
        with self.phases.timing(OPEN_CLOSE):
            if derived_all:
                with contextlib.suppress(duckdb.Error):
                    self._left_as = derived.snapshot(self._con)
            self._con.close()
        self._con = None

    def derive_pending(self) -> bool:
        """Write the derived rows of every span stored since the last time, in one transaction.
        False when that failed (logged; the tables stay stale until the next writer's check)."""
        if not self._underived_spans:
            self._underived_from = None  # the file may be let go: another writer's rows come next
            return True
        first, spans = self._underived_from, self._underived_spans
        assert first is not None
        self._underived_from, self._underived_spans = None, 0
        try:
            con = self.connection()
            with derived.unordered(con), self.transaction(commit_step=DERIVED), self.phases.timing(DERIVED):
                derived.insert_stored(con, first, spans)
        # Anything: this runs after the spans' own commit (often inside the caller's transaction
        # block), and an error here must not read as if they were not stored. The next writer to
        # open the store rederives.
        except Exception as exc:
            log.warning("%s: derived tables not updated (%s); they are rebuilt when the store is next opened",
                        self.path, exc)
            self._derive_failed = True
            return False
        return True

    def __enter__(self) -> SpanStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(
        self, *, commit_step: str = COMMIT, threads: int | None = None
    ) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction: committed when the block ends, rolled back if it raises. The commit's
        time counts as ``commit_step`` in :attr:`phases`. ``threads`` caps DuckDB's threads for
        the transaction (its inserts and commit), not for the derivation that may follow it."""
        con = self.connection()
        underived = self._underived_from, self._underived_spans
        con.begin()
        try:
            if threads:
                con.execute(f"set threads = {int(threads)}")  # an int, not user text
            yield con
            with self.phases.timing(commit_step):
                con.commit()
        except BaseException:
            # those spans were not stored after all (and their row ids go to the next append)
            self._underived_from, self._underived_spans = underived
            # a failed commit has already ended the transaction: rolling back would raise and
            # hide the commit's own error
            with contextlib.suppress(duckdb.Error):
                con.rollback()
            raise
        finally:
            if threads:
                # settings outlive transactions; a broken connection must not hide the block's error
                with contextlib.suppress(duckdb.Error):
                    con.execute(f"set threads = {int(self.threads)}" if self.threads else "reset threads")
        if self._underived_spans > self.max_underived_spans:
            self.derive_pending()  # its own transaction ends with nothing waiting: no recursion

    def insert_table(
        self, con: duckdb.DuckDBPyConnection, table: pa.Table | StagedBlock, *, skip_existing: bool = True
    ) -> int:
        """Insert an Arrow table in ``otel_traces`` layout (or a block staged by ``staging.py``);
        returns how many spans were new.

        The new spans' derived rows follow once the transaction commits (see the class).
        ``skip_existing=False`` is a plain insert: about half the CPU, because DuckDB's ``insert or
        ignore`` checks the primary key row by row, but one span already stored (or twice in the
        table) raises ``duckdb.ConstraintException`` and aborts the transaction.
        """
        if not table.num_rows:
            return 0
        if self._underived_from is None:
            self._underived_from = derived.next_rowid(con)
        if isinstance(table, StagedBlock):
            new = self._insert_staged(con, table, skip_existing=skip_existing)
        elif not skip_existing:
            # No named view to unregister: a failed insert aborts the transaction, and unregistering
            # then would raise and hide the ConstraintException.
            with self.phases.timing(INSERT):
                # DuckDB reads the local variable by its name (a replacement scan): a third less fixed
                # cost per statement than a relation's insert_into, 0.65 against 0.97 ms, which the
                # receiver pays per request
                rl_incoming = table  # noqa: F841  (INCOMING)
                con.execute(f"insert into {TABLE} select * from {INCOMING}")
            new = table.num_rows
        else:
            # the count is of the rows stored: not those already there, and of two copies in one
            # table only the one `insert or ignore` kept
            with self.phases.timing(DEDUPE):
                sql = f"insert or ignore into {TABLE} select * from {INCOMING}"
                new = self._insert_from(con.from_arrow(table), sql)
        self._underived_spans += new
        return new

    def _insert_staged(self, con: duckdb.DuckDBPyConnection, block: StagedBlock, *, skip_existing: bool) -> int:
        # the staged column from its Parquet file, row for row beside the others from Arrow
        rows = con.from_arrow(block.table).join(con.read_parquet(str(block.parquet)), how="positional")
        columns = ", ".join(f'"{name}"' for name in COLUMNS)  # the table's order
        verb = "insert or ignore" if skip_existing else "insert"
        with self.phases.timing(DEDUPE if skip_existing else INSERT):
            return self._insert_from(rows, f"{verb} into {TABLE} select {columns} from {INCOMING}")

    @staticmethod
    def _insert_from(rows: duckdb.DuckDBPyRelation, sql: str) -> int:
        """Run the insert ``sql`` reading ``rows`` as :data:`INCOMING`; how many rows it stored. A
        relation rather than a registered view: each Arrow table registered and unregistered kept
        about 1.7 MiB of Arrow memory (DuckDB 2.0.1), 64 MiB over a 1M-span file."""
        done = rows.query(INCOMING, sql)
        assert done is not None  # an insert answers with its count
        return int(done.fetchall()[0][0])

    def insert_tables(self, tables: Sequence[pa.Table]) -> list[int]:
        """Insert Arrow tables in one transaction; per table, how many spans were new.

        Spans are usually all new, so all tables go in as one plain insert (one statement: DuckDB's
        fixed cost per insert is milliseconds). If any span was already stored, that transaction is
        rolled back and redone table by table with ``insert or ignore``, in order, so a span already
        stored or in an earlier table keeps that copy and each table's count is exact.
        """
        present = [t for t in tables if t.num_rows]
        if not present:
            return [0 for _ in tables]
        try:
            with self.transaction() as con:
                combined = concat_spans(present)
                self.insert_table(con, combined, skip_existing=False)
            loaded = [t.num_rows for t in tables]
        except duckdb.ConstraintException:
            with self.transaction() as con:
                loaded = [self.insert_table(con, t) for t in tables]
        return loaded

    def insert_batches(self, batches: Sequence[SpanRows]) -> list[tuple[int, int]]:
        """Insert each batch, all in one transaction; per batch (loaded, duplicate)."""
        with self.phases.timing(ARROW_BUILD):
            tables = [batch.to_arrow() for batch in batches]
        loaded = self.insert_tables(tables)
        return [(n, table.num_rows - n) for n, table in zip(loaded, tables, strict=True)]

    def insert_rows(self, rows: SpanRows) -> InsertResult:
        loaded, duplicate = self.insert_batches([rows])[0]
        return InsertResult(loaded, duplicate, rows.rejected, tuple(rows.errors))

    def insert_traces_data(self, obj: Any) -> InsertResult:
        """Store one decoded OTLP TracesData: a JSON dict, a protobuf message, or its bytes."""
        rows = SpanRows()
        if isinstance(obj, dict):
            decode_traces_json(obj, rows)
        else:
            decode_traces_proto_columns(obj, rows)
        return self.insert_rows(rows)

    def insert_engine_metrics(self, tables: Sequence[pa.Table]) -> int:
        """Append scraped ``engine_metrics`` rows (``collector/scrape/``), all in one transaction;
        returns how many. No key: two scrapes of one target may share a timestamp on a coarse clock."""
        present = [t for t in tables if t.num_rows]
        if not present:
            return 0
        combined = present[0] if len(present) == 1 else pa.concat_tables(present)
        with self.transaction() as con:
            con.from_arrow(combined).insert_into(ENGINE_METRICS_TABLE)
        return combined.num_rows

    def count(self) -> int:
        row = self.connection().execute(f"select count(*) from {TABLE}").fetchone()
        return int(row[0]) if row else 0


def store_spans(store: SpanStore, spans: Sequence[Any]) -> InsertResult:
    """Store SDK ``ReadableSpan`` objects (e.g. from an ``InMemorySpanExporter``)."""
    from restorelens.otlp_json import encode_traces_data

    return store.insert_traces_data(encode_traces_data(spans))
