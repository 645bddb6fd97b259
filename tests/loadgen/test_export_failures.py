"""Runs and probes whose spans could not be exported exit 1 with one line naming where they went."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable

import pytest
from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from restorelens.cli import cli
from restorelens.errors import RestorelensError
from restorelens.loadgen.export_failures import CountingExporter
from restorelens.serving import ServerThread
from restorelens.telemetry import JsonLinesSpanExporter, build_tracer_provider


def refusing_collector() -> Starlette:
    """A collector that refuses every batch with a 400 (not retried by the OTLP exporter)."""
    received: list[int] = []

    async def traces(request: Request) -> Response:
        received.append(len(await request.body()))
        return JSONResponse({"error": "refused"}, 400)

    app = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])
    app.state.received = received
    return app


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed on return: nothing listens there


def test_counting_exporter_counts_failed_batches_and_names_the_destination(tmp_path) -> None:
    inner = JsonLinesSpanExporter(tmp_path / "spans.jsonl")
    counting = CountingExporter(inner, "spans.jsonl")
    provider = build_tracer_provider("t", counting, batch=False)
    provider.get_tracer("t").start_span("one").end()
    counting.raise_if_dropped()  # exported: nothing to say
    inner.shutdown()  # a closed file refuses every later batch
    provider.get_tracer("t").start_span("two").end()
    provider.get_tracer("t").start_span("three").end()
    assert (counting.failed_batches, counting.failed_spans) == (2, 2)
    with pytest.raises(RestorelensError, match=r"^2 span batches \(2 spans\) could not be exported to spans.jsonl$"):
        counting.raise_if_dropped()


def test_run_exits_1_when_the_collector_refuses_the_spans(serve_asgi: Callable[..., ServerThread]) -> None:
    app = refusing_collector()
    url = serve_asgi(app).url
    result = CliRunner().invoke(cli, ["run", "modelclaim-in-place", "--virtual", "--cycles", "1", "--collector", url,
                                      "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["outcomes"] == {"interactive:ok": 2}  # the run itself went well
    assert f"could not be exported to {url}/v1/traces" in result.stderr and app.state.received
    assert "Traceback" not in result.output and len(result.stderr.strip().splitlines()) == 1


def test_run_exits_1_when_the_collector_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.2")  # give up on the dead endpoint soon
    url = f"http://127.0.0.1:{closed_port()}"
    result = CliRunner().invoke(cli, ["run", "modelclaim-in-place", "--virtual", "--collector", url])
    assert result.exit_code == 1
    assert "span batch" in result.stderr and f"could not be exported to {url}/v1/traces" in result.stderr


def test_probe_exits_1_when_its_spans_are_refused(scripted_gateway, serve_asgi: Callable[..., ServerThread]) -> None:
    _, gateway = scripted_gateway((200, {}))
    collector = serve_asgi(refusing_collector()).url
    result = CliRunner().invoke(cli, ["probe", gateway, "--model", "tiny", "--no-stream", "--json",
                                      "--collector", collector])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["outcome"] == "ok"
    assert f"could not be exported to {collector}/v1/traces" in result.stderr


def test_a_good_run_to_a_file_exits_0(tmp_path) -> None:
    out = tmp_path / "spans.jsonl"
    result = CliRunner().invoke(cli, ["run", "modelclaim-in-place", "--virtual", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.stat().st_size > 0 and result.stderr == ""
