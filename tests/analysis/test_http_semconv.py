"""HTTP attempts as opentelemetry-instrumentation-httpx really writes them, in each semconv mode.

At its default the instrumentation writes the older attribute names (``http.status_code``); with
``OTEL_SEMCONV_STABILITY_OPT_IN=http`` the stable ones, with ``http/dup`` both. The mode is read
once per process, so each is recorded in its own interpreter, through restorelens's file exporter,
then loaded as a user would load their own traces.
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
