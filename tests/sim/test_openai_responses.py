from __future__ import annotations

import json

import pytest

from restorelens.sim.openai_responses import chat_body, chat_response, completion_body, completion_response, stream_chunk


def test_stream_chunks_are_sse_events() -> None:
    chunk = stream_chunk("chat", "chatcmpl-1", 1, "tiny", text="hi")
    assert chunk.startswith("data: ") and chunk.endswith("\n\n")
    payload = json.loads(chunk[len("data: ") :])
    assert payload["object"] == "chat.completion.chunk"
    assert payload["choices"][0]["delta"] == {"content": "hi"}
    usage = json.loads(stream_chunk("chat", "c", 1, "tiny", usage_tokens=(3, 2))[6:])
    assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2}


@pytest.mark.parametrize("completion_tokens", [0, 1, 7, 5000])
def test_templated_bodies_equal_the_compact_json_of_the_response_objects(completion_tokens: int) -> None:
    args = ("cmpl-\u00e9\"x", 1700000000, "m\u00f6del/\"q\"", 12, completion_tokens, "length")
    compact = {"separators": (",", ":")}
    assert completion_body(*args) == json.dumps(completion_response(*args), **compact).encode()
    assert chat_body(*args) == json.dumps(chat_response(*args), **compact).encode()
