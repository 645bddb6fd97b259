"""The compiled JSON-lines decoder gives exactly the rows of Arrow's reader, or declines.

Declining is always safe (the file goes to Arrow's reader, and past it to the lenient decoder);
a table that differs is not. So every case here is either declined or compared, and the random
and mutated lines hold the decoder to the rule: a table it returns equals Arrow's, or, for a line
Arrow's reader refuses, the lenient decoder's.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.fast_jsonl.arrow import read_collector_jsonl
from restorelens.collector.fast_jsonl.blocks import NativeDeclined, Unsupported
from restorelens.collector.fast_jsonl.native import native_table, read_collector_jsonl_native
from restorelens.collector.loader import load_paths
from restorelens.collector.rows import DICT_SCHEMA, SpanRows, plain_resources
from restorelens.store import open_read_only
from restorelens.otlp_json import encode_value

DATA = Path(__file__).parents[1] / "data"


def _native(text: str | bytes) -> pa.Table | None:
    data = text.encode() if isinstance(text, str) else text
    table = native_table(data)
    if table is None:
        return None
    assert table.schema == DICT_SCHEMA
    return plain_resources(table)


def _arrow(text: str | bytes) -> pa.Table:
    data = text.encode() if isinstance(text, str) else text
    tables = list(read_collector_jsonl(io.BytesIO(data)))
    return plain_resources(pa.concat_tables(tables)) if tables else pa.Table.from_pylist([], plain_schema())


def plain_schema() -> pa.Schema:
    return plain_resources(DICT_SCHEMA.empty_table()).schema


def _lenient(text: str | bytes) -> tuple[pa.Table, int]:
    data = text.decode() if isinstance(text, bytes) else text
    rows = SpanRows()
    for line in data.splitlines():
        decode_traces_json(json.loads(line), rows)
    return rows.to_arrow(), rows.rejected


def _same_as_arrow(text: str | bytes) -> bool:
    """True when the compiled decoder took the lines (and its table is Arrow's), False when it declined."""
    native = _native(text)
    if native is None:
        return False
    assert native.equals(_arrow(text))
    return True


def _doc(spans: list[dict[str, Any]], resource: list[dict[str, Any]] | None = None) -> str:
    attributes = resource if resource is not None else [{"key": SERVICE_NAME, "value": {"stringValue": "svc"}}]
    return json.dumps({"resourceSpans": [{"resource": {"attributes": attributes}, "scopeSpans": [{"spans": spans}]}]})


def _span(i: int, **extra: Any) -> dict[str, Any]:
    return {"traceId": "AB" * 16, "spanId": f"{i + 1:016X}", "name": "s", "startTimeUnixNano": "5",
            "endTimeUnixNano": "9", "status": {}, **extra}


def test_the_collector_exporters_lines_give_arrows_rows() -> None:
    text = (DATA / "collector_file_exporter.jsonl").read_text()
    assert _native(text) is None  # an arrayValue: not this decoder's
    text = text.replace(',{"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"a"},{"intValue":"1"}]}}}', "")
    assert _same_as_arrow(text)


def test_every_field_the_collector_writes_is_read() -> None:
    span = _span(
        0, flags=257, droppedAttributesCount=1, droppedEventsCount=2, droppedLinksCount=3, kind=3,
        parentSpanId="00ff" * 4, traceState="k=v",
        attributes=[{"key": "s", "value": {"stringValue": "x"}}, {"key": "i", "value": {"intValue": "-12"}},
                    {"key": "d", "value": {"doubleValue": 0.25}}, {"key": "b", "value": {"boolValue": False}}],
        events=[{"timeUnixNano": "6", "name": "e", "droppedAttributesCount": 0,
                 "attributes": [{"key": "w", "value": {"doubleValue": 1e-7}}]}, {}],
        links=[{"traceId": "cd" * 16, "spanId": "ef" * 8, "traceState": "a=b", "flags": 256,
                "droppedAttributesCount": 0, "attributes": [{"key": "l", "value": {"doubleValue": 3}}]}],
        status={"code": 2, "message": "upstream 503"},
    )
    doc = {"resourceSpans": [{
        "resource": {"attributes": [{"key": "r", "value": {"doubleValue": 1.5}},
                                    {"key": SERVICE_NAME, "value": {"stringValue": "svc"}}],
                     "droppedAttributesCount": 0},
        "scopeSpans": [{"scope": {"name": "s", "version": "1", "droppedAttributesCount": 0,
                                  "attributes": [{"key": "sa", "value": {"doubleValue": 2.5}}]},
                        "spans": [span, _span(1)], "schemaUrl": "https://opentelemetry.io/schemas/1.26.0"},
                       {"spans": [_span(2)]}],
        "schemaUrl": "https://opentelemetry.io/schemas/1.26.0",
    }, {"scopeSpans": [{"scope": {}, "spans": [_span(3)]}]}]}
    text = json.dumps(doc)
    assert _same_as_arrow(text)
    assert _native(text).equals(_lenient(text)[0])  # type: ignore[union-attr]


def test_members_in_any_order_whitespace_and_escapes() -> None:
    span = {"status": {"message": "a \"quoted\" \\ / \u00e9 \U0001f600 <tag> &", "code": 1}, "endTimeUnixNano": "9",
            "name": "caf\u00e9 \n\t", "spanId": "0123456789ABCDEF", "traceId": "0123456789abcdefABCDEF0123456789",
            "attributes": [{"value": {"stringValue": "\u2028\u00e9\"<>"}, "key": "k\u00e9"}], "startTimeUnixNano": "0"}
    for ensure_ascii in (True, False):
        compact = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, ensure_ascii=ensure_ascii)
        assert _same_as_arrow(compact)
        spaced = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, ensure_ascii=ensure_ascii,
                            separators=(" , ", " : "))
        assert _same_as_arrow(spaced + " \r")
    # the escapes Go's encoder writes for HTML characters, and an escaped solidus
    go = _doc([_span(0, name="\\u003cb\\u003e \\u0026 \\/")]).replace("\\\\u00", "\\u00").replace("\\\\/", "\\/")
    assert "\\u003c" in go and _same_as_arrow(go)
    assert _native(go).column("SpanName").to_pylist() == ["<b> & /"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "line",
    [
        _doc([_span(0, kind="SPAN_KIND_SERVER")]),
        _doc([_span(0, kind=9)]),
        _doc([_span(0, status={"code": 3})]),
        _doc([_span(0, attributes=[{"key": "a", "value": {"arrayValue": {"values": []}}}])]),
        _doc([_span(0, attributes=[{"key": "b", "value": {"bytesValue": "AAE="}}])]),
        _doc([_span(0, spanId="nothex")]),
        _doc([_span(0, spanId="0" * 16)]),
        _doc([_span(0, traceId="0" * 32)]),
        _doc([_span(0, parentSpanId="abc")]),
        _doc([_span(0, startTimeUnixNano="-5")]),
        _doc([_span(0, startTimeUnixNano=5)]),
        _doc([_span(0, startTimeUnixNano="9223372036854775808")]),
        _doc([_span(0, startTimeUnixNano="05")]),
        _doc([_span(0, attributes=[{"key": "i", "value": {"intValue": "007"}}])]),
        _doc([_span(0, attributes=[{"key": "i", "value": {"intValue": 7}}])]),
        _doc([_span(0, attributes=[{"key": "i", "value": {"intValue": "-0"}}])]),
        _doc([_span(0, attributes=[{"key": "d", "value": {"doubleValue": "NaN"}}])]),
        # zeros with an exponent: Arrow's reader refuses "0e400" and the lenient decoder spells
        # zeros its own way, so none is taken here
        _doc([_span(0, attributes=[{"key": "d", "value": {"doubleValue": 0}}])]).replace(
            '{"doubleValue": 0}', '{"doubleValue": 0e400}'),
        _doc([_span(0, attributes=[{"key": "d", "value": {"doubleValue": 0}}])]).replace(
            '{"doubleValue": 0}', '{"doubleValue": -0.0E5}'),
        # past int64: Arrow's reader declines it, the lenient decoder rejects the span
        _doc([_span(0, attributes=[{"key": "i", "value": {"intValue": "9223372036854775808"}}])]),
        _doc([_span(0, attributes=[{"key": "i", "value": {"intValue": "-9223372036854775809"}}])]),
        _doc([_span(0, attributes=[{"key": "i", "value": {"intValue": ""}}])]),
        _doc([_span(0, attributes=[{"key": "v", "value": {}}])]),
        _doc([_span(0, attributes=[{"key": "v", "value": {"stringValue": "a", "intValue": "1"}}])]),
        _doc([_span(0, attributes=[{"key": "v"}])]),
        _doc([_span(0, attributes=[{"value": {"stringValue": "a"}}])]),
        _doc([_span(0, attributes=[{"key": "v", "value": {"stringValue": None}}])]),
        _doc([_span(0, attributes=[{"key": "a", "value": {"stringValue": "1"}},
                                   {"key": "a", "value": {"stringValue": "2"}}])]),
        _doc([_span(0, attributes=[{"key": f"k{i}", "value": {"intValue": "1"}} for i in range(129)])]),
        _doc([_span(0, name=None)]),
        _doc([_span(0, events=[{"time_unix_nano": "7", "name": "e"}])]),
        _doc([_span(0, links=[{"traceId": "cd" * 16}])]),
        _doc([_span(0, aFieldFromANewerOtlp=1)]),
        _doc([{"trace_id": "ab" * 16, "span_id": "cd" * 8, "start_time_unix_nano": "5"}]),
        _doc([_span(0)], resource=[{"key": SERVICE_NAME, "value": {"doubleValue": 1.0}}]),
        _doc([_span(0, name="\ud800")]),
        _doc([_span(0, name="\udc00x")]),
        _doc([_span(0, name="\u0000")]),
        _doc([_span(0)]).replace('"name": "s"', '"name": "s", "name": "t"'),
        _doc([_span(0)]).replace('"name": "s"', '"name": "s\\x"'),
        _doc([_span(0)]).replace('"name": "s"', '"name": "s\x01"'),
        _doc([_span(0)]).replace('"name": "s"', '"na\\u006de": "s"'),
        _doc([_span(0)]) + " x",
        _doc([_span(0)]) + "\n\n" + _doc([_span(1)]),
        _doc([_span(0)])[:-1],
        '{"resourceSpans": null}',
        '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + "ab" * 16 + '"}]}]}]}',
        "[]",
        "  ",
        '{"resourceSpans": []}{"resourceSpans": []}',
    ],
)
def test_anything_outside_the_shape_is_declined(line: str) -> None:
    assert _native(line) is None


def test_invalid_utf8_is_declined() -> None:
    line = _doc([_span(0, name="NAME")]).encode().replace(b"NAME", b"\xff\xfe")
    assert _native(line) is None
    overlong = _doc([_span(0, name="NAME")]).encode().replace(b"NAME", b"\xc0\xaf")
    assert _native(overlong) is None


def test_what_the_lines_leave_out_is_filled_as_arrow_fills_it() -> None:
    lines = "\n".join([
        '{}',
        '{"resourceSpans": []}',
        '{"resourceSpans": [{}]}',
        '{"resourceSpans": [{"scopeSpans": [{}]}]}',
        json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "ab" * 16, "spanId": "cd" * 8}]}]}]}),
    ])
    assert _same_as_arrow(lines)
    assert _native(lines).num_rows == 1  # type: ignore[union-attr]


def test_doubles_of_every_kind_take_pythons_repr() -> None:
    doubles = [0.1, 3.0, 1e-5, 1e16, 1e22, 123456789.0, -0.0, 2.5e-300, 5e-324, 1.7976931348623157e308, 1e15]
    spans = [_span(i, attributes=[{"key": "d", "value": {"doubleValue": d}}]) for i, d in enumerate(doubles)]
    text = _doc(spans)
    assert _same_as_arrow(text)
    assert [dict(m)["d"] for m in _native(text).column("SpanAttributes").to_pylist()] == [  # type: ignore[union-attr]
        repr(d) for d in doubles]
    # JSON's own spellings of numbers: integers, exponents, a negative zero
    spelled = _doc([_span(0, attributes=[{"key": "d", "value": {"doubleValue": 0}}])])
    for number in ("1", "-0", "1E3", "2e-3", "1.5E+2", "12345678901234567890", "0.30000000000000004", "0.0"):
        text = spelled.replace('{"doubleValue": 0}', '{"doubleValue": ' + number + "}")
        assert _same_as_arrow(text), number
    for bad in ("01", "1.", ".5", "+1", "1e", "-", "1e400", "Infinity", "NaN", "0x10"):
        assert _native(spelled.replace('{"doubleValue": 0}', '{"doubleValue": ' + bad + "}")) is None, bad


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
_HEX32 = st.from_regex(r"\A[0-9a-fA-F]{32}\Z").filter(lambda s: int(s, 16) != 0)
_HEX16 = st.from_regex(r"\A[0-9a-fA-F]{16}\Z").filter(lambda s: int(s, 16) != 0)
_SCALAR = st.one_of(_TEXT, st.booleans(), st.integers(-(2**63), 2**63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False))


@st.composite
def _spans(draw: st.DrawFn) -> dict[str, Any]:
    span: dict[str, Any] = {"traceId": draw(_HEX32), "spanId": draw(_HEX16)}
    keys = draw(st.lists(st.text(max_size=6).filter(lambda k: "\x00" not in k and not any(
        0xD800 <= ord(c) <= 0xDFFF for c in k)), unique=True, max_size=5))
    optional = {
        "parentSpanId": st.one_of(st.just(""), _HEX16), "traceState": _TEXT, "name": _TEXT,
        "kind": st.integers(0, 5), "startTimeUnixNano": st.integers(0, 2**63 - 1).map(str),
        "endTimeUnixNano": st.integers(0, 2**63 - 1).map(str), "flags": st.integers(0, 2**31),
        "attributes": st.just([{"key": k, "value": encode_value(draw(_SCALAR))} for k in keys]),
        "events": st.lists(st.fixed_dictionaries({}, optional={
            "timeUnixNano": st.integers(0, 2**63 - 1).map(str), "name": _TEXT,
            "attributes": st.lists(_SCALAR, max_size=2).map(
                lambda vs: [{"key": f"e{i}", "value": encode_value(v)} for i, v in enumerate(vs)])}), max_size=2),
        "links": st.lists(st.fixed_dictionaries({"traceId": _HEX32, "spanId": _HEX16}, optional={
            "traceState": _TEXT, "attributes": st.lists(_SCALAR, max_size=2).map(
                lambda vs: [{"key": f"l{i}", "value": encode_value(v)} for i, v in enumerate(vs)])}), max_size=2),
        "status": st.fixed_dictionaries({}, optional={"code": st.integers(0, 2), "message": _TEXT}),
    }
    for name, strategy in optional.items():
        if draw(st.booleans()):
            span[name] = draw(strategy)
    return span


@given(
    spans=st.lists(_spans(), min_size=1, max_size=4),
    service=st.one_of(st.none(), _TEXT),
    ensure_ascii=st.booleans(),
)
@settings(max_examples=300, deadline=None)
def test_random_spans_give_arrows_rows(spans: list[dict[str, Any]], service: str | None, ensure_ascii: bool) -> None:
    resource = [] if service is None else [{"key": SERVICE_NAME, "value": {"stringValue": service}}]
    doc = {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": spans}]}]}
    text = json.dumps(doc, ensure_ascii=ensure_ascii)
    native = _native(text)
    if native is None:  # everything generated here is in the Collector's shape
        pytest.fail(f"declined {text[:300]}")
    assert native.equals(_arrow(text))


def test_mutated_lines_are_declined_or_give_the_rows_of_a_decoder_that_takes_them() -> None:
    rng = random.Random(5)
    seed_lines = [
        _doc([_span(0, attributes=[{"key": "d", "value": {"doubleValue": 0.5}}, {"key": "i", "value": {"intValue": "12"}}],
                    events=[{"timeUnixNano": "7", "name": "e"}], links=[{"traceId": "cd" * 16, "spanId": "ef" * 8}],
                    status={"code": 2, "message": "m\u00e9"})]),
        (DATA / "collector_file_exporter.jsonl").read_text().splitlines()[0],
    ]
    alphabet = b'{}[]",:0123456789abcdefABCDEF-+.eE \\u\xc3\xa9nulltrue'
    taken = declined = 0
    for _ in range(1500):
        line = bytearray(rng.choice(seed_lines).encode())
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(line))
            action = rng.random()
            if action < 0.4:
                line[at] = rng.choice(alphabet)
            elif action < 0.7:
                del line[at]
            else:
                line.insert(at, rng.choice(alphabet))
        data = bytes(line).replace(b"\n", b" ")
        native = _native(data)
        if native is None:
            declined += 1
            continue
        taken += 1
        try:
            expected = _arrow(data)
        except Unsupported:
            rows, rejected = _lenient(data)
            assert rejected == 0, data
            expected = rows
        assert native.equals(expected), data
    assert taken > 20 and declined > 500  # both sides of the rule were exercised


@pytest.mark.parametrize("slack", [1, 100, 1 << 20])
def test_lines_across_blocks_and_a_last_line_without_newline(slack: int) -> None:
    lines = [_doc([_span(i, name="n" * (i * 37 % 300))]) for i in range(20)]
    data = ("\r\n".join(lines)).encode()  # and CRLF line ends
    block_bytes = max(len(line) for line in lines) + slack  # the longest line and its \r fit a block
    tables = list(read_collector_jsonl_native(io.BytesIO(data), block_bytes=block_bytes))
    got = plain_resources(pa.concat_tables(tables))
    assert got.num_rows == 20 and got.equals(_arrow(data.replace(b"\r\n", b"\n")))


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_line_longer_than_a_block_is_declined(where: str) -> None:
    short, long = _doc([_span(0)]), _doc([_span(1, name="n" * 500)])
    lines = {"first": [long, short, short], "middle": [short, long, short], "last": [short, short, long]}[where]
    data = "\n".join(lines).encode()
    with pytest.raises(NativeDeclined, match="longer than"):
        list(read_collector_jsonl_native(io.BytesIO(data), block_bytes=len(long) - 1))
    assert sum(t.num_rows for t in read_collector_jsonl_native(io.BytesIO(data), block_bytes=len(long))) == 3


def test_a_declined_block_raises_for_the_caller_to_read_again() -> None:
    data = (_doc([_span(0)]) + "\n" + _doc([_span(1, kind="SPAN_KIND_SERVER")]) + "\n").encode()
    with pytest.raises(NativeDeclined):
        list(read_collector_jsonl_native(io.BytesIO(data), block_bytes=len(_doc([_span(0)])) + 1))


def test_the_loader_loads_a_declined_file_through_arrow_and_the_lenient_decoder(tmp_path: Path) -> None:
    taken = tmp_path / "taken.jsonl"
    taken.write_text("\n".join(_doc([_span(i, attributes=[{"key": "d", "value": {"doubleValue": i / 3}}])])
                               for i in range(5)) + "\n")
    arrow_only = tmp_path / "arrow.jsonl"  # a key given twice: Arrow's reader takes it, this decoder does not
    arrow_only.write_text(_doc([_span(10)]).replace('"name": "s"', '"name": "s", "name": "t"') + "\n")
    lenient_only = tmp_path / "lenient.jsonl"
    lenient_only.write_text(_doc([_span(20, kind="SPAN_KIND_SERVER")]) + "\n")
    assert _native(arrow_only.read_text()) is None
    fast = load_paths([taken, arrow_only, lenient_only], tmp_path / "fast.duckdb")
    slow = load_paths([taken, arrow_only, lenient_only], tmp_path / "slow.duckdb", fast=False)
    assert (fast.loaded, fast.rejected, fast.malformed) == (slow.loaded, slow.rejected, slow.malformed) == (7, 0, 0)
    query = 'select * exclude ("ResourceAttributes") from otel_traces order by "SpanId"'
    with open_read_only(tmp_path / "fast.duckdb") as con:
        fast_rows = con.execute(query).fetchall()
    with open_read_only(tmp_path / "slow.duckdb") as con:
        slow_rows = con.execute(query).fetchall()
    assert fast_rows == slow_rows
