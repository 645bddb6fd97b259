"""Export to Parquet and OTLP JSON lines; the JSON lines load back into an identical store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from restorelens.collector.export import export_otlp_jsonl, export_parquet
from restorelens.collector.loader import load_paths
from restorelens.collector.schema import COLUMNS
from restorelens.collector.store import open_read_only
from restorelens.errors import InputError

DATA = Path(__file__).parent / "data"
FIXTURES = [DATA / "collector_file_exporter.jsonl", DATA / "otlp_example_trace.json"]
Exporter = Callable[[Path, Path], int]


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
