"""Malformed protobuf and JSON thrown at a real receiver: never a 5xx, always a 4xx that says why."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from google.protobuf.json_format import ParseDict
from google.rpc import status_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from restorelens.collector.receiver import create_receiver_app
from restorelens.serving import ServerThread

DATA = Path(__file__).parent / "data"
FUZZ = settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

#: Any code point, lone UTF-16 surrogates (category Cs) included: JSON can carry them as "\ud800",
#: and Python decodes them to strings no store can encode.
_any_text = st.text(alphabet=st.characters(exclude_categories=()), max_size=40)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _any_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_any_text, inner, max_size=4),
    max_leaves=20,
)
_keys = st.sampled_from(
    ["traceId", "spanId", "parentSpanId", "name", "kind", "startTimeUnixNano", "endTimeUnixNano", "attributes",
     "events", "links", "status", "resource", "scopeSpans", "spans", "resourceSpans", "value", "intValue",
     "arrayValue", "kvlistValue", "values", "code", "key", "doubleValue", "timeUnixNano", "scope"]
)


def _valid_doc() -> dict[str, Any]:
    return json.loads((DATA / "collector_file_exporter.jsonl").read_text().splitlines()[0])


def _mutate(node: Any, path: list[int], key: str, value: Any) -> Any:
    """Replace (or add) ``key`` in the object found by walking ``path`` through the document."""
    target = node
    for step in path:
        children = [c for c in (target.values() if isinstance(target, dict) else target) if isinstance(c, dict | list)]
        if not children:
            break
        target = children[step % len(children)]
    if isinstance(target, dict):
        target[key] = value
    elif isinstance(target, list):
        target.append(value)
    return node


def _check(answer: httpx.Response) -> None:
    assert answer.status_code < 500, answer.text
    if answer.status_code != 200:
        assert answer.status_code in (400, 413, 415)
        if answer.headers["content-type"] == "application/x-protobuf":
            message = status_pb2.Status.FromString(answer.content).message
        else:
            message = answer.json()["message"]
        assert message.strip()


def test_fuzzed_bodies_get_clear_4xx_answers(tmp_path: Path, serve_asgi: Callable[..., ServerThread]) -> None:
    url = serve_asgi(create_receiver_app(tmp_path / "t.duckdb", writer_options={"idle_release_s": 5.0})).url + "/v1/traces"
    valid_proto = ParseDict(_valid_doc(), ExportTraceServiceRequest(), ignore_unknown_fields=True).SerializeToString()
    with httpx.Client(timeout=30) as client:

        @FUZZ
        @given(body=st.binary(max_size=512), kind=st.sampled_from(["application/x-protobuf", "application/json"]))
        def random_bytes(body: bytes, kind: str) -> None:
            _check(client.post(url, content=body, headers={"content-type": kind}))

        @FUZZ
        @given(cut=st.integers(0, len(valid_proto)), junk=st.binary(max_size=16), flip=st.integers(0, len(valid_proto) - 1))
        def damaged_protobuf(cut: int, junk: bytes, flip: int) -> None:
            body = bytearray(valid_proto[:cut] + junk + valid_proto[cut:])
            body[flip] ^= 0xA5
            _check(client.post(url, content=bytes(body), headers={"content-type": "application/x-protobuf"}))

        @FUZZ
        @given(path=st.lists(st.integers(0, 7), max_size=8), key=_keys, value=_json_values)
        def mutated_json(path: list[int], key: str, value: Any) -> None:
            body = json.dumps(_mutate(_valid_doc(), path, key, value)).encode()
            answer = client.post(url, content=body, headers={"content-type": "application/json"})
            _check(answer)
            if answer.status_code == 200 and "partialSuccess" in answer.json():
                assert answer.json()["partialSuccess"]["errorMessage"].strip()
            # whatever that body held, it harmed no one else: the valid document is still accepted
            assert client.post(url, content=json.dumps(_valid_doc()).encode(),
                               headers={"content-type": "application/json"}).status_code == 200

        random_bytes()
        damaged_protobuf()
        mutated_json()
