"""The gate's native CLIENT span is what opentelemetry-instrumentation-httpx writes for the same call.

Each semantic-convention mode is recorded in its own interpreter (the instrumentation reads
``OTEL_SEMCONV_STABILITY_OPT_IN`` once per process). There a real gate (uvicorn on loopback) calls a
real engine stand-in that answers 200, 503 or 404, and a gate whose engine does not listen answers
502; the same calls are then made through the instrumentation (``AsyncOpenTelemetryTransport`` over
the gate's own connection pool) under a parent span. The spans are compared field by field: name,
kind, every attribute, status and its description, the events and their attributes (a stack trace
differs by construction and is only checked present), and the parent. The engine must also have
received the CLIENT span's own traceparent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from restorelens import spans as S
from restorelens.gate.upstream_spans import SemconvMode, UpstreamSpans, semconv_mode

RECORD = textwrap.dedent("""
    import json, socket, sys
    import uvloop
    import httpx
    from opentelemetry.instrumentation.httpx import AsyncOpenTelemetryTransport
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from restorelens.gate import GateSettings, create_gate_app
    from restorelens.gate.upstream_transport import UpstreamTransport
    from restorelens.serving import ServerThread

    received = []
    async def completions(request):
        received.append(request.headers.get("traceparent"))
        status = (await request.json())["answer"]
        return JSONResponse({"id": "x"}, status)
    engine_app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])

    def closed_port():
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    def body(answer):
        return json.dumps({"model": "tiny", "prompt": "x", "answer": answer}).encode()

    def record(side, case, clients):
        spans = {s.context.span_id: s for s in exporter.get_finished_spans()}
        calls = [s for s in spans.values() if s.kind is SpanKind.CLIENT]
        assert len(calls) == 1, [s.name for s in spans.values()]
        call = calls[0]
        parent = spans.get(call.parent.span_id) if call.parent else None
        out = {
            "side": side, "case": case, "name": call.name, "kind": call.kind.name,
            "attributes": dict(call.attributes),
            "status": [call.status.status_code.name, call.status.description],
            "events": [[e.name, dict(e.attributes)] for e in call.events],
            "parent": parent.name if parent else None,
            "same_trace": bool(parent) and parent.context.trace_id == call.context.trace_id,
            "traceparent_sent": received[-1] if clients else None,
            "traceparent_own": f"00-{call.context.trace_id:032x}-{call.context.span_id:016x}-{int(call.context.trace_flags):02x}",
            "duration_ns": call.end_time - call.start_time,
        }
        exporter.clear()
        return out

    async def through_instrumentation(url, payload):
        transport = AsyncOpenTelemetryTransport(UpstreamTransport(), tracer_provider=provider)
        tracer = provider.get_tracer("reference")
        with tracer.start_as_current_span("gate.request", kind=SpanKind.SERVER):
            request = httpx.Request("POST", url, content=payload, headers={"content-type": "application/json"})
            try:
                response = await transport.handle_async_request(request)
                await response.aread()
            except httpx.HTTPError:
                pass
        await transport.aclose()

    out = []
    with ServerThread(engine_app) as engine:
        dead = f"http://127.0.0.1:{closed_port()}"
        for case, upstream, answer in [("200", engine.url, 200), ("503", engine.url, 503),
                                        ("404", engine.url, 404), ("refused", dead, 200)]:
            settings = GateSettings(upstreams={"*": upstream}, policy="fcfs", tracing=True)
            with ServerThread(create_gate_app(settings, tracer_provider=provider)) as gate:
                with httpx.Client() as client:
                    client.post(gate.url + "/v1/completions", content=body(answer))
            out.append(record("gate", case, upstream == engine.url))
            # on the loop the gate's server runs (uvicorn picks uvloop): the same error texts
            uvloop.run(through_instrumentation(upstream + "/v1/completions", body(answer)))
            out.append(record("instrumentation", case, upstream == engine.url))
    print(json.dumps(out))
""")

CASES = ("200", "503", "404", "refused")


def _record(mode: str) -> dict[tuple[str, str], dict]:
    env = {**os.environ, "OTEL_SEMCONV_STABILITY_OPT_IN": mode}
    done = subprocess.run([sys.executable, "-c", RECORD], env=env, check=True, timeout=120, capture_output=True, text=True)
    return {(span["side"], span["case"]): span for span in json.loads(done.stdout.splitlines()[-1])}


@pytest.fixture(scope="module", params=["", "http", "http/dup"], ids=["default", "stable", "both"])
def recorded(request: pytest.FixtureRequest) -> tuple[str, dict[tuple[str, str], dict]]:
    return request.param, _record(request.param)


def _comparable(span: dict) -> dict:
    events = []
    for name, attributes in span["events"]:
        # the stack trace is where each was raised: different frames by construction
        assert attributes.pop("exception.stacktrace", "present")
        events.append([name, attributes])
    keep = ("name", "kind", "attributes", "status", "parent", "same_trace")
    return {**{k: span[k] for k in keep}, "events": events}


@pytest.mark.parametrize("case", CASES)
def test_the_gate_writes_the_span_the_instrumentation_writes(recorded, case: str) -> None:
    _, spans = recorded
    native, reference = spans[("gate", case)], spans[("instrumentation", case)]
    assert _comparable(native) == _comparable(reference)
    assert native["parent"] == S.SPAN_GATE_REQUEST and native["same_trace"]
    assert native["duration_ns"] > 0


def test_each_mode_writes_its_own_names(recorded) -> None:
    mode, spans = recorded
    attributes = spans[("gate", "503")]["attributes"]
    assert (S.ATTR_HTTP_STATUS_CODE_OLD in attributes) == (mode != "http")
    assert (S.ATTR_HTTP_STATUS_CODE in attributes) == (mode != "")
    assert (attributes.get(S.ATTR_ERROR_TYPE) == "503") == (mode != "")
    refused = spans[("gate", "refused")]
    assert refused["status"][0] == "ERROR" and refused["status"][1].startswith("ConnectError")
    assert [name for name, _ in refused["events"]] == ["exception"]


def test_the_engine_receives_the_calls_own_traceparent(recorded) -> None:
    _, spans = recorded
    for case in ("200", "503", "404"):
        assert spans[("gate", case)]["traceparent_sent"] == spans[("gate", case)]["traceparent_own"]


@pytest.mark.parametrize(("value", "mode"), [
    ("", SemconvMode.OLD), ("http", SemconvMode.STABLE), ("http/dup", SemconvMode.BOTH),
    ("database, http", SemconvMode.STABLE), ("http,http/dup", SemconvMode.BOTH), ("HTTP", SemconvMode.STABLE),
    ("gen_ai_latest_experimental", SemconvMode.OLD),
])
def test_the_mode_is_read_as_the_instrumentations_read_it(value: str, mode: SemconvMode) -> None:
    assert semconv_mode({"OTEL_SEMCONV_STABILITY_OPT_IN": value}) is mode


def test_request_attributes_are_built_once_per_url() -> None:
    from opentelemetry.trace import NoOpTracerProvider

    spans = UpstreamSpans(NoOpTracerProvider().get_tracer("t"), SemconvMode.STABLE)
    first = spans.request_attributes("POST", "http://user:secret@engine:8000/v1/completions")
    assert spans.request_attributes("POST", "http://user:secret@engine:8000/v1/completions") is first
    assert "secret" not in first[S.ATTR_URL_FULL]  # credentials never reach a span
    assert first[S.ATTR_SERVER_PORT] == 8000 and first[S.ATTR_SERVER_ADDRESS] == "engine"
    assert S.ATTR_SERVER_PORT not in spans.request_attributes("POST", "http://engine/v1/completions")


def _carriers(spans: UpstreamSpans, parent_context: object | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """(the headers ``start`` gives, the headers the global propagator writes for that same span)."""
    from opentelemetry import context, propagate, trace

    token = context.attach(parent_context) if parent_context is not None else None
    try:
        parent = trace.get_current_span() if parent_context is not None else trace.INVALID_SPAN
        span, carried = spans.start(parent, "POST", "http://engine:8000/v1/completions", 1.0)
        expected: dict[str, str] = {}
        propagate.inject(expected, context=trace.set_span_in_context(span))
        return carried, expected
    finally:
        if token is not None:
            context.detach(token)


def test_the_trace_headers_are_the_global_propagators(monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry import baggage, propagate, trace
    from opentelemetry.propagators.composite import CompositePropagator
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    spans = UpstreamSpans(TracerProvider().get_tracer("t"), SemconvMode.STABLE)
    carried, expected = _carriers(spans)
    assert carried == expected and set(carried) == {"traceparent"}
    # a caller's trace state travels on
    remote = TraceContextTextMapPropagator().extract(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"})
    carried, expected = _carriers(spans, remote)
    assert carried == expected and carried["tracestate"] == "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    assert carried["traceparent"].startswith("00-0af7651916cd43dd8448eb211c80319c-")
    # baggage in the context: the propagators write it too
    carried, expected = _carriers(spans, baggage.set_baggage("tenant", "a b", remote))
    assert carried == expected and "baggage" in carried
    # a propagator the user chose is used as it is
    only_w3c = CompositePropagator([TraceContextTextMapPropagator()])
    monkeypatch.setattr(propagate, "_HTTP_TEXT_FORMAT", only_w3c)
    assert propagate.get_global_textmap() is only_w3c
    carried, expected = _carriers(spans, baggage.set_baggage("tenant", "a", remote))
    assert carried == expected and "baggage" not in carried
