"""`restorelens load` reads Parquet, Jaeger JSON and Tempo JSON besides OTLP, told by content.

The Jaeger and Tempo fixtures (tests/collector/data/jaeger_*.json, tempo_*.jsonl) are conversions,
not recordings: no Jaeger or Tempo could run where they were made (no container registry, no
build in the package registries reached). tests/collector/data/make_format_fixtures.py makes them
from formats_source.jsonl (spans the OpenTelemetry Python SDK recorded, plus edge cases) by the
published rules (the Collector's OTLP -> Jaeger translator and Jaeger's JSON model; protobuf's
JSON mapping for Tempo); its docstring lists the real Jaeger and Tempo files the shapes were
checked against. Each fixture must load to exactly the rows of its source: Tempo to the
nanosecond; Jaeger at microseconds (its times are), without link attributes and link trace
states (Jaeger's references have neither).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
from pathlib import Path
from typing import Any

import polars.testing
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.analysis import Analysis
from restorelens.cli import cli
from restorelens.collector import files
from restorelens.collector.export import export_parquet
from restorelens.collector.loader import load_paths
from restorelens.collector.summary import FileRead
from restorelens.store import COLUMNS, open_read_only

DATA = Path(__file__).parent / "data"
SOURCE = DATA / "formats_source.jsonl"
JAEGER_API = DATA / "jaeger_api_traces.json"
JAEGER_UI = DATA / "jaeger_ui_download.json"
TEMPO_V1 = DATA / "tempo_v1_batches.jsonl"
TEMPO_V2 = DATA / "tempo_v2_traces.jsonl"
SAMPLES = sorted((Path(__file__).parents[2] / "sample_traces").glob("*.jsonl"))

# Every column, times as integer nanoseconds (DuckDB hands TIMESTAMP_NS to Python as microsecond datetimes).
_ROWS = """
select epoch_ns("Timestamp") as start_ns, * exclude ("Timestamp", "Events.Timestamp"),
       [epoch_ns(t) for t in "Events.Timestamp"] as event_ns
from otel_traces order by "TraceId", "SpanId"
"""


def _rows(db: Path) -> list[dict[str, Any]]:
    with open_read_only(db) as con:
        cursor = con.execute(_ROWS)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _loaded(tmp_path: Path, *paths: Path, name: str = "t.duckdb") -> tuple[list[dict[str, Any]], Any]:
    db = tmp_path / name
    summary = load_paths(list(paths), db)
    return _rows(db), summary


def _at_microseconds(row: dict[str, Any]) -> dict[str, Any]:
    """A source row as Jaeger carries it: times truncated to microseconds (model.TimeAsEpochMicroseconds,
    DurationAsMicroseconds), links without attributes or trace state."""
    return dict(
        row,
        start_ns=row["start_ns"] // 1000 * 1000,
        Duration=row["Duration"] // 1000 * 1000,
        event_ns=[t // 1000 * 1000 for t in row["event_ns"]],
        **{"Links.Attributes": [{} for _ in row["Links.SpanId"]],
           "Links.TraceState": ["" for _ in row["Links.SpanId"]]},
    )


@pytest.fixture(scope="module")
def source_rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    rows, summary = _loaded(tmp_path_factory.mktemp("source"), SOURCE)
    assert (summary.rejected, summary.malformed) == (0, 0)
    return rows


def test_the_fixtures_are_what_the_converter_makes_of_the_source(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_format_fixtures", DATA / "make_format_fixtures.py")
    assert spec is not None and spec.loader is not None
    converter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(converter)
    for name in ("JAEGER_API", "JAEGER_UI", "TEMPO_V1", "TEMPO_V2"):
        setattr(converter, name, tmp_path / getattr(converter, name).name)
    converter.main()
    for fixture in (JAEGER_API, JAEGER_UI, TEMPO_V1, TEMPO_V2):
        assert (tmp_path / fixture.name).read_bytes() == fixture.read_bytes(), fixture.name


def test_the_source_covers_what_the_formats_must_carry(source_rows: list[dict[str, Any]]) -> None:
    kinds = {r["SpanKind"] for r in source_rows}
    assert kinds == {"Unspecified", "Internal", "Server", "Client", "Producer", "Consumer"}
    assert {r["StatusCode"] for r in source_rows} == {"Unset", "Ok", "Error"}
    assert any(r["start_ns"] % 1000 for r in source_rows)  # nanoseconds that Jaeger cannot carry
    assert any(r["TraceState"] for r in source_rows) and any(r["Events.Name"] for r in source_rows)
    assert any(r["Links.Attributes"] and r["Links.Attributes"][0] for r in source_rows)
    assert any(r["ServiceName"] == "" and r["ResourceAttributes"] == {} for r in source_rows)
    assert any(r["TraceId"].startswith("00000000000000000") for r in source_rows)  # Jaeger's %x drops these zeros


@pytest.mark.parametrize("fixture", [TEMPO_V1, TEMPO_V2], ids=["batches", "v2-trace"])
def test_tempo_answers_load_to_exactly_the_rows_of_their_source(
    tmp_path: Path, fixture: Path, source_rows: list[dict[str, Any]]
) -> None:
    rows, summary = _loaded(tmp_path, fixture)
    assert (summary.rejected, summary.malformed, summary.errors) == (0, 0, [])
    assert rows == source_rows
    assert summary.inputs == [FileRead(fixture, ("Tempo JSON",), len(source_rows))]


@pytest.mark.parametrize("fixture", [JAEGER_API, JAEGER_UI], ids=["query-api", "ui-download-short-ids"])
def test_jaeger_json_loads_to_the_rows_of_its_source_at_microseconds(
    tmp_path: Path, fixture: Path, source_rows: list[dict[str, Any]]
) -> None:
    rows, summary = _loaded(tmp_path, fixture)
    assert (summary.rejected, summary.malformed, summary.errors) == (0, 0, [])
    assert rows == [_at_microseconds(r) for r in source_rows]
    assert summary.inputs == [FileRead(fixture, ("Jaeger JSON",), len(source_rows))]


def test_jaeger_tags_map_to_kind_status_scope_and_typed_attributes_and_are_not_kept(tmp_path: Path) -> None:
    rows, _ = _loaded(tmp_path, JAEGER_API)
    edge = next(r for r in rows if r["SpanName"] == "consume everything")
    assert (edge["SpanKind"], edge["StatusCode"], edge["ScopeName"], edge["ScopeVersion"]) == (
        "Consumer", "Ok", "edge.scope", "2.0")
    assert edge["TraceState"] == "vendor=abc"
    assert edge["SpanAttributes"] == {
        "flag": "true", "big": str(2**60), "negative": "-7", "tiny": "1e-05", "whole": "3.0", "blob": "AQID",
        "list": '[1,"a",true]', "map": '{"k":1.5}', "text": "h\u00e9llo \u2603",
    }
    assert edge["Events.Name"] == ["first", ""]
    assert edge["Events.Attributes"] == [{"n": "1"}, {"unnamed": "false"}]
    error = next(r for r in rows if r["SpanName"] == "produce")
    assert (error["StatusCode"], error["StatusMessage"], error["ParentSpanId"]) == ("Error", "boom", "000000000000abcd")
    # a root span whose only reference is a FOLLOWS_FROM within its trace stays a root with a link
    root = next(r for r in rows if r["SpanName"] == "second root linked within its trace")
    assert (root["ParentSpanId"], root["Links.SpanId"]) == ("", ["0000000000001234"])


def _jaeger_doc(spans: list[dict[str, Any]], processes: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"traceID": "abc0", "spans": spans, "processes": processes or {"p1": {"serviceName": "svc"}}}


def _span(span_id: str, **fields: Any) -> dict[str, Any]:
    return {"traceID": "abc0", "spanID": span_id, "operationName": "op", "startTime": 1000, "duration": 500,
            "processID": "p1", **fields}


def test_jaeger_short_ids_references_and_process_tags_as_jaeger_writes_them(tmp_path: Path) -> None:
    """Shapes of Jaeger's model/json fixture: ids without leading zeros, CHILD_OF / FOLLOWS_FROM,
    typed tags (a binary as base64, an int64 beyond 2^53 as a string), process tags, a bare list."""
    doc = _jaeger_doc(
        [
            _span("abc0"),
            _span("123", references=[{"refType": "CHILD_OF", "traceID": "abc0", "spanID": "abc0"}],
                  tags=[{"key": "error", "type": "bool", "value": True},
                        {"key": "int64", "type": "int64", "value": "9007199254740993"},
                        {"key": "float64", "type": "float64", "value": 123.567},
                        {"key": "binary", "type": "binary", "value": "AQ=="},
                        {"key": "untyped", "value": 7}],
                  logs=[{"timestamp": 1400, "fields": [{"key": "error", "type": "string", "value": "bad"}]}],
                  processID="p2"),
            _span("567", references=[{"refType": "FOLLOWS_FROM", "traceID": "abc0", "spanID": "abc0"}]),
        ],
        {"p1": {"serviceName": "service_1"},
         "p2": {"serviceName": "service_2", "tags": [{"key": "host", "type": "string", "value": "google.com"}]}},
    )
    (tmp_path / "list.json").write_text(json.dumps([doc]))
    rows, summary = _loaded(tmp_path, tmp_path / "list.json")
    assert summary.errors == []
    by_id = {r["SpanId"]: r for r in rows}
    trace_id = "0" * 28 + "abc0"
    assert {r["TraceId"] for r in rows} == {trace_id}
    child = by_id["0000000000000123"]
    assert (child["ParentSpanId"], child["StatusCode"], child["ServiceName"]) == (
        "000000000000abc0", "Error", "service_2")
    assert child["ResourceAttributes"] == {SERVICE_NAME: "service_2", "host": "google.com"}
    assert child["SpanAttributes"] == {
        "int64": "9007199254740993", "float64": "123.567", "binary": "AQ==", "untyped": "7"}
    assert (child["start_ns"], child["Duration"], child["event_ns"]) == (1_000_000, 500_000, [1_400_000])
    follower = by_id["0000000000000567"]
    assert (follower["ParentSpanId"], follower["Links.TraceId"], follower["Links.SpanId"]) == (
        "", [trace_id], ["000000000000abc0"])


def test_jaeger_query_api_errors_and_malformed_spans_name_file_line_and_position(tmp_path: Path) -> None:
    not_found = {"data": None, "total": 0, "errors": [{"code": 404, "msg": "trace not found"}]}
    (tmp_path / "notfound.json").write_text(json.dumps(not_found))
    doc = _jaeger_doc([_span("abc0"), _span("xyz"), _span("12", startTime="soon"), _span("13", processID="p9")])
    (tmp_path / "bad.json").write_text(json.dumps({"data": [doc]}, indent=2))
    summary = load_paths([tmp_path / "notfound.json", tmp_path / "bad.json"], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.rejected, summary.malformed) == (1, 3, 1)
    assert summary.errors == [
        f"{tmp_path / 'notfound.json'}:1: no traces: Jaeger reported: 404 trace not found",
        f"{tmp_path / 'bad.json'}:1: data[0].spans[1]: spanID 'xyz' is not hex of at most 16 digits",
        f"{tmp_path / 'bad.json'}:1: data[0].spans[2]: startTime 'soon' is not a whole number of microseconds",
        f"{tmp_path / 'bad.json'}:1: data[0].spans[3]: processID 'p9' is not in the trace's processes",
    ]


_TAG = {"key": "k", "type": "int64"}
_OUT_OF_RANGE_US = (2**63 - 1) // 1000 + 1  # the first microsecond past the store's last nanosecond


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"tags": [{**_TAG, "value": "--5"}]}, "tag 'k': value '--5' is not of type int64"),
        ({"tags": [{**_TAG, "value": "9" * 40}]}, f"tag 'k': int64 value '{'9' * 40}' is out of range"),
        ({"tags": [{**_TAG, "value": 2**63}]}, f"tag 'k': int64 value {2**63} is out of range"),
        ({"tags": [{**_TAG, "value": "9" * 5000}]}, "tag 'k': int64 value '999"),
        ({"tags": [{"key": "k", "type": "float64", "value": 10**400}]}, "tag 'k': float64 value 1000"),
        ({"tags": [{"key": "k", "type": "float64", "value": "1_0"}]}, "tag 'k': value '1_0' is not of type float64"),
        ({"startTime": "9" * 5000}, "startTime '999"),
        ({"startTime": _OUT_OF_RANGE_US}, f"startTime {_OUT_OF_RANGE_US} is out of range (0 .. {_OUT_OF_RANGE_US - 1} "),
        ({"startTime": 10**300}, "startTime 1000"),
        ({"startTime": _OUT_OF_RANGE_US - 10, "duration": 10},
         f"startTime + duration ({_OUT_OF_RANGE_US - 10} + 10) is out of range"),
        ({"logs": [{"timestamp": "9" * 5000, "fields": []}]}, "log timestamp '999"),
        ({"processID": [1]}, "processID must be a string, not a JSON array"),
        ({"processID": {"a": 1}}, "processID must be a string, not a JSON object"),
    ],
    ids=["int64-dashes", "int64-40-digits", "int64-beyond", "int64-5000-digits", "float64-beyond", "float64-underscore",
         "start-5000-digits", "start-beyond", "start-float-beyond", "end-beyond", "log-5000-digits",
         "process-id-list", "process-id-object"],
)
def test_a_jaeger_value_out_of_range_or_of_another_type_rejects_its_span_alone_and_other_files_load(
    tmp_path: Path, fields: dict[str, Any], reason: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [_jaeger_doc([_span("1"), _span("2", **fields)])]}))
    summary = load_paths([JAEGER_API, bad, TEMPO_V1], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.duplicate, summary.rejected, summary.malformed) == (32, 31, 1, 0)
    (message,) = summary.errors
    assert message.startswith(f"{bad}:1: data[0].spans[1]: {reason}")
    assert len(message) < len(str(bad)) + 320  # a value shown is cut, not printed whole


def test_load_of_a_span_with_a_list_as_process_id_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "procid_list.json").write_text(json.dumps({"data": [_jaeger_doc([_span("2", processID=[1])])]}))
    db = str(tmp_path / "t.duckdb")
    result = CliRunner().invoke(cli, ["load", str(JAEGER_API), str(tmp_path / "procid_list.json"), "--db", db])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    assert f"{tmp_path / 'procid_list.json'}:1: data[0].spans[0]: processID must be a string" in result.output
    assert len(_rows(tmp_path / "t.duckdb")) == 31


@pytest.mark.parametrize(
    ("errors", "shown"),
    [("boom", "boom"), ({"code": 500, "msg": "storage down"}, "500 storage down"), (["a", {"x": 1}], 'a; {"x":1}')],
    ids=["a-string", "an-object", "a-list-of-others"],
)
def test_jaeger_errors_in_any_shape_are_reported_when_there_are_no_traces(
    tmp_path: Path, errors: Any, shown: str
) -> None:
    (tmp_path / "e.json").write_text(json.dumps({"data": None, "errors": errors}))
    summary = load_paths([tmp_path / "e.json"], tmp_path / "t.duckdb")
    assert summary.malformed == 1
    assert summary.errors == [f"{tmp_path / 'e.json'}:1: no traces: Jaeger reported: {shown}"]


def test_a_document_with_the_keys_of_two_formats_is_refused_not_read_as_either(tmp_path: Path) -> None:
    tempo = json.loads(TEMPO_V1.read_text().splitlines()[0])
    (tmp_path / "both.json").write_text(json.dumps({**tempo, "data": []}))
    summary = load_paths([tmp_path / "both.json", JAEGER_API], tmp_path / "t.duckdb")
    assert summary.loaded == 31 and summary.malformed == 1
    assert summary.errors == [
        f"{tmp_path / 'both.json'}:1: ambiguous document: it has \"data\" (Jaeger JSON) and \"batches\" "
        "(Tempo JSON); a document holds one format"
    ]


def test_a_long_tempo_partial_message_is_cut(tmp_path: Path) -> None:
    answer = json.loads(TEMPO_V2.read_text().splitlines()[0])
    answer.update(status="PARTIAL", message="x" * 100_000)
    (tmp_path / "v2.json").write_text(json.dumps(answer))
    (note,) = load_paths([tmp_path / "v2.json"], tmp_path / "t.duckdb").inputs[0].notes
    assert note.startswith("line 1: Tempo returned a partial trace: xxx") and note.endswith("x\u2026")
    assert len(note) < 300


def test_tempo_malformed_spans_are_named_where_the_answer_has_them_and_partial_is_said(tmp_path: Path) -> None:
    good = json.loads(TEMPO_V2.read_text().splitlines()[0])
    bad_span = {"traceId": "not-an-id", "spanId": "AAAAAAAAEjQ=", "name": "x"}
    good["trace"]["resourceSpans"][0]["scopeSpans"][0]["spans"].append(bad_span)
    good.update(status="PARTIAL", message="Trace exceeds maximum size")
    (tmp_path / "v2.json").write_text(json.dumps(good))
    (tmp_path / "v1.json").write_text(json.dumps({"batches": {"not": "a list"}}))
    summary = load_paths([tmp_path / "v2.json", tmp_path / "v1.json"], tmp_path / "t.duckdb")
    assert (summary.rejected, summary.malformed) == (1, 1)
    malformed, rejected = summary.errors  # rejected spans are reported when their batch is stored, last
    assert malformed == f"{tmp_path / 'v1.json'}:1: batches must be a list of objects"
    assert rejected.startswith(f"{tmp_path / 'v2.json'}:1: trace.resourceSpans[0].scopeSpans[0].spans[")
    assert rejected.endswith("traceId 'not-an-id' is not 32 hex digits")
    assert summary.inputs[0].notes == ("line 1: Tempo returned a partial trace: Trace exceeds maximum size",)
    assert summary.loaded == summary.inputs[0].spans > 0


def test_formats_are_told_by_content_whatever_the_name_and_compression(tmp_path: Path) -> None:
    misnamed = {
        "traces.parquet": JAEGER_API.read_bytes(),
        "spans.jsonl": gzip.compress(TEMPO_V1.read_bytes()),
        "trace.pb": JAEGER_UI.read_bytes(),
    }
    for name, content in misnamed.items():
        (tmp_path / name).write_bytes(content)
    load_paths([SOURCE], tmp_path / "src.duckdb")
    export_parquet(tmp_path / "src.duckdb", tmp_path / "export.json")
    summary = load_paths([tmp_path / n for n in (*misnamed, "export.json")], tmp_path / "t.duckdb")
    assert [(r.path.name, r.formats) for r in summary.inputs] == [
        ("traces.parquet", ("Jaeger JSON",)),
        ("spans.jsonl", ("Tempo JSON (gzip)",)),
        ("trace.pb", ("Jaeger JSON",)),
        ("export.json", ("Parquet (otel_traces)",)),
    ]
    assert summary.errors == []


def test_a_jaeger_or_tempo_file_loaded_again_stores_nothing_new(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    first = load_paths([TEMPO_V1, JAEGER_API], db)
    again = load_paths([TEMPO_V2, JAEGER_UI], db)
    # Jaeger's spans have the same IDs as Tempo's: duplicates, the first copy (Tempo's, to the ns) kept
    assert (first.loaded, first.duplicate) == (31, 31)
    assert (again.loaded, again.duplicate) == (0, 62)


# ---------------------------------------------------------------- Parquet


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Every sample trace (the demo's recorded scenarios) in a store, and its Parquet export."""
    folder = tmp_path_factory.mktemp("samples")
    summary = load_paths(SAMPLES, folder / "a.duckdb")
    assert summary.loaded > 500 and summary.errors == []
    assert export_parquet(folder / "a.duckdb", folder / "spans.parquet") == summary.loaded
    return folder / "a.duckdb", folder / "spans.parquet"


def test_a_parquet_export_loads_back_to_the_same_spans_and_decomposition(
    tmp_path: Path, sample_store: tuple[Path, Path]
) -> None:
    store, parquet = sample_store
    db = tmp_path / "b.duckdb"
    summary = load_paths([parquet], db)
    assert (summary.duplicate, summary.rejected, summary.errors) == (0, 0, [])
    assert summary.inputs == [FileRead(parquet, ("Parquet (otel_traces)",), summary.loaded)]
    assert _rows(db) == _rows(store)
    with open_read_only(store) as a, open_read_only(db) as b:
        first, second = Analysis(a), Analysis(b)
        for view in ("requests", "attempts", "lending_episodes", "wake_episodes"):
            expected = getattr(first, view)()
            assert expected.height > 0, view
            polars.testing.assert_frame_equal(getattr(second, view)(), expected)
    again = load_paths([parquet], db)
    assert (again.loaded, again.duplicate) == (0, summary.loaded)


def _rewrite(parquet: Path, out: Path, change: Any) -> Path:
    pq.write_table(change(pq.read_table(parquet)), out)
    return out


def test_foreign_parquet_is_one_line_naming_file_and_column_and_nothing_else_is_lost(
    tmp_path: Path, sample_store: tuple[Path, Path]
) -> None:
    _, parquet = sample_store
    cases = {
        "columns.parquet": (lambda t: pa.table({"a": [1]}),
                            "no column 'Timestamp': not the otel_traces layout (restorelens export --format parquet)"),
        "type.parquet": (lambda t: t.set_column(t.schema.get_field_index("Duration"), "Duration",
                                                t.column("Duration").cast(pa.string())),
                         "column 'Duration' is string, not uint64 as in otel_traces"),
        "extra.parquet": (lambda t: t.append_column("Extra", pa.array([1] * t.num_rows)),
                          "column 'Extra' is not an otel_traces column"),
    }
    paths = [_rewrite(parquet, tmp_path / name, change) for name, (change, _) in cases.items()]
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(parquet.read_bytes()[: parquet.stat().st_size // 2])
    summary = load_paths([SOURCE, *paths, cut], tmp_path / "t.duckdb")
    assert summary.malformed == 4 and summary.loaded == 31  # the OTLP file's spans, none of the Parquet ones
    expected = [f"{tmp_path / name}: {reason}" for name, (_, reason) in cases.items()]
    assert summary.errors[:3] == expected
    assert summary.errors[3].startswith(f"{cut}: cannot read it as Parquet: ")
    assert len(_rows(tmp_path / "t.duckdb")) == 31
    assert [r.formats for r in summary.inputs] == [("OTLP JSON",), (), (), (), ()]


def test_parquet_rows_the_store_cannot_take_are_rejected_alone_with_their_row(
    tmp_path: Path, sample_store: tuple[Path, Path]
) -> None:
    _, parquet = sample_store

    def spoil(table: pa.Table) -> pa.Table:
        table = table.slice(0, 10)
        trace_ids = table.column("TraceId").to_pylist()
        names: list[str | None] = table.column("SpanName").to_pylist()
        trace_ids[1] = "XYZ"
        names[4] = None
        table = table.set_column(table.schema.get_field_index("TraceId"), "TraceId", pa.array(trace_ids))
        return table.set_column(table.schema.get_field_index("SpanName"), "SpanName", pa.array(names, pa.string()))

    spoilt = _rewrite(parquet, tmp_path / "spoilt.parquet", spoil)
    summary = load_paths([spoilt], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.rejected) == (8, 2)
    assert summary.errors == [
        f"{spoilt}: row 2: TraceId 'XYZ' is not 32 lower-case hex digits (nor all zeros)",
        f"{spoilt}: row 5: SpanName is null",
    ]


def _not_utf8(texts: list[str]) -> pa.Array:
    """``texts`` as an Arrow string array whose 'ÿ' are the bytes ff fe: not UTF-8 (pyarrow builds
    such an array without checking, as a Parquet writer may)."""
    good = pa.array(texts, pa.string())
    validity, offsets, data = good.buffers()
    spoilt = data.to_pybytes().replace("\u00ff".encode(), b"\xff\xfe")
    return pa.Array.from_buffers(pa.string(), len(good), [validity, offsets, pa.py_buffer(spoilt)])


def test_parquet_rows_with_strings_not_utf8_or_times_out_of_range_are_rejected_and_reports_still_work(
    tmp_path: Path, sample_store: tuple[Path, Path]
) -> None:
    _, parquet = sample_store

    def spoil(table: pa.Table) -> pa.Table:
        table = table.slice(0, 12)
        names = table.column("SpanName").to_pylist()
        names[1] = "\u00ff" + names[1]
        table = table.set_column(table.schema.get_field_index("SpanName"), "SpanName", _not_utf8(names))
        # a map value not UTF-8: rebuild the map column on spoilt items
        attrs = table.column("SpanAttributes").combine_chunks()
        items = attrs.items.to_pylist()
        first = attrs.offsets[3].as_py()
        items[first] = "\u00ff"
        spoilt = pa.MapArray.from_arrays(attrs.offsets, attrs.keys, _not_utf8(items))
        table = table.set_column(table.schema.get_field_index("SpanAttributes"), "SpanAttributes", spoilt)
        durations = table.column("Duration").to_pylist()
        starts = pc.cast(table.column("Timestamp"), pa.int64()).to_pylist()
        durations[6] = 2**64 - 1
        durations[8] = 2**63 - starts[8]  # the end one nanosecond past the last one the store holds
        return table.set_column(table.schema.get_field_index("Duration"), "Duration", pa.array(durations, pa.uint64()))

    spoilt = _rewrite(parquet, tmp_path / "spoilt.parquet", spoil)
    assert pq.read_table(spoilt).num_rows == 12
    db = tmp_path / "t.duckdb"
    summary = load_paths([SOURCE, spoilt], db)
    assert (summary.loaded, summary.rejected, summary.malformed) == (31 + 8, 4, 0)
    start_7, start_9 = (pc.cast(pq.read_table(spoilt).column("Timestamp"), pa.int64())[i].as_py() for i in (6, 8))
    assert summary.errors == [
        f"{spoilt}: row 2: SpanName holds a string that is not UTF-8",
        f"{spoilt}: row 4: SpanAttributes holds a string that is not UTF-8",
        f"{spoilt}: row 7: Timestamp + Duration ({start_7} + {2**64 - 1}) is out of range (0 .. 2^63-1 ns)",
        f"{spoilt}: row 9: Timestamp + Duration ({start_9} + {2**63 - start_9}) is out of range (0 .. 2^63-1 ns)",
    ]
    with open_read_only(db) as con:
        assert Analysis(con).requests().height > 0  # the analysis' SQL reads every stored Duration as bigint


def test_parquet_strings_not_utf8_in_lists_are_rejected_too(tmp_path: Path, sample_store: tuple[Path, Path]) -> None:
    _, parquet = sample_store

    def spoil(table: pa.Table) -> pa.Table:
        table = table.slice(0, 3)
        states = pa.ListArray.from_arrays(pa.array([0, 0, 1, 1], pa.int32()), _not_utf8(["\u00ff"]))
        ids = pa.ListArray.from_arrays(pa.array([0, 0, 1, 1], pa.int32()), pa.array(["1" * 16]))
        trace_ids = pa.ListArray.from_arrays(pa.array([0, 0, 1, 1], pa.int32()), pa.array(["1" * 32]))
        attrs = pa.array([[], [[]], []], pa.list_(pa.map_(pa.string(), pa.string())))
        for name, column in (("Links.TraceState", states), ("Links.SpanId", ids), ("Links.TraceId", trace_ids),
                             ("Links.Attributes", attrs)):
            table = table.set_column(table.schema.get_field_index(name), name, column)
        return table

    spoilt = _rewrite(parquet, tmp_path / "spoilt.parquet", spoil)
    summary = load_paths([spoilt], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.rejected) == (2, 1)
    assert summary.errors == [f"{spoilt}: row 2: Links.TraceState holds a string that is not UTF-8"]


# ---------------------------------------------------------------- bounds and the CLI


def test_a_document_longer_than_the_limit_is_refused_and_the_next_lines_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_DOCUMENT_BYTES", 4096)
    long_line = json.dumps({"data": [json.loads(JAEGER_UI.read_text())["data"][0]] * 20})
    short = TEMPO_V2.read_text().splitlines()[0]
    assert len(long_line) > 4096 > len(short)
    (tmp_path / "lines.jsonl").write_text(f"{long_line}\n{short}\n")
    shutil.copy(JAEGER_API, tmp_path / "pretty.json")
    summary = load_paths([tmp_path / "lines.jsonl", tmp_path / "pretty.json"], tmp_path / "t.duckdb")
    assert summary.errors == [
        f"{tmp_path / 'lines.jsonl'}:1: line longer than 4096 bytes, the most one JSON document may be",
        f"{tmp_path / 'pretty.json'}:1: multi-line JSON document longer than 4096 bytes, the most one JSON "
        "document may be (write JSON lines instead)",
    ]
    assert summary.loaded == summary.inputs[0].spans > 0


def test_load_says_which_format_it_read_per_file_and_its_help_lists_them(
    tmp_path: Path, sample_store: tuple[Path, Path]
) -> None:
    _, parquet = sample_store
    shutil.copy(JAEGER_API, tmp_path / "spans.json")
    db = str(tmp_path / "t.duckdb")
    result = CliRunner().invoke(cli, ["load", str(tmp_path / "spans.json"), str(TEMPO_V1), str(parquet), "--db", db])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"{tmp_path / 'spans.json'}: Jaeger JSON, 31 spans"
    assert lines[1] == f"{TEMPO_V1}: Tempo JSON, 31 spans"
    assert lines[2].startswith(f"{parquet}: Parquet (otel_traces), ") and lines[2].endswith(" spans")
    assert lines[3].startswith("3 file(s): ") and lines[3].endswith(f"into {db}")
    help_text = " ".join(CliRunner().invoke(cli, ["load", "--help"]).output.split())
    for name in ("OTLP JSON", "OTLP protobuf", "Jaeger JSON", "Tempo", "Parquet", "gzip", "zstd"):
        assert name in help_text


def test_a_foreign_parquet_fails_the_cli_with_its_reason_and_keeps_the_other_files(
    tmp_path: Path, sample_store: tuple[Path, Path]
) -> None:
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"TraceId": ["a"]}), foreign)
    db = str(tmp_path / "t.duckdb")
    result = CliRunner().invoke(cli, ["load", str(SOURCE), str(foreign), "--db", db])
    assert result.exit_code == 1
    assert f"{foreign}: no column 'Timestamp'" in result.output and "Traceback" not in result.output
    assert len(_rows(tmp_path / "t.duckdb")) == 31
    assert tuple(pq.read_schema(sample_store[1]).names) == COLUMNS
