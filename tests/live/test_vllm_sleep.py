"""Real vLLM's start-up spans and its sleep API, on one vLLM process for the whole module.

vLLM starts with ``VLLM_SERVER_DEV_MODE=1`` (which serves the sleep API), exports its spans over
OTLP/HTTP to a relay (``otlp_relay.py``) that keeps every export body as received, and has a fixed
W3C ``TRACEPARENT`` in its environment. The module checks:

- the start-up spans vLLM exports (``Overall Loading`` down to ``Warmup (CPU)``) all carry the
  environment's trace id, and so does a request that arrived without a ``traceparent`` header,
  while a request with one keeps its own trace;
- the sleep API at levels 1 and 2: ``/sleep``, ``/is_sleeping``, ``/health``, the
  ``vllm:engine_sleep_state`` gauge and ``/wake_up``;
- a request sent straight to a sleeping engine waits and is served after the wake (real vLLM and
  ``restorelens sim``);
- the gate's lifecycle over the sleep API (``VllmSleepBackend``) idles vLLM to sleep and wakes it
  for a request, answering 503 + Retry-After or holding the request; the wake is decomposed from
  spans alone.

vLLM's CPU backend refuses ``--enable-sleep-mode`` ("Sleep mode is not supported on current
platform"), yet serves the sleep API without it: a sleep pauses the scheduler (requests that arrive
are queued, not refused) and the CPU worker ignores the memory part (it logs "sleep mode is not
supported on CPU, ignore it"). The weights and KV cache stay in memory, so a wake here takes about
a millisecond, not the seconds a GPU's weight reload takes.

With ``RESTORELENS_WRITE_VLLM_START_FIXTURE=PATH`` the export bodies of the cold start and its two
requests are saved to PATH, length-prefixed, and notes on the run beside it (PATH with ``.json``):
that is how ``tests/analysis/data/vllm-0.32-cold-start.pb`` was made (tests/analysis/vllm_cold_start.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider

from restorelens import spans
from restorelens.analysis import Analysis
from restorelens.collector import load_paths
from restorelens.gate import GateSettings, create_gate_app
from restorelens.loadgen import ClientRequest, RunLabels, TracedClient
from restorelens.loadgen.retry import make_policy
from restorelens.serving import ServerThread, bind_socket
from restorelens.store import open_read_only

from tests.analysis.vllm_cold_start import (
    ENGINE_TRACEPARENT, HEADED_TRACEPARENT, START_SPAN_NAMES, START_SPAN_PARENTS, assert_cold_start,
)  # fmt: skip

from .conftest import SPAN_ARRIVAL_TIMEOUT_S, start_vllm, stop_process, vllm_argv, vllm_env, wait_for_spans
from .otlp_relay import OtlpRelay, write_length_prefixed

pytestmark = pytest.mark.live

#: How long a request sent to a sleeping engine is left waiting before the engine is woken: a
#: refused request is answered at once, and an engine that ignored its sleep serves 8 tokens of
#: the tiny model well within it, so an answer before the wake is either.
ASLEEP_DWELL_S = 3.0
IDLE_SLEEP_AFTER_S = 2
NOT_READY_RETRY_AFTER_S = 1
HOLD_S = 30
PROMPT = "the quick brown fox"
CPU_SLEEP_IGNORED = "sleep mode is not supported on CPU, ignore it"


@dataclass
class ColdStart:
    """The module's vLLM: its URL, log, relay, and the cold start's recording in a store."""

    url: str
    log: Path
    relay: OtlpRelay
    store: Path  # the cold start's and the two requests' export bodies, loaded by the project's loader


def _completion(url: str, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8}
    return httpx.post(f"{url}/v1/completions", json=body, headers=headers or {}, timeout=120)


def _span_counts(store: Path) -> tuple[int, int]:
    """(start-up spans, ``llm_request`` spans) in the store."""
    with open_read_only(store) as con:
        names = [name for (name,) in con.execute('select "SpanName" from otel_traces').fetchall()]
    return sum(name in START_SPAN_NAMES for name in names), names.count(spans.SPAN_LLM_REQUEST)


def _record(relay: OtlpRelay, folder: Path) -> tuple[Path, Path]:
    """Save what the relay holds and load it with the project's loader, until every start-up span and
    both requests' ``llm_request`` spans are in: each vLLM process (API server, engine core, worker)
    exports on its own, in batches 5 s apart."""
    deadline = time.monotonic() + SPAN_ARRIVAL_TIMEOUT_S
    attempt = 0
    while True:
        attempt += 1
        recording, store = folder / f"recording-{attempt}.pb", folder / f"recording-{attempt}.duckdb"
        write_length_prefixed(relay.snapshot(), recording)
        summary = load_paths([recording], store)
        assert summary.rejected == 0 and summary.malformed == 0, summary
        counts = _span_counts(store)
        if counts == (len(START_SPAN_PARENTS), 2):
            return recording, store
        assert time.monotonic() < deadline, (
            f"within {SPAN_ARRIVAL_TIMEOUT_S} s vLLM exported {counts[0]} of {len(START_SPAN_PARENTS)} start-up "
            f"spans and {counts[1]} of 2 llm_request spans"
        )
        time.sleep(2)


def _write_fixture_notes(path: Path, live_python: str, spawned_ns: int, healthy_ns: int) -> None:
    """What the recording's spans cannot say: when the process was spawned and first healthy, the
    trace contexts used, the command, and the machine."""
    version = subprocess.run([live_python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                             text=True, check=True).stdout.strip()  # fmt: skip
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "")  # fmt: skip
    argv = vllm_argv("$RESTORELENS_LIVE_PYTHON", "$RESTORELENS_LIVE_MODEL", host="127.0.0.1", port="$PORT",
                     served_name="tiny") + ["--otlp-traces-endpoint", "http://127.0.0.1:$RELAY_PORT/v1/traces"]
    env = {k: v for k, v in vllm_env().items() if k not in os.environ or os.environ[k] != v}
    notes = {
        "vllm_version": version,
        "recorded_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(spawned_ns / 1e9)),
        "machine": {"cpus": os.cpu_count(), "cpu_model": cpu},
        "command": argv,
        "environment": {**env, "TRACEPARENT": ENGINE_TRACEPARENT},
        "headed_request_traceparent": HEADED_TRACEPARENT,
        "spawned_unix_ns": spawned_ns,
        "first_health_200_unix_ns": healthy_ns,
    }
    path.write_text(json.dumps(notes, indent=2) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def cold_vllm(live_python: str, model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ColdStart]:
    folder = tmp_path_factory.mktemp("vllm-sleep")
    relay = OtlpRelay()
    with ServerThread(relay.app) as relay_server:
        spawned_ns = time.time_ns()
        # a fine /health poll: the first 200's time goes into the fixture's notes
        proc, url = start_vllm(
            live_python, model_dir, relay_server.url, folder / "vllm.log",
            extra_env={"TRACEPARENT": ENGINE_TRACEPARENT}, poll_interval_s=0.1,
        )
        healthy_ns = time.time_ns()
        try:
            assert _completion(url, {"traceparent": HEADED_TRACEPARENT}).status_code == 200
            assert _completion(url).status_code == 200
            recording, store = _record(relay, folder)
            fixture = os.environ.get("RESTORELENS_WRITE_VLLM_START_FIXTURE")
            if fixture:
                shutil.copyfile(recording, fixture)
                _write_fixture_notes(Path(fixture).with_suffix(".json"), live_python, spawned_ns, healthy_ns)
            yield ColdStart(url, folder / "vllm.log", relay, store)
        finally:
            stop_process(proc)


def test_start_up_spans_and_a_header_less_request_carry_the_environments_trace(cold_vllm: ColdStart) -> None:
    """The same facts the recorded fixture holds (tests/analysis/vllm_cold_start.py), on this run."""
    assert_cold_start(cold_vllm.store)


def _is_sleeping(url: str) -> bool:
    answer = httpx.get(f"{url}/is_sleeping", timeout=10)
    assert answer.status_code == 200, answer.text
    return answer.json()["is_sleeping"]


def _sleep_state(url: str) -> dict[str, float]:
    """``vllm:engine_sleep_state`` from /metrics: its ``sleep_state`` label -> value."""
    found = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("vllm:engine_sleep_state{"):
            labels, value = line.rsplit(" ", 1)
            state = labels.split('sleep_state="', 1)[1].split('"', 1)[0]
            found[state] = float(value)
    return found


#: ``vllm:engine_sleep_state`` awake, and asleep at each level (vllm/v1/metrics/loggers.py).
AWAKE_STATE = {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
ASLEEP_STATE = {
    1: {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 0.0},
    2: {"awake": 0.0, "weights_offloaded": 0.0, "discard_all": 1.0},
}


def _ensure_awake(url: str) -> None:
    if _is_sleeping(url):
        assert httpx.post(f"{url}/wake_up", timeout=30).status_code == 200
    assert not _is_sleeping(url)


@pytest.mark.parametrize("level", [1, 2])
def test_the_sleep_api_sleeps_and_wakes_the_cpu_engine_without_releasing_memory(cold_vllm: ColdStart, level: int) -> None:
    url = cold_vllm.url
    _ensure_awake(url)
    assert _sleep_state(url) == AWAKE_STATE
    ignored_before = cold_vllm.log.read_text(errors="replace").count(CPU_SLEEP_IGNORED)
    answer = httpx.post(f"{url}/sleep", params={"level": str(level)}, timeout=30)
    assert (answer.status_code, answer.json()) == (200, {"status": "sleeping", "level": level})
    assert _is_sleeping(url)
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # alive, though it cannot serve
    assert _sleep_state(url) == ASLEEP_STATE[level]
    woke = httpx.post(f"{url}/wake_up", timeout=30)
    assert (woke.status_code, woke.json()) == (200, {"status": "awake", "tags": None})
    assert not _is_sleeping(url)
    assert _sleep_state(url) == AWAKE_STATE
    # the CPU worker ignored both calls, and said so once for each
    assert cold_vllm.log.read_text(errors="replace").count(CPU_SLEEP_IGNORED) == ignored_before + 2


@pytest.fixture
def sim_engine(tmp_path: Path) -> Iterator[str]:
    """``restorelens sim`` with its sleep API, as a real process (its spans to a file)."""
    sock = bind_socket()
    port = sock.getsockname()[1]
    sock.close()
    argv = [sys.executable, "-m", "restorelens", "sim", "--enable-sleep-mode", "--port", str(port),
            "--trace-file", str(tmp_path / "sim.jsonl")]  # fmt: skip
    with (tmp_path / "sim.log").open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "sim.log").read_text(errors="replace")[-2000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "restorelens sim was not healthy within 60 s"
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc)


async def _send_while_asleep(url: str) -> tuple[httpx.Response, float, float]:
    """Send a completion to the sleeping engine, wake it ``ASLEEP_DWELL_S`` later; return the answer,
    when the wake was called and when the answer came (monotonic seconds)."""
    async with httpx.AsyncClient(timeout=120) as client:
        body = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8}
        sent = asyncio.create_task(client.post(f"{url}/v1/completions", json=body))
        await asyncio.sleep(ASLEEP_DWELL_S)
        if sent.done():
            early = sent.result()
            pytest.fail(f"answered while asleep: {early.status_code} {early.text[:200]}", pytrace=False)
        wake_called_s = time.monotonic()
        assert (await client.post(f"{url}/wake_up")).status_code == 200
        answer = await sent
        return answer, wake_called_s, time.monotonic()


@pytest.mark.parametrize("engine", ["vllm", "sim"])
def test_a_request_sent_straight_to_a_sleeping_engine_is_served_after_the_wake(
    engine: str, request: pytest.FixtureRequest
) -> None:
    """No gate: the engine itself holds the request while asleep (real vLLM: its scheduler is
    paused; the simulator models that) and serves it once woken."""
    url = request.getfixturevalue("cold_vllm").url if engine == "vllm" else request.getfixturevalue("sim_engine")
    _ensure_awake(url)
    answer = httpx.post(f"{url}/sleep", params={"level": "1"}, timeout=30)
    assert answer.status_code == 200 and _is_sleeping(url)
    served, wake_called_s, answered_s = asyncio.run(_send_while_asleep(url))
    assert served.status_code == 200, served.text
    assert served.json()["choices"][0]["text"] is not None
    assert answered_s >= wake_called_s
    assert not _is_sleeping(url)


def _modelclaim_table(engine_url: str, hold: bool) -> dict:
    table = {
        "policy": {"sleepAfterSeconds": IDLE_SLEEP_AFTER_S},
        "retry_after": {"not_ready_s": NOT_READY_RETRY_AFTER_S},
        "poll_interval_s": 0.1,
        "start_timeout_s": 60,
        "pods": [{"name": "pod-1", "gpus": ["24Gi"]}],
        "claims": [
            {"model": "tiny", "perGPU": {"maximumFootprint": "2Gi", "kvFloor": "1Gi"}, "engine_url": engine_url}
        ],
    }
    if hold:
        table["hold_s"] = HOLD_S
    return table


def _wait_until_asleep(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not _is_sleeping(url):
        assert time.monotonic() < deadline, f"the lifecycle did not put vLLM to sleep within {timeout_s:g} s"
        time.sleep(0.2)


def _wait_for_served_span(store: Path) -> None:
    """Until vLLM's ``llm_request`` of the client's request is in. The store may also get a span of
    an earlier test's request: vLLM exports in batches, 5 s apart, and the relay forwards them here."""
    deadline = time.monotonic() + SPAN_ARRIVAL_TIMEOUT_S
    while True:
        with open_read_only(store) as con:
            found = con.execute(
                """select count(*) from otel_traces e join otel_traces c on c."TraceId" = e."TraceId"
                   where e."SpanName" = $engine and c."SpanName" = $client""",
                {"engine": spans.SPAN_LLM_REQUEST, "client": spans.SPAN_CLIENT_REQUEST},
            ).fetchone()[0]
        if found:
            return
        assert time.monotonic() < deadline, f"vLLM's span of the request did not arrive within {SPAN_ARRIVAL_TIMEOUT_S} s"
        time.sleep(1)


@pytest.mark.parametrize("hint", ["retry-after", "hold"])
def test_the_lifecycle_sleeps_real_vllm_when_idle_and_wakes_it_for_a_request(
    cold_vllm: ColdStart, collector: ServerThread, providers: Callable[[str], TracerProvider], store: Path,
    hint: str,
) -> None:
    """The gate attaches to the running vLLM (``engine_url``: the sleep-API backend), puts it to
    sleep at level 1 once idle, and a request wakes it in place: answered 503 + Retry-After and
    served on its retry, or (``hold_s``) held and forwarded once vLLM is awake. On the CPU backend
    the weights stay in memory through the sleep, so this wake's duration is not a GPU's."""
    _ensure_awake(cold_vllm.url)
    hold = hint == "hold"
    cold_vllm.relay.target = collector.url  # vLLM's llm_request spans into this test's store
    try:
        gate_provider, client_provider = providers("restorelens-gate"), providers("restorelens-loadgen")
        settings = GateSettings(modelclaim=_modelclaim_table(cold_vllm.url, hold), admin_token="live-admin-token")
        policy = make_policy("honour-retry-after", max_attempts=10, deadline_s=120)
        labels = RunLabels(scenario=f"live-vllm-sleep-{hint}")
        client_request = ClientRequest(f"wake-{hint}", "tiny", PROMPT, 8, labels=labels)

        async def drive(url: str):
            async with TracedClient(url, policy=policy, tracer_provider=client_provider, timeout_s=120) as client:
                return await client.request(client_request)

        with ServerThread(create_gate_app(settings, tracer_provider=gate_provider)) as gate:
            _wait_until_asleep(cold_vllm.url, timeout_s=IDLE_SLEEP_AFTER_S + 60)
            result = asyncio.run(drive(gate.url))
        gate_provider.force_flush()
        client_provider.force_flush()
        assert wait_for_spans(store, spans.SPAN_CLIENT_REQUEST, 1) == 1
        _wait_for_served_span(store)
    finally:
        cold_vllm.relay.target = None
    assert result.statuses == ((200,) if hold else (503, 200))

    with Analysis.open(store) as analysis:
        wakes = analysis.wake_episodes()
    assert wakes.height == 1
    wake = wakes.row(0, named=True)
    assert wake["wake_path"] == "in-place"
    assert wake["hint_mode"] == ("hold" if hold else "fixed")
    assert wake["first_status"] == (200 if hold else 503)
    assert wake["attempts"] == len(result.statuses)
    if hold:
        assert wake["hold_s"] is not None and wake["hold_s"] > 0
    else:
        assert wake["retry_after_s"] == NOT_READY_RETRY_AFTER_S
    assert wake["ready_s"] is not None and wake["observed_s"] >= wake["ready_s"]
    assert wake["overshoot_s"] is not None and wake["overshoot_s"] >= 0
    assert wake["engine_schedule_s"] is not None and wake["engine_schedule_s"] >= 0
    assert wake["served"] and not wake["censored"]
