"""Opening a span store file: a file that is no span store is turned away in one line, by the
writer (``SpanStore``) and by a reader (``open_read_only``) alike, and store connections never
load or install a DuckDB extension."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

from restorelens.collector.store import SpanStore
from restorelens.errors import InputError
from restorelens.store import access as store_access
from restorelens.store import open_read_only, schema_sql

def test_open_read_only_names_a_missing_store(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such span store"):
        open_read_only(tmp_path / "absent.duckdb")


_OPENERS: dict[str, Callable[[Path], object]] = {
    "writer": lambda db: SpanStore(db).close(),
    "reader": lambda db: open_read_only(db).close(),
}


@pytest.mark.parametrize("opener", sorted(_OPENERS))
def test_a_sqlite_file_is_refused_before_duckdb_opens_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opener: str
) -> None:
    # DuckDB would hand the file to its sqlite_scanner extension, downloading it first
    db = tmp_path / "x.db"
    with sqlite3.connect(db) as con:
        con.execute("create table otel_traces (a integer)")
    before = db.read_bytes()

    def no_duckdb(*args: object, **kwargs: object) -> None:
        raise AssertionError("DuckDB was asked to open a SQLite file")

    monkeypatch.setattr(store_access.duckdb, "connect", no_duckdb)
    with pytest.raises(InputError) as caught:
        _OPENERS[opener](db)
    problem = "not a valid DuckDB database (it is a SQLite database)"
    assert (caught.value.where, caught.value.problem) == (str(db), problem)
    assert db.read_bytes() == before


@pytest.mark.parametrize("opener", sorted(_OPENERS))
@pytest.mark.parametrize("content", [b"hello", b"x" * 4096, b""])
def test_a_file_that_is_not_duckdbs_is_refused_in_one_line(tmp_path: Path, opener: str, content: bytes) -> None:
    db = tmp_path / "x.db"
    db.write_bytes(content)
    with pytest.raises(InputError) as caught:
        _OPENERS[opener](db)
    assert (caught.value.where, caught.value.problem) == (str(db), "not a valid DuckDB database")
    assert db.read_bytes() == content


_PREFIX = "table otel_traces is not the restorelens schema: "
_FOREIGN_TABLES = {
    "other columns": (
        "create table otel_traces (a integer, b varchar)",
        "its columns are a, b (missing Timestamp, TraceId, SpanId, ParentSpanId, TraceState and 17 more)",
    ),
    "a column more": (
        f"{schema_sql()}; alter table otel_traces add column extra integer",
        "its columns are Timestamp, TraceId, SpanId, ParentSpanId, TraceState and 18 more (unexpected extra)",
    ),
    "a column less": (
        f"{schema_sql()}; alter table otel_traces drop column \"StatusMessage\"",
        "its columns are Timestamp, TraceId, SpanId, ParentSpanId, TraceState and 16 more (missing StatusMessage)",
    ),
    "another order": (
        f"{schema_sql().replace('otel_traces', 'ours')}; "
        'create table otel_traces as select "TraceId", * exclude ("TraceId") from ours',
        "its columns are in another order",
    ),
    "another type": (
        schema_sql().replace('"Duration" ubigint', '"Duration" varchar'),
        'column "Duration" is VARCHAR, not UBIGINT',
    ),
    "no key": (
        schema_sql().replace('primary key ("TraceId", "SpanId")', 'check (true)'),
        "no primary key (TraceId, SpanId)",
    ),
    "a view": (
        f"{schema_sql().replace('otel_traces', 'ours')}; create view otel_traces as select * from ours",
        "no primary key (TraceId, SpanId)",
    ),
}


@pytest.mark.parametrize("opener", sorted(_OPENERS))
@pytest.mark.parametrize("case", sorted(_FOREIGN_TABLES))
def test_a_duckdb_file_whose_otel_traces_is_another_table_is_refused_naming_what_differs(
    tmp_path: Path, opener: str, case: str
) -> None:
    ddl, problem = _FOREIGN_TABLES[case]
    db = tmp_path / "x.db"
    with duckdb.connect(str(db)) as con:
        con.execute(ddl)
        objects = con.execute("select table_name from duckdb_tables() order by all").fetchall()
    with pytest.raises(InputError) as caught:
        _OPENERS[opener](db)
    assert (caught.value.where, caught.value.problem) == (str(db), _PREFIX + problem)
    with duckdb.connect(str(db)) as con:  # nothing was added (no derived tables)
        assert con.execute("select table_name from duckdb_tables() order by all").fetchall() == objects


def test_a_reader_refuses_a_duckdb_file_without_otel_traces_and_a_writer_creates_it(tmp_path: Path) -> None:
    db = tmp_path / "other.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("create table something (a integer)")
    with pytest.raises(InputError) as caught:
        open_read_only(db)
    assert caught.value.problem == "not a restorelens span store (no otel_traces table)"
    with SpanStore(db) as store:
        assert store.count() == 0


def test_store_connections_never_load_or_install_an_extension_and_share_the_file_with_plain_ones(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.duckdb"
    settings = ("select current_setting('autoload_known_extensions'), "
                "current_setting('autoinstall_known_extensions')")
    with SpanStore(db) as store:
        assert store.connection().execute(settings).fetchall() == [(False, False)]
        # set on the connection, not at connect: another configuration could not open the file here
        duckdb.connect(str(db)).close()
    with open_read_only(db) as con:
        assert con.execute(settings).fetchall() == [(False, False)]
