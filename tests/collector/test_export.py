"""Export to Parquet and OTLP JSON lines; the JSON lines load back into an identical store."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from restorelens.collector import export as export_module
from restorelens.collector.export import OutputExists, export_otlp_jsonl, export_parquet
from restorelens.collector.loader import load_paths
from restorelens.store import COLUMNS, open_read_only
from restorelens.errors import InputError

DATA = Path(__file__).parent / "data"
FIXTURES = [DATA / "collector_file_exporter.jsonl", DATA / "otlp_example_trace.json"]
Exporter = Callable[..., int]
EXPORTERS = [export_parquet, export_otlp_jsonl]


def _table(db: Path) -> list[tuple[object, ...]]:
    with open_read_only(db) as con:
        return con.execute('select * from otel_traces order by "SpanId"').fetchall()


def test_otlp_json_lines_load_back_into_the_same_rows(tmp_path: Path) -> None:
    load_paths(FIXTURES, tmp_path / "a.duckdb")
    assert export_otlp_jsonl(tmp_path / "a.duckdb", tmp_path / "out.jsonl", spans_per_line=2) == 4
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all("resourceSpans" in json.loads(line) for line in lines)
    summary = load_paths([tmp_path / "out.jsonl"], tmp_path / "b.duckdb")
    assert (summary.loaded, summary.errors) == (4, [])
    assert _table(tmp_path / "a.duckdb") == _table(tmp_path / "b.duckdb")


def test_parquet_has_the_table_columns_and_rows(tmp_path: Path) -> None:
    load_paths(FIXTURES, tmp_path / "a.duckdb")
    assert export_parquet(tmp_path / "a.duckdb", tmp_path / "out.parquet") == 4
    parquet = pq.ParquetFile(tmp_path / "out.parquet")
    assert tuple(parquet.schema_arrow.names) == COLUMNS
    assert parquet.metadata.num_rows == 4
    assert parquet.metadata.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize("export", [export_parquet, export_otlp_jsonl])
def test_an_output_that_cannot_be_written_is_an_input_error_naming_it(tmp_path: Path, export: Exporter) -> None:
    load_paths(FIXTURES, tmp_path / "a.duckdb")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unmakeable = blocker / "sub" / "o"  # its folder would have to be made inside a regular file
    cases = ((unmakeable, f"cannot create folder {blocker / 'sub'}: Not a directory"), (tmp_path, "Is a directory"))
    for out, reason in cases:
        with pytest.raises(InputError) as caught:
            export(tmp_path / "a.duckdb", out)
        assert (caught.value.where, caught.value.problem) == (str(out), reason)


@pytest.mark.parametrize("export", EXPORTERS)
def test_an_existing_output_is_refused_unless_overwrite_and_then_replaced(tmp_path: Path, export: Exporter) -> None:
    load_paths(FIXTURES, tmp_path / "a.duckdb")
    out = tmp_path / "out"
    out.write_text("a good export from before\n")
    with pytest.raises(OutputExists) as caught:
        export(tmp_path / "a.duckdb", out)
    assert (caught.value.where, caught.value.problem) == (str(out), "already exists (overwrite=True replaces it)")
    assert out.read_text() == "a good export from before\n"
    assert export(tmp_path / "a.duckdb", out, overwrite=True) == 4
    assert out.read_bytes() != b"a good export from before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.duckdb", "out"]  # no temporary file left


def _fail_midway(monkeypatch: pytest.MonkeyPatch, export: Exporter) -> None:
    """The disk fills up after the first batch or line is written."""
    disk_full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if export is export_parquet:
        write_batch = pq.ParquetWriter.write_batch

        def first_then_full(self: pq.ParquetWriter, batch: Any, *args: Any, **kwargs: Any) -> None:
            write_batch(self, batch, *args, **kwargs)
            raise disk_full

        monkeypatch.setattr(pq.ParquetWriter, "write_batch", first_then_full)
    else:
        traces_data = export_module._traces_data
        calls = []

        def first_then_full(rows: list[dict[str, Any]]) -> dict[str, Any]:
            calls.append(1)
            if len(calls) > 1:
                raise disk_full
            return traces_data(rows)

        monkeypatch.setattr(export_module, "_traces_data", first_then_full)


@pytest.mark.parametrize("export", EXPORTERS)
def test_a_failed_export_leaves_the_previous_file_whole_and_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, export: Exporter
) -> None:
    load_paths(FIXTURES, tmp_path / "a.duckdb")
    out = tmp_path / "out"
    out.write_text("a good export from before\n")
    _fail_midway(monkeypatch, export)
    more = {} if export is export_parquet else {"spans_per_line": 1}  # more than one line
    with pytest.raises(InputError) as caught:
        export(tmp_path / "a.duckdb", out, overwrite=True, **more)
    assert (caught.value.where, caught.value.problem) == (str(out), "No space left on device")
    assert out.read_text() == "a good export from before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.duckdb", "out"]


@pytest.mark.parametrize("export", EXPORTERS)
def test_a_new_output_gets_the_usual_permissions(tmp_path: Path, export: Exporter) -> None:
    load_paths(FIXTURES, tmp_path / "a.duckdb")
    umask = os.umask(0o022)
    try:
        export(tmp_path / "a.duckdb", tmp_path / "sub" / "out")
    finally:
        os.umask(umask)
    assert (tmp_path / "sub" / "out").stat().st_mode & 0o777 == 0o644  # not a temporary file's 0600


def test_an_output_that_is_no_regular_file_is_written_in_place(tmp_path: Path) -> None:
    # /dev/stdout, a pipe: nothing there to keep, and nothing that could be renamed over
    load_paths(FIXTURES, tmp_path / "a.duckdb")
    assert export_otlp_jsonl(tmp_path / "a.duckdb", "/dev/null") == 4
    assert export_parquet(tmp_path / "a.duckdb", "/dev/null") == 4
