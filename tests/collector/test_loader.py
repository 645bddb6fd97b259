"""Loading Collector file-exporter output: shapes, compression, framing, errors, idempotence."""

from __future__ import annotations

import gzip
import logging
import json
import os
import shutil
import struct
from pathlib import Path

import pytest
import zstandard
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens import spans as S
from restorelens.collector.loader import load_paths
from restorelens.store import open_read_only
from restorelens.errors import InputError

DATA = Path(__file__).parent / "data"
EXPORTER_LINES = DATA / "collector_file_exporter.jsonl"


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with open_read_only(db) as con:
        return con.execute(sql).fetchall()


def test_the_otlp_proto_example_with_upper_case_hex_loads(tmp_path: Path) -> None:
    summary = load_paths([DATA / "otlp_example_trace.json"], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.rejected, summary.malformed, summary.errors) == (1, 0, 0, [])
    (row,) = _rows(
        tmp_path / "t.duckdb",
        'select "TraceId", "SpanId", "ParentSpanId", "SpanKind", "ServiceName", "ScopeName", "Duration",'
        ' "SpanAttributes" from otel_traces',
    )
    assert row == (
        "5b8efff798038103d269b633813fc60c",
        "eee19b7ec3c1b174",
        "eee19b7ec3c1b173",
        "Server",
        "my.service",
        "my.library",
        1_000_000_000,
        {"my.span.attr": "some value"},
    )


def test_the_collector_file_exporter_shape_loads_and_twice_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"
    first = load_paths([EXPORTER_LINES], db)
    again = load_paths([EXPORTER_LINES], db)
    assert (first.loaded, first.duplicate, first.errors) == (3, 0, [])
    assert (again.loaded, again.duplicate) == (0, 3)
    rows = dict(
        (name, (kind, status, attrs, links))
        for name, kind, status, attrs, links in _rows(
            db, 'select "SpanName", "SpanKind", "StatusCode", "SpanAttributes", "Links.TraceId" from otel_traces'
        )
    )
    # The fixture imitates the gate's, httpx's and vLLM's spans, so contract names come from restorelens.spans;
    # "tags" (an array) and "gate.borrowed" (a bool) are format-only keys of the fixture, not contract attributes.
    gate, attempt, engine = rows[S.SPAN_GATE_REQUEST], rows[S.SPAN_HTTP_POST], rows[S.SPAN_LLM_REQUEST]
    assert gate[2][S.ATTR_GATE_WAIT_S] == "0.125"
    assert gate[2]["tags"] == '["a",1]'
    assert gate[2]["gate.borrowed"] == "false"
    assert attempt[:2] == ("Client", "Error") and attempt[3] == ["0af7651916cd43dd8448eb211c80319c"]
    assert engine[1] == "Ok"


def test_gzip_zstd_and_rotated_files_load_through_a_glob(tmp_path: Path) -> None:
    text = EXPORTER_LINES.read_bytes()
    lines = text.splitlines(keepends=True)
    (tmp_path / "traces.jsonl.gz").write_bytes(gzip.compress(lines[0]))
    (tmp_path / "traces-2026-01-01T00-00-00.000.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines[1]))
    summary = load_paths([str(tmp_path / "traces*")], tmp_path / "t.duckdb")
    assert (summary.files, summary.loaded, summary.errors) == (2, 3, [])


def test_length_prefixed_proto_and_zstd_framed_json_load(tmp_path: Path) -> None:
    proto_lines = [ParseDict(json.loads(line), ExportTraceServiceRequest()) for line in EXPORTER_LINES.read_text().splitlines()]
    # ParseDict reads IDs as base64; put the hex IDs back as raw bytes the way a real exporter does.
    docs = [json.loads(line) for line in EXPORTER_LINES.read_text().splitlines()]
    for message, doc in zip(proto_lines, docs, strict=True):
        for rs, rs_doc in zip(message.resource_spans, doc["resourceSpans"], strict=True):
            for span, span_doc in zip(rs.scope_spans[0].spans, rs_doc["scopeSpans"][0]["spans"], strict=True):
                span.trace_id = bytes.fromhex(span_doc["traceId"])
                span.span_id = bytes.fromhex(span_doc["spanId"])
                span.parent_span_id = bytes.fromhex(span_doc.get("parentSpanId", ""))
                for link, link_doc in zip(span.links, span_doc.get("links", []), strict=True):
                    link.trace_id = bytes.fromhex(link_doc["traceId"])
                    link.span_id = bytes.fromhex(link_doc["spanId"])
    framed = b"".join(struct.pack(">I", len(m.SerializeToString())) + m.SerializeToString() for m in proto_lines)
    (tmp_path / "a.pb").write_bytes(framed)
    compressor = zstandard.ZstdCompressor()
    zframes = [compressor.compress(line) for line in EXPORTER_LINES.read_bytes().splitlines()]
    (tmp_path / "b.zst").write_bytes(b"".join(struct.pack(">I", len(z)) + z for z in zframes))
    db = tmp_path / "t.duckdb"
    first = load_paths([tmp_path / "a.pb"], db)
    second = load_paths([tmp_path / "b.zst"], db)
    assert (first.loaded, first.errors) == (3, [])
    assert (second.loaded, second.duplicate, second.errors) == (0, 3, [])


def test_malformed_lines_are_reported_with_file_and_line_and_the_rest_loads(tmp_path: Path) -> None:
    lines = EXPORTER_LINES.read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], "{not json", "[1, 2]", "", lines[1], '{"resourceSpans":[{"scopeSpans":[{"spans":[{"spanId":"zz"}]}]}]}']) + "\n")
    summary = load_paths([bad], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.malformed, summary.rejected) == (3, 2, 1)
    assert summary.errors[0].startswith(f"{bad}:2: invalid JSON")
    assert summary.errors[1].startswith(f"{bad}:3: expected a JSON object")
    assert summary.errors[2].startswith(f"{bad}:6: resourceSpans[0].scopeSpans[0].spans[0]: traceId is missing")


def test_a_truncated_gzip_file_loads_what_it_can_and_says_so(tmp_path: Path) -> None:
    template = json.loads(EXPORTER_LINES.read_text().splitlines()[1])
    lines = []
    for i in range(200):
        template["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = os.urandom(8).hex()
        lines.append(json.dumps(template) + "\n")
    data = gzip.compress("".join(lines).encode())
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    summary = load_paths([tmp_path / "cut.jsonl.gz"], tmp_path / "t.duckdb")
    assert 0 < summary.loaded < 200 and summary.malformed == 1
    assert "cannot read further" in summary.errors[-1]


def test_progress_reaches_the_total_bytes(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    shutil.copy(EXPORTER_LINES, tmp_path / "x.jsonl")
    load_paths([tmp_path / "x.jsonl"], tmp_path / "t.duckdb", progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (EXPORTER_LINES.stat().st_size, EXPORTER_LINES.stat().st_size)


def test_a_glob_that_matches_nothing_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no files match"):
        load_paths([str(tmp_path / "*.jsonl")], tmp_path / "t.duckdb")


def test_a_folder_or_glob_holding_no_files_is_an_input_error_like_an_unmatched_glob(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)  # folders only: nothing to load
    for given, problem in ((empty, "no files in this folder"), (empty / "*", "no files match")):
        with pytest.raises(InputError) as caught:
            load_paths([given], tmp_path / "t.duckdb")
        assert (caught.value.where, caught.value.problem) == (str(given), problem)
    assert not (tmp_path / "t.duckdb").exists()


def _collector_line(first: int, count: int) -> str:
    """One TracesData line in the Collector's exact output shape (the Arrow fast path takes it)."""
    spans = [
        {"traceId": "ab" * 16, "spanId": f"{i + 1:016x}", "name": f"s{i}", "kind": 2,
         "startTimeUnixNano": str(1000 + i), "endTimeUnixNano": str(2000 + i),
         "attributes": [{"key": "i", "value": {"intValue": str(i)}}], "status": {}}
        for i in range(first, first + count)
    ]
    resource = {"attributes": [{"key": SERVICE_NAME, "value": {"stringValue": "svc"}}]}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}) + "\n"


def test_a_fast_path_file_overlapping_stored_spans_counts_each_exactly_and_keeps_the_first(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(_collector_line(0, 10))
    (tmp_path / "b.jsonl").write_text(_collector_line(5, 10).replace('"name": "s', '"name": "b'))
    db = tmp_path / "t.duckdb"
    seen: list[tuple[int, int]] = []
    first = load_paths([tmp_path / "a.jsonl"], db)
    # The plain insert of b.jsonl meets stored spans, rolls back and is redone with the key check.
    second = load_paths([tmp_path / "b.jsonl"], db, progress=lambda done, total: seen.append((done, total)))
    assert (first.loaded, first.duplicate) == (10, 0)
    assert (second.loaded, second.duplicate, second.errors) == (5, 5, [])
    assert seen[-1] == ((tmp_path / "b.jsonl").stat().st_size,) * 2
    names = [name for (name,) in _rows(db, 'select "SpanName" from otel_traces order by "Timestamp"')]
    assert names == [f"s{i}" for i in range(10)] + [f"b{i}" for i in range(10, 15)]


def test_the_fast_path_stores_exactly_what_the_lenient_decoder_stores(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(_collector_line(0, 7) + _collector_line(3, 9))
    fast = load_paths([tmp_path / "a.jsonl"], tmp_path / "fast.duckdb")
    lenient = load_paths([tmp_path / "a.jsonl"], tmp_path / "lenient.duckdb", fast=False)
    assert (fast.loaded, fast.duplicate) == (lenient.loaded, lenient.duplicate) == (12, 4)
    sql = 'select * from otel_traces order by "SpanId"'
    assert _rows(tmp_path / "fast.duckdb", sql) == _rows(tmp_path / "lenient.duckdb", sql)


def test_a_negative_zero_double_keeps_its_sign_on_every_path(tmp_path: Path) -> None:
    # Go's encoder (the Collector's) writes the double -0.0 as `-0`, which json.loads reads as 0
    spans = [{"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": f"a00000000000000{i}", "name": "s",
              "kind": 0, "startTimeUnixNano": "1", "endTimeUnixNano": "2",
              "attributes": [{"key": "d", "value": {"doubleValue": 0}}]} for i in range(3)]
    text = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
    for number in ("-0", "-0.0", "0"):  # one span each, in order
        text = text.replace('"doubleValue": 0}', '"doubleValue": ' + number + " }", 1)
    text = text.replace('"kind": 0', '"kind": -0', 1)  # still the integer 0 where an integer is meant
    (tmp_path / "z.jsonl").write_text(text + "\n")
    sql = """select "SpanId", "SpanKind", "SpanAttributes"['d'] from otel_traces order by "SpanId" """
    expected = [("a000000000000000", "Unspecified", "-0.0"), ("a000000000000001", "Unspecified", "-0.0"),
                ("a000000000000002", "Unspecified", "0.0")]
    for fast in (True, False):
        summary = load_paths([tmp_path / "z.jsonl"], tmp_path / f"{fast}.duckdb", fast=fast)
        assert (summary.loaded, summary.errors) == (3, [])
        assert _rows(tmp_path / f"{fast}.duckdb", sql) == expected, fast


def test_a_lone_surrogate_rejects_its_span_alone_naming_file_and_line(tmp_path: Path) -> None:
    def line(name: str, span_id: str) -> str:
        return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": span_id, "name": name,
            "startTimeUnixNano": "1", "endTimeUnixNano": "2"}]}]}]})

    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(line("good-1", "a0000000000000a1") + "\n" + line("bad\ud800", "a0000000000000a2") + "\n")
    second.write_text(line("good-2", "b0000000000000b1") + "\n")
    summary = load_paths([first, second], tmp_path / "spans.duckdb")
    assert (summary.loaded, summary.rejected) == (2, 1)
    assert summary.errors == [f"{first}:2: resourceSpans[0].scopeSpans[0].spans[0]: a string holds a lone "
                              "surrogate (\\ud800), which is not Unicode"]


def test_a_load_says_which_steps_its_time_went_to(tmp_path: Path) -> None:
    from restorelens.collector import phases

    db = tmp_path / "t.duckdb"
    fresh = load_paths([EXPORTER_LINES], db)
    again = load_paths([EXPORTER_LINES], db)  # every span already stored: the dedupe step
    lenient = load_paths([EXPORTER_LINES], tmp_path / "u.duckdb", fast=False)
    steps = (phases.DECODE, phases.ARROW_BUILD, phases.INSERT, phases.DERIVED, phases.COMMIT, phases.OPEN_CLOSE)
    assert list(fresh.phases.as_dict()) == list(steps)
    assert phases.DEDUPE in again.phases.as_dict()
    assert set(lenient.phases.as_dict()) >= set(steps)
    assert all(wall >= 0 and cpu >= 0 for wall, cpu in fresh.phases.as_dict().values())


def _otlp_line(first: int, spans: int, value: dict[str, object]) -> str:
    items = [{"traceId": f"{i + 1:032x}", "spanId": f"{i + 1:016x}", "name": "s", "startTimeUnixNano": "5",
              "endTimeUnixNano": "9", "attributes": [{"key": "v", "value": value}]} for i in range(first, first + spans)]
    resource = {"attributes": [{"key": SERVICE_NAME, "value": {"stringValue": "svc"}}]}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": items}]}]})


def test_a_file_whose_later_blocks_hold_stored_spans_loads_the_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from restorelens.collector import fast_jsonl

    monkeypatch.setattr(fast_jsonl, "BLOCK_BYTES", 4096)
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join(_otlp_line(i * 4, 4, {"intValue": "1"}) for i in range(20, 40)) + "\n")
    both = tmp_path / "both.jsonl"  # new spans first (plain inserts), then the stored ones
    both.write_text("\n".join(_otlp_line(i * 4, 4, {"intValue": "1"}) for i in range(40)) + "\n")
    db = tmp_path / "t.duckdb"
    assert load_paths([old], db).loaded == 80
    summary = load_paths([both], db)
    assert (summary.loaded, summary.duplicate, summary.errors) == (80, 80, [])
    assert _rows(db, "select count(*), count(distinct \"SpanId\") from otel_traces") == [(160, 160)]


def test_a_line_longer_than_a_block_is_read_again_in_larger_blocks_then_leniently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from restorelens.collector import fast_jsonl

    # (Arrow reads a line across one block boundary, not across two; the compiled decoder reads
    # no line longer than a block)
    monkeypatch.setattr(fast_jsonl, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(fast_jsonl, "LONG_LINE_BLOCK_BYTES", 8192)
    medium = tmp_path / "medium.jsonl"  # one line of about 6 KiB between two short ones
    medium.write_text("\n".join([_otlp_line(0, 2, {"intValue": "1"}), _otlp_line(2, 30, {"intValue": "1"}),
                                 _otlp_line(32, 12, {"intValue": "1"})]) + "\n")
    long = tmp_path / "long.jsonl"  # lines of about 20 KiB
    long.write_text("\n".join(_otlp_line(100 + i * 100, 100, {"intValue": "1"}) for i in range(3)) + "\n")
    assert 2 * 2048 < len(medium.read_text().splitlines()[1]) < 8192 < 2 * 8192 < len(long.read_text().splitlines()[1])
    with caplog.at_level(logging.DEBUG, logger="restorelens.collector.loader"):
        summary = load_paths([medium, long], tmp_path / "t.duckdb")
    assert (summary.loaded, summary.duplicate, summary.errors) == (344, 0, [])
    larger = [r.getMessage().split(":")[0] for r in caplog.records if "read again in larger blocks" in r.getMessage()]
    lenient = [r.getMessage().split(":")[0] for r in caplog.records if "lenient decoder" in r.getMessage()]
    arrow = [r.getMessage().split(":")[0] for r in caplog.records if "read again by Arrow's reader" in r.getMessage()]
    assert (arrow, larger, lenient) == ([str(medium), str(long)], [str(medium), str(long)], [str(long)])



@pytest.mark.parametrize("blank", [b"\n" * 64, b" \t\r\n" * 4096, b"\n" * 70_000], ids=["64", "16KiB", "70000"])
def test_json_lines_after_blank_bytes_load_as_json_lines(tmp_path: Path, blank: bytes) -> None:
    # the file: 64 blank bytes or more made the loader read JSON lines as length-prefixed
    # messages ("truncated message: 972 of 168430090 bytes", 0 spans)
    path = tmp_path / "blank-led.jsonl"
    path.write_bytes(blank + _collector_line(0, 3).encode() + b"\n\n" + _collector_line(3, 2).encode())
    for fast in (True, False):
        summary = load_paths([path], tmp_path / f"t-{fast}.duckdb", fast=fast)
        assert (summary.loaded, summary.errors) == (5, [])


def _zstd_framed(inflated_bytes: int, *, declare_size: bool) -> bytes:
    """One length-prefixed zstd message inflating to ``inflated_bytes`` (the issue's 1-GiB frames, scaled)."""
    frame = zstandard.ZstdCompressor(write_content_size=declare_size).compress(b"\x0a" * inflated_bytes)
    return struct.pack(">I", len(frame)) + frame


@pytest.mark.parametrize("declare_size", [True, False])
def test_a_zstd_message_past_the_decompressed_bound_stops_the_load_before_it_is_inflated(
    tmp_path: Path, declare_size: bool
) -> None:
    from restorelens.collector import DecompressedTooLarge

    path = tmp_path / "bomb.pb"
    path.write_bytes(_zstd_framed(64 << 20, declare_size=declare_size))
    assert path.stat().st_size < 64 << 10
    with pytest.raises(DecompressedTooLarge) as caught:
        load_paths([path], tmp_path / "t.duckdb", max_decompressed_bytes=4 << 20)
    assert str(caught.value) == f"{path}: holds more than {4 << 20} bytes once decompressed"
    # without a bound the message is read (and refused as protobuf): the bound is what stopped it
    assert load_paths([path], tmp_path / "u.duckdb").malformed == 1


def test_a_compressed_stream_past_the_decompressed_bound_stops_the_load(tmp_path: Path) -> None:
    from restorelens.collector import DecompressedTooLarge

    lines = "".join(_collector_line(i * 50, 50) for i in range(40)).encode()
    path = tmp_path / "many.jsonl.gz"
    path.write_bytes(gzip.compress(lines))
    for fast in (True, False):
        with pytest.raises(DecompressedTooLarge):
            load_paths([path], tmp_path / f"t-{fast}.duckdb", max_decompressed_bytes=len(lines) // 2, fast=fast)
        summary = load_paths([path], tmp_path / f"u-{fast}.duckdb", max_decompressed_bytes=len(lines), fast=fast)
        assert (summary.loaded, summary.errors) == (2000, [])
