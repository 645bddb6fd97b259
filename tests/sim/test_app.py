"""The live shell through real HTTP: uvicorn on loopback, httpx and the official openai client."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

import httpx
import openai
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from restorelens.errors import SettingError
from restorelens.serving import ServerThread
from restorelens.sim import EngineConfig, create_app
from restorelens.spans import (
    ATTR_GEN_AI_REQUEST_ID,
    ATTR_GEN_AI_REQUEST_MAX_TOKENS,
    ATTR_GEN_AI_REQUEST_N,
    ATTR_GEN_AI_REQUEST_TEMPERATURE,
    ATTR_GEN_AI_REQUEST_TOP_P,
    ATTR_GEN_AI_RESPONSE_MODEL,
    ATTR_USAGE_PROMPT_TOKENS,
    SPAN_LLM_REQUEST,
    VLLM_LLM_REQUEST_ATTRIBUTES,
)

Serve = Callable[..., ServerThread]
CONFIG = EngineConfig(chars_per_token=4.0, max_model_len=256)
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"


def llm_spans(exporter: InMemorySpanExporter) -> list:  # type: ignore[type-arg]
    return [s for s in exporter.get_finished_spans() if s.name == SPAN_LLM_REQUEST]


def test_openai_client_completions_and_chat(serve_asgi: Serve) -> None:
    server = serve_asgi(create_app(CONFIG, model_name="tiny"))
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    completion = client.completions.create(model="tiny", prompt="x" * 40, max_tokens=5)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (10, 5)
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=3)
    assert chat.choices[0].message.role == "assistant" and chat.choices[0].message.content
    assert chat.usage is not None and chat.usage.completion_tokens == 3
    assert [m.id for m in client.models.list()] == ["tiny"]


def test_openai_client_streams_chat_and_completions_with_usage(serve_asgi: Serve) -> None:
    server = serve_asgi(create_app(CONFIG, model_name="tiny"))
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 4
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 4
    text_chunks = list(client.completions.create(model="tiny", prompt="hi", max_tokens=3, stream=True))
    assert "".join(c.choices[0].text for c in text_chunks) and text_chunks[-1].choices[0].finish_reason == "length"


def test_llm_request_span_is_a_child_of_traceparent_with_vllms_names(
    serve_asgi: Serve, tracer_provider: TracerProvider, span_exporter: InMemorySpanExporter
) -> None:
    server = serve_asgi(create_app(CONFIG, model_name="tiny", tracer_provider=tracer_provider))
    response = httpx.post(
        f"{server.url}/v1/completions",
        json={"model": "tiny", "prompt": "a secret prompt", "max_tokens": 2},
        headers={"traceparent": f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01", "x-request-id": "req-42"},
    )
    assert response.status_code == 200 and response.headers["x-request-id"] == "req-42"
    (span,) = llm_spans(span_exporter)
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_SPAN_ID
    attributes = dict(span.attributes or {})
    request_params = {
        ATTR_GEN_AI_REQUEST_MAX_TOKENS,
        ATTR_GEN_AI_REQUEST_TEMPERATURE,
        ATTR_GEN_AI_REQUEST_TOP_P,
        ATTR_GEN_AI_REQUEST_N,
    }
    assert set(attributes) == set(VLLM_LLM_REQUEST_ATTRIBUTES) | request_params | {ATTR_GEN_AI_RESPONSE_MODEL}
    assert attributes[ATTR_GEN_AI_REQUEST_ID] == "req-42" and attributes[ATTR_USAGE_PROMPT_TOKENS] == 4
    assert not any("secret" in str(v) for v in attributes.values())


def test_bad_input_answers_like_openai(serve_asgi: Serve) -> None:
    server = serve_asgi(create_app(CONFIG, model_name="tiny", max_body_bytes=2000))
    url = f"{server.url}/v1/completions"
    cases = [
        (httpx.post(url, content=b"{oops", headers={"content-type": "application/json"}), 400, None),
        (httpx.post(url, json={"model": "tiny"}), 400, "prompt"),
        (httpx.post(url, json={"model": "llama", "prompt": "x"}), 404, "model"),
        (httpx.post(url, json={"prompt": "x", "n": 2}), 400, "n"),
        (httpx.post(url, json={"prompt": "x" * 1000, "max_tokens": 20}), 400, "max_tokens"),
        (httpx.post(url, json={"prompt": "x" * 3000}), 413, None),
        (httpx.post(url, json={"prompt": "x", "priority": 5}), 400, "priority"),
    ]
    for response, status, param in cases:
        assert response.status_code == status, response.text
        error = response.json()["error"]
        assert error["code"] == status and error["param"] == param and error["message"]
        assert "Traceback" not in response.text
    too_long = cases[4][0].json()["error"]["message"]
    assert "maximum context length is 256 tokens" in too_long
    assert httpx.get(f"{server.url}/v1/nothing").json()["error"]["code"] == 404
    assert httpx.get(url).json()["error"]["code"] == 405


def test_client_errors_surface_in_the_openai_client(serve_asgi: Serve) -> None:
    server = serve_asgi(create_app(CONFIG, model_name="tiny"))
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="other", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model="tiny", prompt="x" * 2000, max_tokens=1)


def test_metrics_parse_with_prometheus_client_and_count_requests(serve_asgi: Serve) -> None:
    server = serve_asgi(create_app(CONFIG, model_name="tiny"))
    for _ in range(3):
        assert httpx.post(f"{server.url}/v1/completions", json={"prompt": "x", "max_tokens": 2}).status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text)}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:request_queue_time_seconds",
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:num_preemptions",
    ):
        assert name in families, name
        assert all(sample.labels.get("model_name") == "tiny" for sample in families[name].samples)
    e2e_count = next(s for s in families["vllm:e2e_request_latency_seconds"].samples if s.name.endswith("_count"))
    assert e2e_count.value == 3
    assert families["vllm:num_requests_running"].samples[0].value == 0


def test_api_key_protects_the_api_but_not_health(serve_asgi: Serve) -> None:
    server = serve_asgi(create_app(CONFIG, model_name="tiny", api_key="s3cret", enable_sleep_mode=True))
    assert httpx.post(f"{server.url}/v1/completions", json={"prompt": "x"}).status_code == 401
    assert httpx.post(f"{server.url}/sleep").status_code == 401
    ok = httpx.post(
        f"{server.url}/v1/completions", json={"prompt": "x", "max_tokens": 1}, headers={"authorization": "Bearer s3cret"}
    )
    assert ok.status_code == 200
    assert httpx.get(f"{server.url}/health").status_code == 200


def test_api_key_is_compared_in_constant_time(serve_asgi: Serve, monkeypatch: pytest.MonkeyPatch) -> None:
    # Response timing is too noisy to measure in a test; a spy around the real hmac.compare_digest
    # shows both key checks (raw inference path, Starlette control routes) go through it.
    import hmac

    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a, b):  # noqa: ANN001, ANN202
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    server = serve_asgi(create_app(CONFIG, model_name="tiny", api_key="s3cret", enable_sleep_mode=True))
    assert httpx.post(f"{server.url}/v1/completions", json={"prompt": "x"}, headers={"authorization": "Bearer s3creT"}).status_code == 401
    assert httpx.post(f"{server.url}/sleep", headers={"authorization": "Bearer s3creT"}).status_code == 401
    assert compared == [(b"Bearer s3creT", b"Bearer s3cret")] * 2


def test_unknown_start_mode_is_a_setting_error() -> None:
    with pytest.raises(SettingError, match="start_mode"):
        create_app(CONFIG, start_mode="sideways")
    with pytest.raises(SettingError, match="preset"):
        create_app("no-such-preset")
    with pytest.raises(SettingError, match=r"^setting api_key: must be printable ASCII"):
        create_app(CONFIG, api_key="ключ")


def test_a_request_not_streamed_is_aborted_when_its_client_leaves(serve_asgi) -> None:
    # As vLLM does, and as a gate taking a request back needs: the engine stops working for nobody.
    server = serve_asgi(create_app(CONFIG.replace(decode_s_per_seq=1.0), model_name="tiny"))  # 1 s a token
    body = json.dumps({"model": "tiny", "prompt": "x", "max_tokens": 60}).encode()
    with socket.create_connection((server.host, server.port)) as client:
        client.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: sim\r\ncontent-type: application/json\r\n"
                       b"content-length: %d\r\n\r\n%s" % (len(body), body))
        _wait_for(lambda: _running(server) == 1)
    _wait_for(lambda: _running(server) == 0)  # long before its 60 tokens would have taken


def _running(server) -> float:
    for line in httpx.get(server.url + "/metrics").text.splitlines():
        if line.startswith("vllm:num_requests_running{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no vllm:num_requests_running")


def _wait_for(check) -> None:
    for _ in range(400):  # a bound on polls, not a speed claim: 60 tokens take a minute here
        if check():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")
