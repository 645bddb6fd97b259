"""The lifecycle's process backend cold-starts real vLLM on demand: the first request gets 503 +
Retry-After, readiness is observed after /health answers, the retry succeeds, and the wake episode
is decomposed from spans alone."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider

from restorelens import spans
from restorelens.analysis import Analysis
from restorelens.gate import GateSettings, create_gate_app
from restorelens.loadgen import ClientRequest, RunLabels, TracedClient
from restorelens.loadgen.retry import make_policy
from restorelens.serving import ServerThread

from .conftest import VLLM_START_TIMEOUT_S, vllm_argv, vllm_env, wait_for_spans

pytestmark = pytest.mark.live

NOT_READY_RETRY_AFTER_S = 10


def _modelclaim_table(live_python: str, model_dir: str, collector_url: str) -> dict:
    argv = vllm_argv(live_python, model_dir, host="{host}", port="{port}", served_name="{model}")
    argv += ["--otlp-traces-endpoint", f"{collector_url}/v1/traces"]
    return {
        "policy": {"sleepAfterSeconds": 3600},
        "retry_after": {"not_ready_s": NOT_READY_RETRY_AFTER_S},
        "poll_interval_s": 0.5,
        "start_timeout_s": VLLM_START_TIMEOUT_S,
        "pods": [{"name": "pod-1", "gpus": ["24Gi"]}],
        "claims": [
            {
                "model": "tiny",
                "perGPU": {"maximumFootprint": "2Gi", "kvFloor": "1Gi"},
                "command": argv,
                "env": {k: v for k, v in vllm_env().items() if k not in os.environ or os.environ[k] != v},
            }
        ],
    }


class _EngineFailures:
    """A lifecycle listener that ends the test as soon as an engine start fails.

    A failed start is retried with backoff and the client keeps polling its 503s, so without this
    an engine that refuses to start (say, vLLM's KV sizing) would only show as the client's
    deadline running out, minutes later, without vLLM's reason.
    """

    def __init__(self) -> None:
        # Set on the gate's server thread, waited on by the client's loop.
        self.failed = threading.Event()
        self.error = ""

    async def wait(self) -> None:
        while not self.failed.is_set():
            await asyncio.sleep(0.2)

    def on_state_interval(self, interval) -> None:  # noqa: ANN001 - the LifecycleListener protocol
        pass

    def on_wake_finished(self, record) -> None:  # noqa: ANN001
        if record.outcome != "ready" and not self.failed.is_set():
            self.error = f"{record.outcome}: {record.error}"
            self.failed.set()


def _engine_pids() -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"vllm.entrypoints.openai.api_server" in cmdline and b"{port}" not in cmdline:
                found.add(int(entry.name))
    return found


def test_first_request_cold_starts_real_vllm_and_the_wake_is_decomposed(
    live_python: str, model_dir: str, collector: ServerThread, providers: Callable[[str], TracerProvider],
    store: Path,
) -> None:
    before = _engine_pids()
    gate_provider, client_provider = providers("restorelens-gate"), providers("restorelens-loadgen")
    # The gate builds the lifecycle router from its [modelclaim] settings, as `restorelens gate
    # --config FILE` does.
    settings = GateSettings(modelclaim=_modelclaim_table(live_python, model_dir, collector.url), admin_token="live-admin-token")
    policy = make_policy("honour-retry-after", max_attempts=200, deadline_s=VLLM_START_TIMEOUT_S + 60)
    request = ClientRequest("cold-1", "tiny", "hello there", 8, labels=RunLabels(scenario="live-cold-start"))

    failures = _EngineFailures()
    app = create_gate_app(settings, tracer_provider=gate_provider)
    app.proxy.router.core.listeners.append(failures)

    async def drive(url: str):
        async with TracedClient(url, policy=policy, tracer_provider=client_provider, timeout_s=120) as client:
            answer = asyncio.ensure_future(client.request(request))
            failed = asyncio.ensure_future(failures.wait())
            await asyncio.wait((answer, failed), return_when=asyncio.FIRST_COMPLETED)
            failed.cancel()
            if not answer.done():
                answer.cancel()
                pytest.fail(f"the lifecycle could not start vLLM: {failures.error}", pytrace=False)
            return answer.result()

    try:
        with ServerThread(app) as gate:
            result = asyncio.run(drive(gate.url))
    finally:
        # The router stops the engines it started in the gate's lifespan; make sure nothing is left.
        for pid in _engine_pids() - before:
            os.kill(pid, signal.SIGKILL)
    assert result.statuses[0] == 503 and result.statuses[-1] == 200
    assert len(result.statuses) >= 2
    gate_provider.force_flush()
    client_provider.force_flush()
    assert wait_for_spans(store, spans.SPAN_LLM_REQUEST, 1) == 1

    with Analysis.open(store) as analysis:
        wakes = analysis.wake_episodes()
    assert wakes.height == 1
    wake = wakes.row(0, named=True)
    assert wake["wake_path"] == "cold-start"
    assert wake["first_status"] == 503
    assert wake["retry_after_s"] == NOT_READY_RETRY_AFTER_S
    assert wake["attempts"] == len(result.statuses)
    # Readiness: the engine's first /health 200, then the lifecycle's observation of it.
    assert wake["ready_s"] is not None and wake["observed_s"] is not None
    assert wake["observed_s"] >= wake["ready_s"]
    # The client honoured Retry-After, so its successful attempt came after readiness: overshoot.
    assert wake["overshoot_s"] >= 0
    assert wake["engine_schedule_s"] is not None and wake["engine_schedule_s"] >= 0
    assert wake["total_s"] >= wake["ready_s"]
    assert not wake["censored"]

    # vLLM was started with the wake's TRACEPARENT: its own startup spans are the start's phases.
    assert wake["engine_starts"] == 1 and wake["engine_spans"] >= 12
    assert wake["engine_spans_s"] > 0 and wake["outside_engine_spans_s"] > 0
    engine_ready_s = wake["ready_s"] - wake["process_started_s"]
    assert wake["engine_spans_s"] + wake["outside_engine_spans_s"] == pytest.approx(engine_ready_s, abs=0.05)
    assert not wake["clock_skew"]
    with Analysis.open(store) as analysis:
        phases = analysis.wake_phases()
    assert spans.SPAN_VLLM_OVERALL_LOADING in set(phases["name"]) and spans.SPAN_LLM_REQUEST not in set(phases["name"])
    # The share vLLM's spans cover is a timing (imports before its first span, a warm-up that
    # swings with load): printed here, recorded in benchmarks/RESULTS.md, never asserted.
    print(f"engine ready {engine_ready_s:.2f} s: {wake['engine_spans_share']:.1%} inside vLLM's spans, "
          f"{wake['outside_engine_spans_s']:.2f} s outside")
