"""Span attributes staged as Parquet reach the store exactly as the Arrow table would put them, the
files never outlive the load, and a load without a usable temporary folder still stores everything."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector import staging
from restorelens.collector.fast_jsonl import native_table
from restorelens.collector.loader import load_paths
from restorelens.collector.staging import STAGED_COLUMN, StagedBlock, staged_blocks, staging_folder
from restorelens.collector.store import SpanStore
from restorelens.store import open_read_only


def _lines(first: int, count: int, per_line: int = 50) -> bytes:
    out = []
    for start in range(first, first + count, per_line):
        spans = [
            {"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": f"s{i}", "kind": 1 + i % 3,
             "startTimeUnixNano": str(1000 + i), "endTimeUnixNano": str(2000 + i),
             "attributes": [{"key": "i", "value": {"intValue": str(i)}},
                            {"key": "text", "value": {"stringValue": f"h\u00e9llo {i}"}},
                            {"key": "d", "value": {"doubleValue": i / 7}}][: 1 + i % 3],
             "status": {}}
            for i in range(start, min(start + per_line, first + count))
        ]
        resource = {"attributes": [{"key": SERVICE_NAME, "value": {"stringValue": f"svc{start % 3}"}}]}
        out.append(json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}))
    return ("\n".join(out) + "\n").encode()


def _stored(db: Path) -> list[tuple[object, ...]]:
    with open_read_only(db) as con:
        return con.execute('select * from otel_traces order by "SpanId"').fetchall()


def test_a_staged_block_stores_the_same_rows_as_its_table(tmp_path: Path) -> None:
    table = native_table(_lines(0, 200))
    assert table is not None
    with staging_folder() as folder:
        assert folder is not None
        (block,) = staged_blocks((t for t in [table]), folder)
        assert isinstance(block, StagedBlock) and block.parquet.exists()
        assert STAGED_COLUMN not in block.table.column_names and block.num_rows == 200
        for name, item in (("staged.duckdb", block), ("plain.duckdb", table)):
            with SpanStore(tmp_path / name) as store, store.transaction() as con:
                assert store.insert_table(con, item, skip_existing=False) == 200
        # with the key checked row by row too: the stored spans are skipped, the new ones kept
        more = native_table(_lines(150, 100))
        assert more is not None
        (again,) = staged_blocks((t for t in [more]), folder)
        with SpanStore(tmp_path / "staged.duckdb") as store, store.transaction() as con:
            assert store.insert_table(con, again, skip_existing=True) == 50
        block.discard()
        assert not block.parquet.exists()
    assert not folder.exists()
    assert _stored(tmp_path / "staged.duckdb")[:200] == _stored(tmp_path / "plain.duckdb")[:200]
    assert len(_stored(tmp_path / "staged.duckdb")) == 250


def test_a_load_stages_its_blocks_and_leaves_no_file_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    staged: list[int] = []
    real_stage = staging._stage

    def counting(table: pa.Table, folder: Path, number: int) -> StagedBlock | pa.Table:
        block = real_stage(table, folder, number)
        staged.append(isinstance(block, StagedBlock))
        return block

    monkeypatch.setattr(staging, "_stage", counting)
    (tmp_path / "a.jsonl").write_bytes(_lines(0, 300))
    fast = load_paths([tmp_path / "a.jsonl"], tmp_path / "fast.duckdb")
    lenient = load_paths([tmp_path / "a.jsonl"], tmp_path / "lenient.duckdb", fast=False)
    assert staged and all(staged)
    assert (fast.loaded, fast.errors) == (lenient.loaded, lenient.errors) == (300, [])
    assert _stored(tmp_path / "fast.duckdb") == _stored(tmp_path / "lenient.duckdb")
    assert list(temp.iterdir()) == []


def test_without_a_temporary_folder_the_blocks_go_in_as_arrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with staging_folder() as folder:
        assert folder is None
    table = native_table(_lines(0, 10))
    assert list(staged_blocks((t for t in [table]), None)) == [table]
    (tmp_path / "a.jsonl").write_bytes(_lines(0, 120))
    summary = load_paths([tmp_path / "a.jsonl"], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.errors) == (120, [])


def test_a_block_whose_file_cannot_be_written_goes_in_as_arrow(tmp_path: Path) -> None:
    table = native_table(_lines(0, 10))
    assert staging._stage(table, tmp_path / "missing", 0) is table
