"""vLLM's sleep API on the live shell: sleep -> held (or refused) -> wake_up -> served after the modelled wake time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from restorelens.clock import to_ns
from restorelens.serving import ServerThread
from restorelens.sim import EngineConfig, create_app
from restorelens.spans import (
    ATTR_ENGINE_SLEEP_LEVEL,
    ATTR_ENGINE_WAKE_TAGS,
    ATTR_LATENCY_TIME_IN_QUEUE,
    SPAN_ENGINE_SLEEP,
    SPAN_ENGINE_WAKE_UP,
    SPAN_LLM_REQUEST,
)

Serve = Callable[..., ServerThread]
# Wake-up: 0.05 s fixed + 20 MB at 100 MB/s + 0.05 s KV = 0.3 s; sleeping offloads in 0.2 s.
CONFIG = EngineConfig(
    weight_bytes=20_000_000,
    host_to_device_bytes_per_s=100e6,
    wake_fixed_s=0.05,
    kv_cache_realloc_s=0.05,
    level2_reload_s=0.4,
    cold_start_s=0.3,
)
WAKE_S = 0.3
REFUSE = CONFIG.replace(asleep_requests="refuse")
WAITING_ONE = 'vllm:num_requests_waiting{engine="0",model_name="tiny"} 1.0'


def complete(url: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json={"prompt": "hello", "max_tokens": 2})


def test_a_request_sent_while_asleep_waits_and_is_served_after_wake_up(
    serve_asgi: Serve, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    server = serve_asgi(create_app(CONFIG, tracer_provider=tracer_provider, enable_sleep_mode=True, start_mode="asleep"))
    with httpx.Client(base_url=server.url, timeout=30) as client:
        results: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: results.append(complete(server.url)))
        sender.start()
        for _ in range(500):  # bounded: wait until the engine counts the request as waiting
            if WAITING_ONE in client.get("/metrics").text:
                break
            time.sleep(0.01)
        assert WAITING_ONE in client.get("/metrics").text
        assert client.get("/health").status_code == 200
        # Weights alone leave the engine asleep (the KV cache is still discarded): still held.
        assert client.post("/wake_up", params={"tags": "weights"}).json()["status"] == "sleeping"
        assert WAITING_ONE in client.get("/metrics").text and not results
        assert client.post("/wake_up", params={"tags": "kv_cache"}).json()["status"] == "awake"
        sender.join(timeout=30)
    assert results[0].status_code == 200 and results[0].json()["usage"]["completion_tokens"] == 2
    spans = span_exporter.get_finished_spans()
    last_wake = [s for s in spans if s.name == SPAN_ENGINE_WAKE_UP][-1]
    (served,) = [s for s in spans if s.name == SPAN_LLM_REQUEST]
    # It arrived while asleep, and its queue time runs until the engine scheduled it, once the
    # KV cache's modelled 0.05 s restore was over.
    assert served.start_time < last_wake.start_time
    queued_s = dict(served.attributes or {})[ATTR_LATENCY_TIME_IN_QUEUE]
    assert served.start_time + to_ns(queued_s) >= last_wake.start_time + to_ns(CONFIG.kv_cache_realloc_s) - 1000


def test_refuse_option_answers_503_until_wake_up_and_then_serves_after_the_wake_time(
    serve_asgi: Serve, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    server = serve_asgi(create_app(REFUSE, tracer_provider=tracer_provider, enable_sleep_mode=True))
    url = server.url
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    assert complete(url).status_code == 200

    slept = httpx.post(f"{url}/sleep", params={"level": 1})
    assert slept.json() == {"status": "sleeping", "level": 1}
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": True}
    refused = complete(url)
    assert refused.status_code == 503
    assert "sleeping" in refused.json()["error"]["message"]
    assert httpx.get(f"{url}/health").status_code == 200  # alive, just asleep (as vLLM)

    # Weights alone do not end the sleep: the KV cache is still discarded.
    partial = httpx.post(f"{url}/wake_up", params={"tags": "weights"})
    assert partial.json() == {"status": "sleeping", "tags_woken": ["weights"]}
    assert complete(url).status_code == 503
    woken = httpx.post(f"{url}/wake_up", params={"tags": "kv_cache"})
    assert woken.json() == {"status": "awake", "tags_woken": ["kv_cache"]}
    assert httpx.get(f"{url}/is_sleeping").json() == {"is_sleeping": False}
    assert complete(url).status_code == 200

    spans = span_exporter.get_finished_spans()
    sleep_span = next(s for s in spans if s.name == SPAN_ENGINE_SLEEP)
    assert dict(sleep_span.attributes or {})[ATTR_ENGINE_SLEEP_LEVEL] == 1
    # The sleep call returned only after the 0.2 s offload was modelled.
    assert sleep_span.end_time - sleep_span.start_time >= to_ns(0.2) - 1000
    wake_spans = [s for s in spans if s.name == SPAN_ENGINE_WAKE_UP]
    assert [tuple(dict(s.attributes or {})[ATTR_ENGINE_WAKE_TAGS]) for s in wake_spans] == [("weights",), ("kv_cache",)]
    weights_wake = wake_spans[0]
    assert weights_wake.end_time - weights_wake.start_time >= to_ns(WAKE_S - 0.05) - 1000
    served = [s for s in spans if s.name == SPAN_LLM_REQUEST][-1]
    assert served.start_time >= wake_spans[1].end_time


def test_full_wake_up_takes_the_modelled_time(serve_asgi: Serve, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter) -> None:
    server = serve_asgi(create_app(REFUSE, tracer_provider=tracer_provider, enable_sleep_mode=True, start_mode="asleep"))
    assert httpx.get(f"{server.url}/is_sleeping").json() == {"is_sleeping": True}
    assert complete(server.url).status_code == 503
    assert httpx.post(f"{server.url}/wake_up").json()["status"] == "awake"
    (wake,) = [s for s in span_exporter.get_finished_spans() if s.name == SPAN_ENGINE_WAKE_UP]
    assert wake.end_time - wake.start_time >= to_ns(WAKE_S) - 1000
    assert complete(server.url).status_code == 200


def test_sleep_api_is_absent_unless_enabled(serve_asgi: Serve) -> None:
    server = serve_asgi(create_app(CONFIG))
    assert httpx.post(f"{server.url}/sleep").status_code == 404
    assert httpx.get(f"{server.url}/is_sleeping").status_code == 404


def test_bad_sleep_arguments_are_400(serve_asgi: Serve) -> None:
    server = serve_asgi(create_app(CONFIG, enable_sleep_mode=True))
    assert httpx.post(f"{server.url}/sleep", params={"level": 3}).json()["error"]["param"] == "level"
    assert httpx.post(f"{server.url}/sleep", params={"mode": "keep"}).json()["error"]["param"] == "mode"
    assert httpx.post(f"{server.url}/wake_up", params={"tags": "everything"}).status_code == 400


def test_cold_start_is_not_healthy_until_loaded(serve_asgi: Serve) -> None:
    # A load long enough that two requests on a busy shared machine surely fall inside it.
    server = serve_asgi(create_app(CONFIG.replace(cold_start_s=2.0), start_mode="cold"))
    assert httpx.get(f"{server.url}/health").status_code == 503
    assert complete(server.url).status_code == 503
    for _ in range(500):  # bounded (at most ~10 s): the modelled load takes 2 s
        if httpx.get(f"{server.url}/health").status_code == 200:
            break
        time.sleep(0.02)
    assert httpx.get(f"{server.url}/health").status_code == 200
    assert complete(server.url).status_code == 200


def test_sleep_abort_fails_in_flight_requests_with_503(serve_asgi: Serve) -> None:
    slow = CONFIG.replace(decode_s_per_seq=0.05)
    server = serve_asgi(create_app(slow, enable_sleep_mode=True))
    with httpx.Client(base_url=server.url, timeout=10) as client:
        results: list[httpx.Response] = []
        worker = threading.Thread(
            target=lambda: results.append(client.post("/v1/completions", json={"prompt": "x", "max_tokens": 100}))
        )
        worker.start()
        for _ in range(200):  # bounded: wait until the engine reports the request running
            metrics = client.get("/metrics").text
            if 'vllm:num_requests_running{engine="0",model_name="tiny"} 1.0' in metrics:
                break
            time.sleep(0.01)
        assert client.post("/sleep", params={"level": 1, "mode": "abort"}).status_code == 200
        worker.join(timeout=10)
    assert results[0].status_code == 503 and "aborted" in results[0].json()["error"]["message"]


def test_a_stream_sent_while_asleep_starts_after_the_wake(serve_asgi: Serve) -> None:
    server = serve_asgi(create_app(CONFIG, enable_sleep_mode=True, start_mode="asleep"))
    lines: list[str] = []

    def stream() -> None:
        body = {"prompt": "hello", "max_tokens": 3, "stream": True}
        with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=30) as answer:
            lines.extend(line for line in answer.iter_lines() if line)

    sender = threading.Thread(target=stream)
    sender.start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        for _ in range(500):  # bounded: wait until the engine counts the request as waiting
            if WAITING_ONE in client.get("/metrics").text:
                break
            time.sleep(0.01)
        assert WAITING_ONE in client.get("/metrics").text and not lines
        assert client.post("/wake_up").json()["status"] == "awake"
    sender.join(timeout=30)
    assert len(lines) == 5 and lines[-1] == "data: [DONE]"  # three tokens, the finish chunk, [DONE]
