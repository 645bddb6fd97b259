"""Parquet is read in bounded bytes, not rows: a dictionary-encoded file stores a long value once
however many rows repeat it (the issue's 147-KB file of a 2-MiB SpanName over 200k rows drove the
loader to 6.5 GB and "realloc of size 2147483648 failed")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from restorelens.collector import parquet
from restorelens.collector.loader import load_paths
from restorelens.collector.rows import ARROW_SCHEMA
from restorelens.store import open_read_only

MIB = 1 << 20
#: The loader's address space in the bounded test: today's code fails to allocate under it.
ADDRESS_SPACE_BYTES = 3 << 30

_ROW = {"Timestamp": 1_700_000_000_000_000_000, "TraceId": "ab" * 16, "SpanId": "cd" * 8, "ParentSpanId": "",
        "TraceState": "", "SpanName": "s", "SpanKind": "Server", "ServiceName": "svc", "ResourceAttributes": [],
        "ScopeName": "", "ScopeVersion": "", "SpanAttributes": [], "Duration": 5, "StatusCode": "Unset",
        "StatusMessage": "", "Events.Timestamp": [], "Events.Name": [], "Events.Attributes": [],
        "Links.TraceId": [], "Links.SpanId": [], "Links.TraceState": [], "Links.Attributes": []}


def _write(path: Path, table: pa.Table) -> Path:
    pq.write_table(table, path, store_schema=False, compression="zstd")  # no stored Arrow schema, as the issue's
    return path


def _repeated_name(path: Path, rows: int, name_bytes: int) -> Path:
    """``rows`` spans sharing one dictionary-encoded ``SpanName`` of ``name_bytes``."""
    table = pa.Table.from_pylist([_ROW], schema=ARROW_SCHEMA).take(pa.array([0] * rows))
    name = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array(["n" * name_bytes]))
    return _write(path, table.set_column(table.schema.get_field_index("SpanName"), "SpanName", name))


_BOUNDED_LOAD = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[3]), int(sys.argv[3])))
from restorelens.collector.loader import load_paths
summary = load_paths([sys.argv[1]], sys.argv[2])
print(json.dumps([summary.loaded, summary.errors]))
"""


def test_the_issues_dictionary_bomb_is_refused_in_one_line_naming_the_column_within_bounded_memory(
    tmp_path: Path,
) -> None:
    path = _repeated_name(tmp_path / "bomb.parquet", 200_000, 2 * MIB)
    assert path.stat().st_size < 256 * 1024  # small on disk, as the attacker's was: 400 GB once decoded
    done = subprocess.run([sys.executable, "-c", _BOUNDED_LOAD, str(path), str(tmp_path / "t.duckdb"),
                           str(ADDRESS_SPACE_BYTES)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded, errors = json.loads(done.stdout)
    assert loaded == 0 and len(errors) == 1
    assert errors[0].startswith(f"{path}: its strings decode to more than ") and "column 'SpanName'" in errors[0]


def test_a_value_longer_than_the_bound_refuses_the_file_naming_row_and_column(tmp_path: Path) -> None:
    rows = [dict(_ROW, SpanId=f"{i + 1:016x}") for i in range(3)]
    rows[1]["SpanAttributes"] = [("prompt", "p" * (parquet.PARQUET_MAX_VALUE_BYTES + 1))]
    path = _write(tmp_path / "long.parquet", pa.Table.from_pylist(rows, schema=ARROW_SCHEMA))
    summary = load_paths([path], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.malformed) == (0, 1)
    assert summary.errors == [f"{path}: row 2: column 'SpanAttributes' holds a value of "
                              f"{parquet.PARQUET_MAX_VALUE_BYTES + 1} bytes, more than the "
                              f"{parquet.PARQUET_MAX_VALUE_BYTES} a value may be (a file holding one is refused)"]


def test_long_rows_are_decoded_a_bounded_slice_at_a_time_and_all_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [dict(_ROW, SpanId=f"{i + 1:016x}", SpanName=f"{i:04d}" + "n" * 300,
                 SpanAttributes=[("k", "v" * (i % 7) * 50)], **{"Events.Name": ["e" * 100] * (i % 3),
                 "Events.Timestamp": [1] * (i % 3), "Events.Attributes": [[("a", "b" * 40)]] * (i % 3)})
            for i in range(500)]
    path = _write(tmp_path / "long.parquet", pa.Table.from_pylist(rows, schema=ARROW_SCHEMA))
    pieces: list[int] = []
    real_slices = parquet.byte_slices

    def small_slices(per_row: object, _max_bytes: int) -> list[tuple[int, int]]:
        found = real_slices(per_row, 4000)  # about ten rows: the batch goes in ~50 pieces
        pieces.append(len(found))
        return found

    monkeypatch.setattr(parquet, "byte_slices", small_slices)
    summary = load_paths([path], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.errors) == (500, [])
    assert sum(pieces) > 20
    with open_read_only(tmp_path / "t.duckdb") as con:
        names = [row[0] for row in con.execute('select "SpanName" from otel_traces order by "SpanName"').fetchall()]
        attrs = con.execute('select sum(length("SpanAttributes"[\'k\'])), sum(len("Events.Name")) '
                            "from otel_traces").fetchone()
    assert names == [row["SpanName"] for row in rows]
    assert attrs == (sum((i % 7) * 50 for i in range(500)), sum(i % 3 for i in range(500)))


SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _duckdb_written(tmp_path: Path, copies: int) -> tuple[Path, int]:
    """The sample traces ``copies`` times over (new ids each time), written by DuckDB's Parquet writer
    as ``restorelens export`` writes it: nested attributes dictionary-encoded, 122,880-row groups."""
    import duckdb

    db = tmp_path / "samples.duckdb"
    load_paths([SAMPLES], db)
    out = tmp_path / "copies.parquet"
    with duckdb.connect(str(db)) as con:
        con.execute(f"""COPY (SELECT o.* REPLACE (substr(md5(o.TraceId || c.n::VARCHAR), 1, 32) AS TraceId,
                                                  substr(md5(o.SpanId || c.n::VARCHAR), 1, 16) AS SpanId)
                              FROM otel_traces o, range({copies}) c(n))
                        TO '{out}' (FORMAT parquet, COMPRESSION zstd)""")
        spans = con.execute("SELECT count(*) FROM otel_traces").fetchone()[0] * copies
    return out, spans


def test_a_file_duckdb_wrote_past_one_batch_loads_whole(tmp_path: Path) -> None:
    # A batch across two row groups cannot carry nested columns dictionary-encoded (pyarrow's
    # "Nested data conversions not implemented for chunked array outputs"): read by row group.
    path, spans = _duckdb_written(tmp_path, copies=140)
    metadata = pq.ParquetFile(path).metadata
    assert metadata.num_row_groups > 1 and metadata.num_rows == spans > parquet.PARQUET_BATCH_ROWS
    summary = load_paths([path], tmp_path / "loaded.duckdb")
    assert (summary.loaded, summary.rejected, summary.malformed) == (spans, 0, 0)
    with open_read_only(tmp_path / "loaded.duckdb") as con:
        with_attributes = con.execute("SELECT count(*) FROM otel_traces WHERE cardinality(SpanAttributes) > 0")
        assert with_attributes.fetchone()[0] > 0


def test_a_row_group_past_the_bound_refuses_the_file_in_one_line(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = _duckdb_written(tmp_path, copies=2)
    monkeypatch.setattr(parquet, "PARQUET_MAX_GROUP_ROWS", 100)
    summary = load_paths([path], tmp_path / "loaded.duckdb")
    assert summary.loaded == 0
    assert any("row group 0 holds" in line and "more than the 100" in line for line in summary.errors)
