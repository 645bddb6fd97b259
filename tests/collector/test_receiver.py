"""The OTLP/HTTP receiver under real uvicorn, fed by the real SDK exporter and by hand-made requests."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable
from http import HTTPMethod
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.rpc import status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from restorelens import spans as S
from restorelens.collector.receiver import create_receiver_app
from restorelens.store import open_read_only
from restorelens.serving import ServerThread

DATA = Path(__file__).parent / "data"
Serve = Callable[..., ServerThread]


def _spans_via_real_exporter(url: str, compression: Compression) -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "round-trip", "pod": 3}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url, compression=compression)))
    tracer = provider.get_tracer("restorelens.test", "9.9")
    # Span and event names imitate the gate's (so they come from the contract); the attribute keys are
    # arbitrary, one per OTLP value type, and "ok" is an arbitrary name for a span with status OK.
    with tracer.start_as_current_span(
        S.SPAN_GATE_REQUEST, kind=SpanKind.SERVER, attributes={"s": "x", "i": -7, "f": 0.25, "b": True, "l": ["a", "b"]}
    ) as root:
        root.add_event(S.EVENT_GRANT_ACQUIRED, {"slot": "own", "n": 2})
        with tracer.start_as_current_span(
            S.SPAN_HTTP_POST, kind=SpanKind.CLIENT, links=[Link(root.get_span_context(), {"why": "restore"})]
        ) as child:
            child.set_status(Status(StatusCode.ERROR, "upstream 503"))
        with tracer.start_as_current_span("ok") as ok:
            ok.set_status(Status(StatusCode.OK))
    provider.shutdown()
    return list(memory.get_finished_spans())


def _expected_attrs(attrs: Any) -> dict[str, str]:
    def one(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, tuple | list):
            return json.dumps(list(v), separators=(",", ":"))
        return repr(v) if isinstance(v, float) else str(v)

    return {k: one(v) for k, v in (attrs or {}).items()}


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip, Compression.Deflate])
def test_round_trip_through_the_real_otlp_http_exporter(
    tmp_path: Path, serve_asgi: Serve, compression: Compression
) -> None:
    db = tmp_path / "t.duckdb"
    server = serve_asgi(create_receiver_app(db))
    spans = _spans_via_real_exporter(server.url + "/v1/traces", compression)
    with open_read_only(db) as con:
        rows = con.execute(
            'select "TraceId", "SpanId", "ParentSpanId", "SpanName", "SpanKind", "ServiceName", "ResourceAttributes",'
            ' "ScopeName", "ScopeVersion", "SpanAttributes", epoch_ns("Timestamp"), "Duration", "StatusCode",'
            ' "StatusMessage", [epoch_ns(t) for t in "Events.Timestamp"], "Events.Name", "Events.Attributes",'
            ' "Links.TraceId", "Links.SpanId", "Links.Attributes" from otel_traces'
        ).fetchall()
    by_id = {row[1]: row for row in rows}
    assert len(by_id) == len(spans) == 3
    kinds = {SpanKind.SERVER: "Server", SpanKind.CLIENT: "Client", SpanKind.INTERNAL: "Internal"}
    for span in spans:
        row = by_id[format(span.context.span_id, "016x")]
        assert row[0] == format(span.context.trace_id, "032x")
        assert row[2] == (format(span.parent.span_id, "016x") if span.parent else "")
        assert row[3:6] == (span.name, kinds[span.kind], "round-trip")
        assert row[6] == _expected_attrs(span.resource.attributes)
        assert row[7:9] == ("restorelens.test", "9.9")
        assert row[9] == _expected_attrs(span.attributes)
        assert (row[10], row[11]) == (span.start_time, span.end_time - span.start_time)
        assert (row[12], row[13]) == (span.status.status_code.name.title(), span.status.description or "")
        assert row[14] == [e.timestamp for e in span.events]
        assert row[15] == [e.name for e in span.events]
        assert row[16] == [_expected_attrs(e.attributes) for e in span.events]
        assert row[17] == [format(link.context.trace_id, "032x") for link in span.links]
        assert row[18] == [format(link.context.span_id, "016x") for link in span.links]
        assert row[19] == [_expected_attrs(link.attributes) for link in span.links]


def test_otlp_json_with_every_quirk_is_accepted_and_partial_success_names_the_bad_span(
    tmp_path: Path, serve_asgi: Serve
) -> None:
    server = serve_asgi(create_receiver_app(tmp_path / "t.duckdb"))
    doc = json.loads((DATA / "otlp_example_trace.json").read_text())
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append({"traceId": "nothex", "spanId": "EEE19B7EC3C1B175"})
    answer = httpx.post(server.url + "/v1/traces", content=json.dumps(doc), headers={"content-type": "application/json"})
    assert answer.status_code == 200
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "spans[1]: traceId 'nothex'" in partial["errorMessage"]
    full = httpx.post(
        server.url + "/v1/traces",
        content=(DATA / "collector_file_exporter.jsonl").read_text().splitlines()[0],
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert (full.status_code, full.json()) == (200, {})


def _post(url: str, body: bytes, **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/traces", content=body, headers=headers)


def test_error_answers_follow_the_otlp_http_spec(tmp_path: Path, serve_asgi: Serve) -> None:
    url = serve_asgi(create_receiver_app(tmp_path / "t.duckdb", max_body_bytes=10_000)).url
    bad_proto = _post(url, b"\xff\xff\xff", **{"content-type": "application/x-protobuf"})
    assert bad_proto.status_code == 400 and bad_proto.headers["content-type"] == "application/x-protobuf"
    status = status_pb2.Status.FromString(bad_proto.content)
    assert status.code == 3 and "ExportTraceServiceRequest" in status.message
    bad_json = _post(url, b"[1]", **{"content-type": "application/json"})
    assert bad_json.status_code == 400 and "found a JSON list" in bad_json.json()["message"]
    assert _post(url, b"{}", **{"content-type": "text/plain"}).status_code == 415
    assert _post(url, b"{}", **{"content-type": "application/json", "content-encoding": "br"}).status_code == 415
    assert _post(url, b"x" * 10_001, **{"content-type": "application/json"}).status_code == 413
    corrupt = _post(url, b"\x1f\x8b garbage", **{"content-type": "application/json", "content-encoding": "gzip"})
    assert corrupt.status_code == 400 and "compressed" in corrupt.json()["message"]
    get = httpx.get(url + "/v1/traces")
    assert get.status_code == 405 and get.headers["allow"] == HTTPMethod.POST and get.json()["code"] == 12
    assert httpx.post(url + "/v1/metrics", content=b"{}").status_code == 404
    empty = _post(url, b"", **{"content-type": "application/x-protobuf"})
    assert empty.status_code == 200 and not ExportTraceServiceResponse.FromString(empty.content).HasField("partial_success")


def test_a_gzip_bomb_is_refused_with_413_without_inflating_it(tmp_path: Path, serve_asgi: Serve) -> None:
    url = serve_asgi(create_receiver_app(tmp_path / "t.duckdb", max_body_bytes=1 << 20)).url
    bomb = gzip.compress(b"\0" * (64 << 20), compresslevel=9)  # 64 MiB of zeros in ~64 KiB
    assert len(bomb) < 1 << 20
    answer = _post(url, bomb, **{"content-type": "application/x-protobuf", "content-encoding": "gzip"})
    assert answer.status_code == 413
    assert "decompressed" in status_pb2.Status.FromString(answer.content).message
    deflate_bomb = zlib.compress(b"{" * (16 << 20), 9)
    assert _post(url, deflate_bomb, **{"content-type": "application/json", "content-encoding": "deflate"}).status_code == 413


def test_bearer_token_is_required_when_set(tmp_path: Path, serve_asgi: Serve) -> None:
    url = serve_asgi(create_receiver_app(tmp_path / "t.duckdb", token="s3cret")).url
    line = (DATA / "collector_file_exporter.jsonl").read_text().splitlines()[0]
    refused = _post(url, line.encode(), **{"content-type": "application/json"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    ok = _post(url, line.encode(), **{"content-type": "application/json", "authorization": "Bearer s3cret"})
    assert ok.status_code == 200


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_auth_scheme_is_case_insensitive(tmp_path: Path, serve_asgi: Serve, scheme: str) -> None:
    # RFC 7235 section 2.1: the scheme is case-insensitive (some clients send "bearer"); the token is not
    url = serve_asgi(create_receiver_app(tmp_path / "t.duckdb", token="s3cret-token")).url
    line = (DATA / "collector_file_exporter.jsonl").read_text().splitlines()[0]
    ok = _post(url, line.encode(), **{"content-type": "application/json", "authorization": f"{scheme} s3cret-token"})
    assert ok.status_code == 200, ok.text
    for wrong in (f"{scheme} S3CRET-TOKEN", f"{scheme} s3cret-tok", "Basic s3cret-token", "s3cret-token",
                  f"{scheme}s3cret-token", f"{scheme} s3cret-token extra"):
        refused = _post(url, line.encode(), **{"content-type": "application/json", "authorization": wrong})
        assert refused.status_code == 401, wrong


def _one_span_doc(name: str, span_id: str, attributes: dict[str, str] | None = None) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {"attributes": [{"key": SERVICE_NAME, "value": {"stringValue": "svc"}}]},
                               "scopeSpans": [{"scope": {"name": "s"}, "spans": [{
                                   "traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": span_id, "name": name,
                                   "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                                   "attributes": [{"key": k, "value": {"stringValue": v}}
                                                  for k, v in (attributes or {}).items()]}]}]}]}


def test_a_negative_zero_double_keeps_its_sign(tmp_path: Path, serve_asgi: Serve) -> None:
    # Go's encoder writes the double -0.0 as `-0`; the protobuf path and the loader's store "-0.0"
    db = tmp_path / "t.duckdb"
    server = serve_asgi(create_receiver_app(db))
    doc = json.dumps(_one_span_doc("s", "a000000000000001", {"d": "x"}))
    body = doc.replace('{"stringValue": "x"}', '{"doubleValue": -0}')
    assert _post(server.url, body.encode(), **{"content-type": "application/json"}).status_code == 200
    with open_read_only(db) as con:
        assert con.execute("""select "SpanAttributes"['d'] from otel_traces""").fetchall() == [("-0.0",)]


def test_a_lone_surrogate_is_rejected_alone_and_poisons_no_other_request(tmp_path: Path, serve_asgi: Serve) -> None:
    # JSON may escape a lone UTF-16 surrogate ("\ud800"); it decodes to a string that is no Unicode.
    # Left in a commit batch it failed every request of the batch with 503 (59 of 60 concurrent ones).
    import concurrent.futures

    db = tmp_path / "spans.duckdb"
    url = serve_asgi(create_receiver_app(db)).url + "/v1/traces"
    bad = [_one_span_doc("bad\ud800", "a0000000000000a0"), _one_span_doc("ok", "a0000000000000a1", {"k\udfff": "v"}),
           _one_span_doc("ok", "a0000000000000a2", {"k": "v\ud83d"})]
    good = [_one_span_doc(f"good-{i}", f"b{i:015x}") for i in range(40)]

    def post(doc: dict[str, Any]) -> httpx.Response:
        return httpx.post(url, content=json.dumps(doc).encode(), headers={"content-type": "application/json"},
                          timeout=30)

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(post, good[:20] + bad + good[20:]))
    for doc, answer in zip(good[:20] + bad + good[20:], answers, strict=True):
        assert answer.status_code == 200, answer.text
        partial = answer.json().get("partialSuccess", {})
        if doc in bad:
            assert partial["rejectedSpans"] == "1" and "lone surrogate" in partial["errorMessage"]
        else:
            assert not partial.get("rejectedSpans")
    with open_read_only(db) as con:
        names = {row[0] for row in con.execute('select "SpanName" from otel_traces').fetchall()}
    assert names == {f"good-{i}" for i in range(40)}


def test_oversize_heads_get_431_and_every_refusal_and_span_is_counted_on_metrics(tmp_path: Path, serve_asgi: Serve) -> None:
    server = serve_asgi(create_receiver_app(tmp_path / "s.duckdb", max_body_bytes=4096, max_header_bytes=2048))
    url = server.url + "/v1/traces"
    head = httpx.post(url, content=b"{}", headers={"content-type": "application/json", "x-pad": "p" * 3000})
    assert head.status_code == 431
    assert head.json() == {"code": 11, "message": "request line and headers exceed 2048 bytes", "details": []}
    body = httpx.post(url, content=b"{" + b" " * 5000 + b"}", headers={"content-type": "application/json"})
    assert body.status_code == 413
    good = json.loads((DATA / "collector_file_exporter.jsonl").read_text().splitlines()[0])
    assert httpx.post(url, json=good).status_code == 200
    metrics = httpx.get(server.url + "/metrics").text
    stored = sum(len(s["spans"]) for r in good["resourceSpans"] for s in r["scopeSpans"])
    assert f"restorelens_collector_spans_stored_total {float(stored)}" in metrics
    assert 'restorelens_collector_refused_total{limit="max_header_bytes"} 1.0' in metrics
    assert 'restorelens_collector_refused_total{limit="max_body_bytes"} 1.0' in metrics


def _request_with_bad_utf8(spans: int, bad: set[int], where: str = "span") -> bytes:
    """A protobuf request of ``spans`` spans, those in ``bad`` with a name that is not UTF-8 (or,
    ``where="resource"``, a second resource holding them whose attribute is not)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    good_rs = request.resource_spans.add()
    good_rs.resource.attributes.add(key=SERVICE_NAME).value.string_value = "svc"
    other_rs = good_rs
    if where == "resource":
        other_rs = request.resource_spans.add()
        other_rs.resource.attributes.add(key=SERVICE_NAME).value.string_value = "BADRES"
    for i in range(spans):
        scope = (other_rs if i in bad else good_rs).scope_spans.add()
        scope.scope.name = "s"
        span = scope.spans.add(trace_id=bytes.fromhex("0af7651916cd43dd8448eb211c80319c"),
                               span_id=(i + 1).to_bytes(8, "big"), start_time_unix_nano=1, end_time_unix_nano=2)
        span.name = f"BADNAME{i}" if i in bad and where == "span" else f"good-{i}"
    body = request.SerializeToString()
    return body.replace(b"BADNAME", b"\xffADNAME").replace(b"BADRES", b"\xc3(DRES")


@pytest.mark.parametrize("where", ["span", "resource"])
def test_a_protobuf_span_not_utf8_is_rejected_alone_with_partial_success(
    tmp_path: Path, serve_asgi: Serve, where: str
) -> None:
    db = tmp_path / "t.duckdb"
    url = serve_asgi(create_receiver_app(db)).url
    answer = _post(url, _request_with_bad_utf8(10, {3}, where), **{"content-type": "application/x-protobuf"})
    assert answer.status_code == 200, answer.content
    partial = ExportTraceServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_spans == 1 and "not UTF-8" in partial.error_message
    assert ("resource: " in partial.error_message) == (where == "resource")
    with open_read_only(db) as con:
        names = {row[0] for row in con.execute('select "SpanName" from otel_traces').fetchall()}
    assert names == {f"good-{i}" for i in range(10) if i != 3}
