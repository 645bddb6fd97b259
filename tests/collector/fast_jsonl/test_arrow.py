"""The Arrow fast path produces exactly the rows of the lenient decoder, or declines."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.fast_jsonl import arrow
from restorelens.collector.fast_jsonl.arrow import READ_AHEAD_BLOCKS, _PacedStream, read_collector_jsonl
from restorelens.collector.fast_jsonl.blocks import Unsupported
from restorelens.collector.rows import ARROW_SCHEMA, DICT_SCHEMA, SpanRows, plain_resources

DATA = Path(__file__).parents[1] / "data"


def _lenient(text: str) -> pa.Table:
    rows = SpanRows()
    for line in text.splitlines():
        decode_traces_json(json.loads(line), rows)
    return rows.to_arrow()


def _fast(text: str) -> pa.Table:
    """The fast path's rows, its dictionary of resource maps spelled out as the lenient decoder has them."""
    table = pa.concat_tables(list(read_collector_jsonl(io.BytesIO(text.encode()))))
    assert table.schema == DICT_SCHEMA
    return plain_resources(table)


def _doc(spans: list[dict[str, Any]]) -> str:
    resource = {"attributes": [{"key": SERVICE_NAME, "value": {"stringValue": "svc"}}]}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]})


def _span(i: int, **extra: Any) -> dict[str, Any]:
    return {"traceId": "AB" * 16, "spanId": f"{i + 1:016X}", "name": "s", "startTimeUnixNano": "5",
            "endTimeUnixNano": "9", "status": {}, **extra}


def test_collector_file_exporter_lines_give_identical_rows() -> None:
    text = (DATA / "collector_file_exporter.jsonl").read_text()
    with pytest.raises(Unsupported, match="unexpected field"):  # arrays need the lenient decoder
        _fast(text)
    text = text.replace(',{"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"a"},{"intValue":"1"}]}}}', "")
    assert "arrayValue" not in text
    fast = _fast(text)
    assert fast.num_rows == 3 and fast.equals(_lenient(text))


def test_doubles_are_formatted_like_the_lenient_decoder() -> None:
    doubles = [0.1, 3.0, 1e-5, 1e16, 1e22, 123456789.0, -0.0, 2.5e-300]
    spans = [_span(i, attributes=[{"key": "d", "value": {"doubleValue": d}}]) for i, d in enumerate(doubles)]
    text = _doc(spans)
    fast = _fast(text)
    assert fast.equals(_lenient(text))
    assert [dict(m)["d"] for m in fast.column("SpanAttributes").to_pylist()] == [repr(d) for d in doubles]


@pytest.mark.parametrize(
    "span",
    [
        _span(0, kind="SPAN_KIND_SERVER"),
        _span(0, attributes=[{"key": "a", "value": {"arrayValue": {"values": []}}}]),
        _span(0, spanId="nothex"),
        _span(0, startTimeUnixNano="-5"),
        _span(0, attributes=[{"key": "i", "value": {"intValue": "007"}}]),
        _span(0, attributes=[{"key": "i", "value": {"intValue": "9223372036854775808"}}]),
        {"trace_id": "ab" * 16, "span_id": "cd" * 8, "start_time_unix_nano": "5"},
        _span(0, attributes=[{"key": "b", "value": {"bytesValue": "AAE="}}]),
        _span(0, events=[{"time_unix_nano": "7", "name": "e"}]),
        _span(0, aFieldFromANewerOtlp=1),
    ],
)
def test_anything_outside_the_collector_shape_is_declined(span: dict[str, Any]) -> None:
    with pytest.raises(Unsupported):
        _fast(_doc([span]))


def test_the_pretty_printed_otlp_example_gives_the_same_rows() -> None:
    text = (DATA / "otlp_example_trace.json").read_text()
    rows = SpanRows()
    decode_traces_json(json.loads(text), rows)
    assert _fast(text).equals(rows.to_arrow())


def test_every_field_the_collector_writes_is_read_by_the_fast_path() -> None:
    span = _span(
        0, flags=257, droppedAttributesCount=1, droppedEventsCount=2, droppedLinksCount=3,
        events=[{"timeUnixNano": "6", "name": "e", "droppedAttributesCount": 0}],
        links=[{"traceId": "cd" * 16, "spanId": "ef" * 8, "flags": 256, "droppedAttributesCount": 0}],
    )
    doc = {"resourceSpans": [{
        "resource": {"attributes": [], "droppedAttributesCount": 0},
        "scopeSpans": [{"scope": {"name": "s", "version": "1", "attributes": [], "droppedAttributesCount": 0},
                        "spans": [span], "schemaUrl": "https://opentelemetry.io/schemas/1.26.0"}],
        "schemaUrl": "https://opentelemetry.io/schemas/1.26.0",
    }]}
    text = json.dumps(doc)
    fast = _fast(text)
    assert fast.num_rows == 1 and fast.equals(_lenient(text))


class _CountingStream(io.RawIOBase):
    """A file that counts the bytes read from it."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        self.read_bytes += len(data)
        return data


@pytest.mark.parametrize("ahead", [2, READ_AHEAD_BLOCKS])
def test_arrow_reads_only_a_few_blocks_ahead_of_the_tables_taken(ahead: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow, "READ_AHEAD_BLOCKS", ahead)
    # no grant past the window while this test waits for a batch on a loaded machine (Arrow never
    # needs one for these short lines; the grants have their own tests below)
    monkeypatch.setattr(arrow, "_GRANT_S", 5.0)
    block = 64 * 1024
    line = _doc([_span(i) for i in range(100)]) + "\n"
    data = (line * (40 * block // len(line))).encode()  # about 40 blocks
    stream = _CountingStream(data)
    tables = read_collector_jsonl(stream, block_bytes=block)  # type: ignore[arg-type]
    spans = 0
    for taken, table in enumerate(tables):
        time.sleep(0.02)  # time for Arrow's background reads to run as far ahead as they may
        # the table just taken, the window ahead of it, and the block being read
        assert stream.read_bytes <= (taken + 1 + ahead + 1) * block
        spans += table.num_rows
    assert spans == len(data) // len(line) * 100 and stream.read_bytes == len(data)


def _blocked_read() -> tuple[_PacedStream, threading.Thread, list[bytes]]:
    """A paced stream whose one-block window is used up, and a read of it (from another thread,
    as Arrow's background reader) that the window holds back."""
    paced = _PacedStream(io.BytesIO(b"x" * 100), block_bytes=10, ahead_blocks=1)
    assert paced.read(10) == b"x" * 10  # the window: one block
    got: list[bytes] = []
    thread = threading.Thread(target=lambda: got.append(paced.read(10)))
    thread.start()
    time.sleep(0.1)
    assert not got  # still waiting
    return paced, thread, got


def test_a_read_past_the_window_waits_until_a_batch_is_taken() -> None:
    paced, thread, got = _blocked_read()
    paced.took_batch()
    thread.join(timeout=10)
    assert got == [b"x" * 10]


def test_while_the_caller_waits_for_a_batch_arrow_may_read_past_the_window() -> None:
    # Arrow gives no batch without more data: the window must not hold both up for good
    paced, thread, got = _blocked_read()
    with paced.waiting():
        thread.join(timeout=10)
    assert got == [b"x" * 10]


def test_once_the_caller_stops_a_waiting_read_ends_at_once() -> None:
    # the loader stops reading when an insert fails: Arrow's queued read gets end of file, not a block
    paced, thread, got = _blocked_read()
    paced.finish()
    thread.join(timeout=10)
    assert got == [b""]


class _Trickle(io.RawIOBase):
    """A stream that returns at most 3 bytes per read, as a pipe or socket may."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        return self._inner.read(min(size, 3) if size >= 0 else 3)


def test_short_reads_are_joined_into_whole_blocks() -> None:
    paced = _PacedStream(_Trickle(b"abcdefghijklmnop"), block_bytes=10, ahead_blocks=2)  # type: ignore[arg-type]
    assert (paced.read(10), paced.read(10), paced.read(10)) == (b"abcdefghij", b"klmnop", b"")
