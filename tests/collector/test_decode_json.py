"""OTLP/JSON quirks (the spec's JSON encoding and what real exporters write) decode to the same rows."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from opentelemetry.sdk.resources import SERVICE_NAME

from restorelens.collector.decode_json import decode_traces_json, json_value_to_str, may_hold_surrogates
from restorelens.collector.rows import PayloadError, SpanRows
from restorelens.store import COLUMNS

TRACE = "5B8EFFF798038103D269B633813FC60C"
SPAN = "EEE19B7EC3C1B174"


def _one(span: dict[str, Any], resource_attrs: list[Any] | None = None) -> dict[str, Any]:
    rows = SpanRows()
    doc = {"resourceSpans": [{"resource": {"attributes": resource_attrs or []}, "scopeSpans": [{"spans": [span]}]}]}
    decode_traces_json(doc, rows)
    assert rows.errors == []
    return dict(zip(COLUMNS, rows.rows[0], strict=True))


def _span(**extra: Any) -> dict[str, Any]:
    return {"traceId": TRACE, "spanId": SPAN, "name": "s", "startTimeUnixNano": "10", "endTimeUnixNano": "25", **extra}


def test_ids_are_lower_cased_and_times_parse_from_strings_or_numbers() -> None:
    as_strings = _one(_span())
    as_numbers = _one(_span(startTimeUnixNano=10, endTimeUnixNano=25))
    assert as_strings == as_numbers
    assert as_strings["TraceId"] == TRACE.lower() and as_strings["SpanId"] == SPAN.lower()
    assert as_strings["Timestamp"] == 10 and as_strings["Duration"] == 15
    assert as_strings["ParentSpanId"] == "" and as_strings["StatusCode"] == "Unset"


def test_snake_case_keys_and_enum_names_are_accepted() -> None:
    snake = {
        "trace_id": TRACE,
        "span_id": SPAN,
        "parent_span_id": "00f067aa0ba902b7",
        "name": "s",
        "kind": "SPAN_KIND_CLIENT",
        "start_time_unix_nano": "10",
        "end_time_unix_nano": "25",
        "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
    }
    row = _one(snake)
    camel = _one(_span(parentSpanId="00F067AA0BA902B7", kind=3, status={"code": 2, "message": "boom"}))
    assert row == camel
    assert row["SpanKind"] == "Client" and row["StatusCode"] == "Error" and row["StatusMessage"] == "boom"


def test_base64_ids_from_protobufs_own_json_mapping_decode_to_hex() -> None:
    b64_trace = base64.b64encode(bytes.fromhex(TRACE)).decode()
    b64_span = base64.b64encode(bytes.fromhex(SPAN)).decode()
    assert _one(_span(traceId=b64_trace, spanId=b64_span))["TraceId"] == TRACE.lower()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"stringValue": "x"}, "x"),
        ({"intValue": "-42"}, "-42"),
        ({"intValue": 7}, "7"),
        ({"doubleValue": 0.1}, "0.1"),
        ({"doubleValue": 3}, "3.0"),
        ({"doubleValue": "NaN"}, "NaN"),
        ({"boolValue": True}, "true"),
        ({"bool_value": False}, "false"),
        ({"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}, {"boolValue": True}]}}, '["a",1,true]'),
        ({"kvlistValue": {"values": [{"key": "k", "value": {"doubleValue": 1.5}}]}}, '{"k":1.5}'),
        ({"bytesValue": "AQI="}, "AQI="),
        ({}, ""),
    ],
)
def test_attribute_values_are_stringified_like_the_clickhouse_exporter(value: dict[str, Any], expected: str) -> None:
    assert json_value_to_str(value) == expected


def test_service_name_comes_from_the_resource_and_status_may_be_empty() -> None:
    row = _one(_span(status={}), [{"key": SERVICE_NAME, "value": {"stringValue": "unknown_service:python"}}])
    assert row["ServiceName"] == "unknown_service:python"
    assert _one(_span())["ServiceName"] == ""


def test_a_bad_span_is_rejected_alone_with_its_position_and_reason() -> None:
    rows = SpanRows()
    spans = [_span(), _span(spanId="xyz"), _span(spanId="EEE19B7EC3C1B175", startTimeUnixNano="-1")]
    decode_traces_json({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}, rows, "f.jsonl:3: ")
    assert len(rows) == 1 and rows.rejected == 2
    assert rows.errors[0].startswith("f.jsonl:3: resourceSpans[0].scopeSpans[0].spans[1]: spanId 'xyz'")
    assert "startTimeUnixNano" in rows.errors[1]


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ([{"traceId": TRACE}], "found a JSON list"),
        ({"resourceSpans": {"x": 1}}, "resourceSpans must be a list"),
        ({"batches": []}, "legacy"),
    ],
)
def test_a_malformed_envelope_is_a_payload_error(doc: Any, reason: str) -> None:
    with pytest.raises(PayloadError, match=reason):
        decode_traces_json(doc, SpanRows())


def test_an_empty_request_decodes_to_nothing() -> None:
    rows = SpanRows()
    decode_traces_json({}, rows)
    decode_traces_json({"resourceSpans": []}, rows)
    assert len(rows) == 0 and rows.rejected == 0


@pytest.mark.parametrize(("raw", "expected"), [
    (b'{"a":"\\ud800"}', True), (b'{"a":"\\uDFFF"}', True), ("\ud800".encode("utf-8", "surrogatepass"), True),
    (b'{"a":"\\u00e9"}', False), ("é😀".encode(), False), (b'{"name":"gate.request"}', False),
])
def test_text_that_may_decode_to_a_lone_surrogate_is_recognised(raw: bytes, expected: bool) -> None:
    assert may_hold_surrogates(raw) is expected


def test_an_escaped_surrogate_pair_is_one_valid_character_and_is_kept() -> None:
    doc = json.loads('{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c",'
                     '"spanId":"b7ad6b7169203331","name":"smile \\ud83d\\ude00","startTimeUnixNano":"1",'
                     '"endTimeUnixNano":"2"}]}]}]}')
    rows = SpanRows()
    decode_traces_json(doc, rows)
    assert rows.rejected == 0 and rows.rows[0][5] == "smile 😀"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("attributes", [{"key": "a", "value": {"intValue": "--5"}}]),
        ("attributes", [{"key": "a", "value": {"intValue": "9" * 5000}}]),
        ("attributes", [{"key": "a", "value": {"intValue": str(2**63)}}]),
        ("startTimeUnixNano", "1" * 5000),
        ("kind", "9" * 5000),
    ],
    ids=["double sign", "5000 digits", "past int64", "5000-digit time", "5000-digit kind"],
)
def test_a_number_no_int64_holds_rejects_its_span_alone(field: str, value: Any) -> None:
    rows = SpanRows()
    spans = [_span(), _span(spanId="EEE19B7EC3C1B175", **{field: value})]
    decode_traces_json({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}, rows, "f.jsonl:1: ")
    assert len(rows) == 1 and rows.rejected == 1
    assert rows.errors[0].startswith("f.jsonl:1: resourceSpans[0].scopeSpans[0].spans[1]: ")
    assert len(rows.errors[0]) < 200


def test_an_int64_at_either_end_is_kept() -> None:
    row = _one(_span(attributes=[{"key": "lo", "value": {"intValue": str(-(2**63))}},
                                 {"key": "hi", "value": {"intValue": str(2**63 - 1)}}]))
    assert dict(row["SpanAttributes"]) == {"lo": str(-(2**63)), "hi": str(2**63 - 1)}
