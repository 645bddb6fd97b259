from __future__ import annotations

import json

import pytest

from restorelens.sim import EngineConfig
from restorelens.sim.openai_requests import ApiError, parse_request

CONFIG = EngineConfig(chars_per_token=4.0, chat_tokens_per_message=4)


def parse(body: object, kind: str = "completions") -> object:
    return parse_request(json.dumps(body).encode(), kind, config=CONFIG, model_name="tiny")


def test_prompt_tokens_are_estimated_from_characters_or_counted_as_ids() -> None:
    assert parse({"prompt": "x" * 400}).prompt_tokens == 100  # type: ignore[attr-defined]
    assert parse({"prompt": [1, 2, 3]}).prompt_tokens == 3  # type: ignore[attr-defined]
    chat = parse({"messages": [{"role": "system", "content": "x" * 40}, {"role": "user", "content": "x" * 40}]}, "chat")
    assert chat.prompt_tokens == 20 + 2 * 4  # type: ignore[attr-defined]


def test_defaults_follow_openai_and_vllm() -> None:
    completion = parse({"prompt": "hi"})
    assert completion.max_tokens == 16 and completion.model == "tiny"  # type: ignore[attr-defined]
    chat = parse({"messages": [{"role": "user", "content": "hi"}]}, "chat")
    # Chat without max_tokens may run to the context limit but "stops" early, as a model hits EOS.
    assert chat.max_tokens == 1024 - chat.prompt_tokens  # type: ignore[attr-defined]
    assert chat.output_tokens == CONFIG.default_chat_output_tokens  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("raw", "status", "param"),
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (b'{"model": "tiny"}', 400, "prompt"),
        (b'{"model": "other", "prompt": "x"}', 404, "model"),
        (b'{"prompt": "x", "n": 2}', 400, "n"),
        (b'{"prompt": "x", "best_of": 3}', 400, "best_of"),
        (b'{"prompt": "x", "max_tokens": "ten"}', 400, "max_tokens"),
        (b'{"prompt": "x", "max_tokens": 0}', 400, "max_tokens"),
        (b'{"prompt": "x", "stream": "yes"}', 400, "stream"),
        (b'{"prompt": {"a": 1}}', 400, "prompt"),
        (b'{"prompt": ["a", "b"]}', 400, "prompt"),
    ],
)
def test_bad_bodies_are_openai_errors(raw: bytes, status: int, param: str | None) -> None:
    with pytest.raises(ApiError) as caught:
        parse_request(raw, "completions", config=CONFIG, model_name="tiny")
    assert caught.value.status == status and caught.value.param == param
    body = caught.value.body()["error"]
    assert set(body) == {"message", "type", "param", "code"} and body["code"] == status


def test_chat_needs_messages_with_roles() -> None:
    for body in ({"model": "tiny"}, {"messages": []}, {"messages": [{"content": "x"}]}):
        with pytest.raises(ApiError) as caught:
            parse(body, "chat")
        assert caught.value.param == "messages"
