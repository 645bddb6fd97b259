"""The OpenAI wire format, answer side: response bodies, stream chunks and the filler text.

Pure functions. Non-streaming bodies come from templates (``completion_body``, ``chat_body``),
byte-equal to the JSON of ``completion_response``/``chat_response`` but cheaper to build. The
"generated" text is filler words, one per token.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii as _quote  # what json.dumps does to a str
from typing import Any

__all__ = [
    "CHAT",
    "COMPLETIONS",
    "STREAM_DONE",
    "chat_body",
    "chat_response",
    "completion_body",
    "completion_response",
    "completion_text",
    "stream_chunk",
    "token_text",
    "usage",
]

COMPLETIONS, CHAT = "completions", "chat"
_FILLER = ("the", " model", " is", " a", " simulator", " and", " this", " text", " is", " filler", ".")


def token_text(index: int) -> str:
    """The filler text of generated token number ``index``."""
    return _FILLER[index % len(_FILLER)]


def completion_text(num_tokens: int) -> str:
    return "".join(token_text(i) for i in range(num_tokens))


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def completion_response(
    response_id: str, created: int, model: str, prompt_tokens: int, completion_tokens: int, finish_reason: str
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": completion_text(completion_tokens),
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        ],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def completion_body(
    response_id: str, created: int, model: str, prompt_tokens: int, completion_tokens: int, finish_reason: str
) -> bytes:
    """``completion_response`` serialised compactly, from a template (no dict, no generic encoder)."""
    return (
        f'{{"id":{_quote(response_id)},"object":"text_completion","created":{created:d},"model":{_quote(model)},'
        f'"choices":[{{"index":0,"text":{_quoted_text(completion_tokens)},"logprobs":null,'
        f'"finish_reason":{_quote(finish_reason)},"stop_reason":null}}],{_usage_json(prompt_tokens, completion_tokens)}}}'
    ).encode()


def chat_body(
    response_id: str, created: int, model: str, prompt_tokens: int, completion_tokens: int, finish_reason: str
) -> bytes:
    """``chat_response`` serialised compactly, from a template."""
    return (
        f'{{"id":{_quote(response_id)},"object":"chat.completion","created":{created:d},"model":{_quote(model)},'
        f'"choices":[{{"index":0,"message":{{"role":"assistant","content":{_quoted_text(completion_tokens)},"tool_calls":[]}},'
        f'"logprobs":null,"finish_reason":{_quote(finish_reason)},"stop_reason":null}}],'
        f'{_usage_json(prompt_tokens, completion_tokens)}}}'
    ).encode()


def _usage_json(prompt_tokens: int, completion_tokens: int) -> str:
    return (
        f'"usage":{{"prompt_tokens":{prompt_tokens:d},"total_tokens":{prompt_tokens + completion_tokens:d},'
        f'"completion_tokens":{completion_tokens:d}}}'
    )


def _quoted_text(num_tokens: int) -> str:
    """The filler text of ``num_tokens`` tokens as a JSON string; the common lengths are cached."""
    if num_tokens < _TEXT_CACHE_TOKENS:
        cached = _QUOTED_TEXTS.get(num_tokens)
        if cached is None:
            cached = _QUOTED_TEXTS[num_tokens] = _quote(completion_text(num_tokens))
        return cached
    return _quote(completion_text(num_tokens))


_TEXT_CACHE_TOKENS = 4096
_QUOTED_TEXTS: dict[int, str] = {}


def chat_response(
    response_id: str, created: int, model: str, prompt_tokens: int, completion_tokens: int, finish_reason: str
) -> dict[str, Any]:
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": completion_text(completion_tokens), "tool_calls": []},
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
            }
        ],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def stream_chunk(
    kind: str,
    response_id: str,
    created: int,
    model: str,
    *,
    text: str | None = None,
    role: bool = False,
    finish_reason: str | None = None,
    usage_tokens: tuple[int, int] | None = None,
) -> str:
    """One SSE event. ``usage_tokens`` makes the final usage-only chunk (``choices: []``)."""
    chunk: dict[str, Any] = {
        "id": response_id,
        "object": "text_completion" if kind == COMPLETIONS else "chat.completion.chunk",
        "created": created,
        "model": model,
    }
    if usage_tokens is not None:
        chunk["choices"] = []
        chunk["usage"] = usage(*usage_tokens)
    elif kind == COMPLETIONS:
        chunk["choices"] = [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}]
    else:
        delta: dict[str, str] = {}
        if role:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        chunk["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"


STREAM_DONE = "data: [DONE]\n\n"
