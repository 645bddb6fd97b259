"""Live (issue #20): the gate and its lifecycle attached to a simulator that is already asleep, and
the probe's readiness against a waking one; real servers on loopback.

vLLM and the simulator answer /health 200 while asleep. Judged by /health, the lifecycle marked
such an engine Active and every request got the engine's own 503, and the probe reported a wake
ready at its first poll.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from click.testing import CliRunner

from restorelens.analysis import Analysis
from restorelens.cli import cli
from restorelens.collector.store import SpanStore, store_spans
from restorelens.gate.app import create_gate_app
from restorelens.gate.settings import GateSettings
from restorelens.loadgen.client import TracedClient
from restorelens.loadgen.request import ClientRequest, RequestResult
from restorelens.loadgen.retry import make_policy
from restorelens.serving import ServerThread
from restorelens.sim.app import create_app
from restorelens.sim.config import get_preset
from restorelens.spans import ATTR_MODELCLAIM_WAKE_PATH, EVENT_ENGINE_READY, SPAN_HTTP_POST, SPAN_MODELCLAIM_WAKE

from .test_http import wait_for

MODEL = "m"


def lifecycle_table(engine_url: str) -> dict[str, Any]:
    """One claim attached to ``engine_url``; no idle sleep during the test, quick polls."""
    return {
        "policy": {"sleepAfterSeconds": 3600},
        "poll_interval_s": 0.02,
        "pods": [{"name": "p1", "gpus": ["24Gi"]}],
        "claims": [{"model": MODEL, "perGPU": {"maximumFootprint": "10Gi", "kvFloor": "4Gi"}, "weights": "1Gi",
                    "engine_url": engine_url}],
    }


def status_of(gate_url: str) -> dict[str, Any]:
    models = httpx.get(f"{gate_url}/modelclaim/status", timeout=10.0).json()["models"]
    return {m["model"]: m for m in models}[MODEL]


def gate_in_front_of_a_sleeping_sim(serve_asgi: Callable[..., ServerThread], tracer_provider: Any,
                                    hints: dict[str, Any] | None = None,
                                    **sim_config: float) -> tuple[ServerThread, ServerThread]:
    """The simulator started asleep, and a gate whose lifecycle attached to it (once it reports the
    claim's phase: the attach has answered); ``hints``: more keys of its ``[modelclaim]`` table."""
    config = dataclasses.replace(get_preset("tiny-cpu"), **sim_config)
    sim = serve_asgi(create_app(config, model_name=MODEL, enable_sleep_mode=True, start_mode="asleep",
                                tracer_provider=tracer_provider))
    gate = serve_asgi(create_gate_app(GateSettings(modelclaim={**lifecycle_table(sim.url), **(hints or {})}),
                                     tracer_provider=tracer_provider))
    wait_for(lambda: status_of(gate.url)["phase"] not in ("Pending", "Scheduling", "Loading"), "the attach")
    return sim, gate


def test_a_lifecycle_attached_to_a_sleeping_engine_wakes_it_on_the_first_request(
        serve_asgi, tracer_provider, span_exporter, tmp_path: Path) -> None:  # noqa: ANN001
    sim, gate = gate_in_front_of_a_sleeping_sim(serve_asgi, tracer_provider)
    attached = status_of(gate.url)
    assert (attached["phase"], attached["reason"]) == ("Sleeping", "EngineSleeping")
    assert httpx.get(f"{sim.url}/is_sleeping").json() == {"is_sleeping": True}  # the attach woke nothing

    async def first_request() -> RequestResult:
        # Retries every 0.05 s instead of honouring the 10-s hint: the wake is what is timed, not the client.
        policy = make_policy("fixed", interval_s=0.05, max_attempts=400, deadline_s=20.0)
        async with TracedClient(gate.url, policy=policy, tracer_provider=tracer_provider) as client:
            return await client.request(ClientRequest("attach-1", MODEL, "x" * 40, 4, stream=False))

    result = asyncio.run(first_request())
    assert result.outcome == "ok" and result.statuses[0] == 503 and result.statuses[-1] == 200, result.statuses
    assert result.attempts[0].retry_after.seconds == 10  # the lifecycle's answer, not the engine's
    assert status_of(gate.url)["phase"] == "Active"
    gate.stop()  # the lifecycle ends its spans; a wake still open would be recorded censored now
    sim.stop()

    db = tmp_path / "spans.duckdb"
    with SpanStore(db) as store:
        store_spans(store, span_exporter.get_finished_spans())
    with Analysis.open(db) as analysis:
        wakes = analysis.wake_episodes()
    # one wake: the request's, of the sleeping engine in place; the attach itself is none
    assert wakes.select("wake_path", "first_status", "served", "censored").rows() == [("in-place", 503, True, False)]
    check = CliRunner().invoke(cli, ["check", "--db", str(db), "--max", "wake.censored.count=0"])
    assert check.exit_code == 0, check.output


def test_the_probe_reports_ready_when_the_engine_is_awake_not_when_its_health_says_200(
        serve_asgi, tracer_provider, span_exporter, tmp_path: Path) -> None:  # noqa: ANN001
    # A wake of about a second (the 0.97 s), so a probe reading /health's 200 would report
    # ready about a second before the engine was.
    sim, gate = gate_in_front_of_a_sleeping_sim(serve_asgi, tracer_provider, wake_fixed_s=1.0)
    assert status_of(gate.url)["phase"] == "Sleeping"
    out = tmp_path / "probe.jsonl"
    probed = CliRunner().invoke(cli, [
        "probe", gate.url, "--model", MODEL, "--readiness-url", f"{sim.url}/health", "--poll-interval-s", "0.02",
        "--policy", "fixed", "--interval-s", "0.1", "--no-stream", "--json", "--out", str(out)])
    assert probed.exit_code == 0, probed.output
    # the URL the README used to give: read as the engine's base, and said so
    assert "note: --readiness-url ends in /health, read as the engine's base URL" in probed.stderr
    report = json.loads(probed.stdout)
    assert report["first_status"] == 503 and report["outcome"] == "ok"
    assert report["polled_not_ready_s"] is not None  # it polled the engine asleep (or waking) first
    assert report["readiness"].endswith("ready when GET /is_sleeping: is_sleeping false")

    attempts = [span for line in out.read_text().splitlines() for rs in json.loads(line)["resourceSpans"]
                for ss in rs["scopeSpans"] for span in ss["spans"] if span["name"] == SPAN_HTTP_POST]
    t0_s = min(int(span["startTimeUnixNano"]) for span in attempts) / 1e9
    (wake,) = [s for s in span_exporter.get_finished_spans()
               if s.name == SPAN_MODELCLAIM_WAKE and s.attributes[ATTR_MODELCLAIM_WAKE_PATH] == "in-place"]
    engine_ready_s = next(e.timestamp for e in wake.events if e.name == EVENT_ENGINE_READY) / 1e9
    # the requirement: within 0.2 s of the lifecycle's engine.ready (both on this host's clock)
    assert abs(t0_s + report["polled_ready_s"] - engine_ready_s) < 0.2, (t0_s, report, engine_ready_s)


def test_an_engine_slept_behind_the_lifecycle_s_back_becomes_sleeping_and_the_next_request_wakes_it(
        serve_asgi, tracer_provider) -> None:  # noqa: ANN001
    sim = serve_asgi(create_app("tiny-cpu", model_name=MODEL, enable_sleep_mode=True))
    table = {**lifecycle_table(sim.url), "health_interval_s": 0.05}
    gate = serve_asgi(create_gate_app(GateSettings(modelclaim=table), tracer_provider=tracer_provider))
    wait_for(lambda: status_of(gate.url)["phase"] == "Active", "the attach")
    assert httpx.post(f"{sim.url}/sleep", params={"level": "1"}, timeout=10.0).status_code == 200  # not the gate

    wait_for(lambda: status_of(gate.url)["phase"] == "Sleeping", "the health check to see the engine asleep")
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
    first = httpx.post(f"{gate.url}/v1/completions", json=body, timeout=10.0)
    assert first.status_code == 503 and first.headers["retry-after"] == "10"  # the gate's, not the engine's own
    wait_for(lambda: status_of(gate.url)["phase"] == "Active", "the wake")
    assert httpx.post(f"{gate.url}/v1/completions", json=body, timeout=10.0).status_code == 200
