"""Real vLLM called directly by a user's own app, as the issue found it: the app's own span with its
own tier attribute, opentelemetry-instrumentation-httpx's ``POST`` at its defaults (the older HTTP
semconv names), vLLM's ``llm_request``. No restorelens client, no gate. The engine view must be
filled in from these spans alone, with vLLM's own queue times.

With ``RESTORELENS_WRITE_VLLM_FIXTURE=PATH`` the recorded spans are also exported to PATH (OTLP
JSON lines, paths into this checkout made relative to it): that is how
``tests/analysis/data/vllm_direct.jsonl`` was made.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from opentelemetry.instrumentation.httpx import AsyncOpenTelemetryTransport
from opentelemetry.sdk.trace import TracerProvider

from restorelens import spans
from restorelens.analysis import Analysis
from restorelens.store import open_read_only
from restorelens.serving import ServerThread

from .conftest import start_vllm, stop_process, wait_for_spans

pytestmark = pytest.mark.live

#: The app's own attribute for its traffic tiers (nothing restorelens knows of).
TIER_ATTRIBUTE = "app.tier"
TIERS = ("gold", "gold", "bronze", "bronze", "bronze")
PROMPT = "the quick brown fox jumps over the lazy dog " * 8


async def _drive(vllm_url: str, provider: TracerProvider) -> list[int]:
    tracer = provider.get_tracer("user-app")
    transport = AsyncOpenTelemetryTransport(httpx.AsyncHTTPTransport(), tracer_provider=provider)
    async with httpx.AsyncClient(transport=transport, timeout=300) as client:

        async def call(tier: str) -> int:
            with tracer.start_as_current_span("chat", attributes={TIER_ATTRIBUTE: tier}):
                answer = await client.post(f"{vllm_url}/v1/completions",
                                           json={"model": "tiny", "prompt": PROMPT, "max_tokens": 32})
                return answer.status_code

        # all at once: with --max-num-seqs 1 vLLM queues them behind each other
        return list(await asyncio.gather(*(call(tier) for tier in TIERS)))


def test_a_users_app_calling_real_vllm_directly_fills_the_engine_view(
    live_python: str, model_dir: str, collector: ServerThread, providers: Callable[[str], TracerProvider],
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the instrumentation's default, whatever the environment running the suite says
    monkeypatch.delenv("OTEL_SEMCONV_STABILITY_OPT_IN", raising=False)
    proc, vllm_url = start_vllm(live_python, model_dir, collector.url, tmp_path / "vllm.log")
    try:
        provider = providers("user-app")
        statuses = asyncio.run(_drive(vllm_url, provider))
        provider.force_flush()
        served = wait_for_spans(store, spans.SPAN_LLM_REQUEST, len(TIERS))
    finally:
        stop_process(proc)
    assert statuses == [200] * len(TIERS)
    assert served == len(TIERS)

    with open_read_only(store) as con:
        vllm_queue = dict(con.execute(
            """select "TraceId", cast("SpanAttributes"[$queue] as double) from otel_traces
               where "SpanName" = $engine""",
            {"queue": spans.ATTR_LATENCY_TIME_IN_QUEUE, "engine": spans.SPAN_LLM_REQUEST},
        ).fetchall())
        old_status = con.execute(
            'select count(*) from otel_traces where "SpanName" = $post and map_contains("SpanAttributes", $old)',
            {"post": spans.SPAN_HTTP_POST, "old": spans.ATTR_HTTP_STATUS_CODE_OLD},
        ).fetchone()[0]
    assert old_status == len(TIERS)  # the instrumentation really wrote the older names
    assert max(vllm_queue.values()) > 0  # vLLM really queued some of them

    with Analysis.open(store, labels={"traffic_class": TIER_ATTRIBUTE}) as analysis:
        attempts = analysis.view("typed_http_attempts")
        engine = analysis.engine_requests()
    assert attempts["status_code"].to_list() == [200] * len(TIERS)
    assert set(attempts["method"].to_list()) == {spans.SPAN_HTTP_POST}
    assert engine.height == len(TIERS)
    assert sorted(engine["traffic_class"].to_list()) == sorted(TIERS)
    assert dict(zip(engine["trace_id"], engine["queue_s"], strict=True)) == vllm_queue
    assert set(engine["attempt_source"].to_list()) == {"client"}
    assert engine["policy"].null_count() == len(TIERS)
    assert set(engine["schedule_point"].to_list()) == {"upper"}
    # the attempt starts before vLLM's arrival, so the delay is at least vLLM's queue time
    assert (engine["schedule_delay_lower_s"] >= engine["queue_s"]).all()
    assert (engine["schedule_delay_upper_s"] >= engine["schedule_delay_lower_s"]).all()

    fixture = os.environ.get("RESTORELENS_WRITE_VLLM_FIXTURE")
    if fixture:
        from restorelens.collector.export import export_otlp_jsonl

        export_otlp_jsonl(store, fixture, overwrite=True)
        # vLLM's start-up spans name its source files (code.filepath) by where this checkout is:
        # the committed fixture names them relative to the repository instead
        root = str(Path(__file__).resolve().parents[2]) + os.sep
        text = Path(fixture).read_text(encoding="utf-8")
        Path(fixture).write_text(text.replace(json.dumps(root)[1:-1], ""), encoding="utf-8")
