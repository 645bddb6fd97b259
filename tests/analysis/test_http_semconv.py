"""HTTP attempts as opentelemetry-instrumentation-httpx really writes them, in each semconv mode.

At its default the instrumentation writes the older attribute names (``http.status_code``); with
``OTEL_SEMCONV_STABILITY_OPT_IN=http`` the stable ones, with ``http/dup`` both. The mode is read
once per process, so each is recorded in its own interpreter, through restorelens's file exporter,
then loaded as a user would load their own traces.

The second recording is a user's own app as the issue found it: its own span ("chat", with its
own tier attribute), the instrumentation's ``POST`` under it, and an engine answering with vLLM's
``llm_request`` span (the simulator, which writes vLLM's attributes; the live suite does the same
with real vLLM) — no restorelens client, no gate.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from restorelens import spans as sc
from restorelens.analysis import Analysis
from restorelens.collector import load_paths

#: The HTTP method, which the instrumentation also names its span after.
POST = sc.SPAN_HTTP_POST

RECORD = textwrap.dedent("""
    import sys, httpx
    from opentelemetry.instrumentation.httpx import SyncOpenTelemetryTransport
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route
    from restorelens.serving import ServerThread
    from restorelens.telemetry import build_tracer_provider
    answers = iter([503, 200])
    async def completions(request):
        return JSONResponse({}, next(answers), headers={"retry-after": "1"})
    provider = build_tracer_provider("app", "file", path=sys.argv[1])
    with ServerThread(Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])) as server:
        transport = SyncOpenTelemetryTransport(httpx.HTTPTransport(), tracer_provider=provider)
        with httpx.Client(transport=transport) as client:
            for _ in range(2):
                client.post(server.url + "/v1/completions", json={"model": "tiny", "prompt": "x"})
    provider.shutdown()
""")


@pytest.mark.parametrize("mode", ["", "http", "http/dup"], ids=["default (old names)", "stable", "both"])
def test_every_semconv_mode_gives_the_attempts_their_status(tmp_path: Path, mode: str) -> None:
    trace_file = tmp_path / "app.jsonl"
    env = {**os.environ, "OTEL_SEMCONV_STABILITY_OPT_IN": mode}
    subprocess.run([sys.executable, "-c", RECORD, str(trace_file)], env=env, check=True, timeout=120)
    written = trace_file.read_text()
    # the fixture is what the instrumentation wrote in this mode, not what we assumed it writes
    assert (f'"{sc.ATTR_HTTP_STATUS_CODE_OLD}"' in written) == (mode != "http")
    assert (f'"{sc.ATTR_HTTP_STATUS_CODE}"' in written) == (mode != "")
    db = tmp_path / "s.duckdb"
    load_paths([trace_file], db)
    attempts = Analysis.open(db).view("typed_http_attempts").sort("start_ns")
    assert attempts["status_code"].to_list() == [503, 200]
    assert attempts["method"].to_list() == [POST, POST]
    assert all(url.endswith("/v1/completions") for url in attempts["url"].to_list())


USER_APP = textwrap.dedent("""
    import sys, httpx
    from opentelemetry.instrumentation.httpx import SyncOpenTelemetryTransport
    from restorelens.serving import ServerThread
    from restorelens.sim.app import create_app
    from restorelens.telemetry import build_tracer_provider
    app_provider = build_tracer_provider("user-app", "file", path=sys.argv[1])
    engine_provider = build_tracer_provider("unknown_service:python", "file", path=sys.argv[2])
    tracer = app_provider.get_tracer("user-app")
    with ServerThread(create_app("tiny-cpu", model_name="tiny", tracer_provider=engine_provider,
                                 time_scale=20.0)) as engine:
        transport = SyncOpenTelemetryTransport(httpx.HTTPTransport(), tracer_provider=app_provider)
        with httpx.Client(transport=transport, timeout=60) as client:
            for tier in ("gold", "bronze", "gold"):
                with tracer.start_as_current_span("chat", attributes={"app.tier": tier}):
                    answer = client.post(engine.url + "/v1/completions",
                                         json={"model": "tiny", "prompt": "hello there", "max_tokens": 4})
                    assert answer.status_code == 200, answer.text
    app_provider.shutdown()
    engine_provider.shutdown()
""")


@pytest.mark.parametrize("mode", ["", "http", "http/dup"], ids=["default (old names)", "stable", "both"])
def test_a_users_own_app_calling_the_engine_directly_fills_the_engine_view(tmp_path: Path, mode: str) -> None:
    app_file, engine_file = tmp_path / "app.jsonl", tmp_path / "engine.jsonl"
    env = {**os.environ, "OTEL_SEMCONV_STABILITY_OPT_IN": mode}
    subprocess.run([sys.executable, "-c", USER_APP, str(app_file), str(engine_file)], env=env, check=True,
                   timeout=120)
    db = tmp_path / "s.duckdb"
    load_paths([app_file, engine_file], db)
    with Analysis.open(db, labels={"traffic_class": "app.tier"}) as analysis:
        attempts = analysis.view("typed_http_attempts")
        assert attempts["status_code"].to_list() == [200, 200, 200]
        assert set(attempts["method"].to_list()) == {POST}
        engine = analysis.engine_requests()
    assert engine.height == 3
    assert sorted(engine["traffic_class"].to_list()) == ["bronze", "gold", "gold"]
    assert set(engine["attempt_source"].to_list()) == {"client"}
    assert engine["policy"].null_count() == 3  # no gate, no arm: no policy
    # the attempt starts before the engine's arrival, and the engine schedules after arrival
    assert (engine["schedule_delay_s"] >= engine["queue_s"]).all()
    assert engine["ttft_s"].is_not_null().all() and engine["prefill_s"].is_not_null().all()
