"""The OpenAI wire format, request side: parse and check request bodies; errors.

Pure functions; the app (``sim/app.py``, ``sim/inference_asgi.py``) does the I/O and
``openai_responses`` builds the answers. Errors are ``ApiError`` carrying the HTTP status and
OpenAI's error object ``{"error": {"message", "type", "param", "code"}}``. Text is never inspected
beyond its length: prompt tokens are estimated from characters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from restorelens.sim.config import EngineConfig
from restorelens.sim.openai_responses import COMPLETIONS

__all__ = ["ApiError", "ParsedRequest", "error_body", "parse_request"]

#: OpenAI's default for /v1/completions when max_tokens is absent.
COMPLETIONS_DEFAULT_MAX_TOKENS = 16

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 413: "RequestEntityTooLarge", 503: "ServiceUnavailableError"}


class ApiError(Exception):
    """An answer other than 200, with OpenAI's error object."""

    def __init__(self, status: int, message: str, *, param: str | None = None, error_type: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.error_type = error_type or _ERROR_TYPES.get(status, "Error")

    def body(self) -> dict[str, Any]:
        return error_body(self.status, self.message, param=self.param, error_type=self.error_type)


def error_body(status: int, message: str, *, param: str | None = None, error_type: str | None = None) -> dict[str, Any]:
    return {
        "error": {
            "message": message,
            "type": error_type or _ERROR_TYPES.get(status, "Error"),
            "param": param,
            "code": status,
        }
    }


@dataclass(frozen=True, slots=True)
class ParsedRequest:
    kind: str
    model: str
    prompt_tokens: int
    max_tokens: int
    #: Tokens generated before the simulated end-of-sequence; None = until max_tokens.
    output_tokens: int | None
    stream: bool
    include_usage: bool
    temperature: float
    top_p: float
    priority: int

    def span_params(self) -> dict[str, float | int]:
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p, "n": 1}


# Options the simulator cannot honour; sending them is a 400 rather than a silently wrong answer.
_UNSUPPORTED = {
    "n": lambda v: v not in (None, 1),
    "best_of": lambda v: v not in (None, 1),
    "echo": lambda v: bool(v),
    "logprobs": lambda v: v not in (None, False),
    "top_logprobs": lambda v: v not in (None, 0),
    "suffix": lambda v: v not in (None, ""),
    "tools": lambda v: bool(v),
    "functions": lambda v: bool(v),
    "response_format": lambda v: v not in (None, {"type": "text"}),
    "guided_json": lambda v: v is not None,
    "guided_regex": lambda v: v is not None,
    "guided_choice": lambda v: v is not None,
}


def parse_request(raw: bytes, kind: str, *, config: EngineConfig, model_name: str) -> ParsedRequest:
    """Check a request body and turn it into what the engine needs; raises ApiError."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    model = body.get("model", model_name)
    if not isinstance(model, str):
        raise ApiError(400, "'model' must be a string", param="model")
    if model != model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", param="model")
    for option, unsupported in _UNSUPPORTED.items():
        if unsupported(body.get(option)):
            raise ApiError(400, f"'{option}'={body[option]!r} is not supported by the simulator", param=option)
    if kind == COMPLETIONS:
        prompt_tokens = _completion_prompt_tokens(body, config)
    else:
        prompt_tokens = _chat_prompt_tokens(body, config)
    max_tokens = _optional_int(body, "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens")
    output_tokens = None
    if max_tokens is None:
        if kind == COMPLETIONS:
            max_tokens = COMPLETIONS_DEFAULT_MAX_TOKENS
        else:
            # vLLM lets a chat run to the context limit; a real model stops at EOS long before.
            max_tokens = max(1, config.max_model_len - prompt_tokens)
            output_tokens = config.default_chat_output_tokens
    if body.get("ignore_eos") is True:
        output_tokens = None
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", param="stream")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    priority = _optional_int(body, "priority", minimum=None)
    return ParsedRequest(
        kind=kind,
        model=model,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        output_tokens=output_tokens,
        stream=stream,
        include_usage=bool(stream_options.get("include_usage", False)),
        temperature=_optional_number(body, "temperature", 1.0),
        top_p=_optional_number(body, "top_p", 1.0),
        priority=priority or 0,
    )


def _completion_prompt_tokens(body: dict[str, Any], config: EngineConfig) -> int:
    if "prompt" not in body:
        raise ApiError(400, "missing required field 'prompt'", param="prompt")
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return config.estimate_prompt_tokens(len(prompt))
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return len(prompt)  # already token ids
        if len(prompt) == 1 and isinstance(prompt[0], str):
            return config.estimate_prompt_tokens(len(prompt[0]))
        if all(isinstance(p, str) for p in prompt):
            raise ApiError(400, "batched prompts (a list of several strings) are not supported", param="prompt")
    raise ApiError(400, "'prompt' must be a string or a list of token ids", param="prompt")


def _chat_prompt_tokens(body: dict[str, Any], config: EngineConfig) -> int:
    messages = body.get("messages")
    if messages is None:
        raise ApiError(400, "missing required field 'messages'", param="messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    num_chars = 0
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ApiError(400, f"messages[{index}] must be an object with a 'role'", param="messages")
        content = message.get("content")
        if isinstance(content, str):
            num_chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    num_chars += len(part["text"])
        elif content is not None:
            raise ApiError(400, f"messages[{index}].content must be a string or a list of parts", param="messages")
    return config.estimate_prompt_tokens(num_chars) + config.chat_tokens_per_message * len(messages)


def _optional_int(body: dict[str, Any], name: str, *, minimum: int | None = 1) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, f"'{name}' must be an integer, got {value!r}", param=name)
    if minimum is not None and value < minimum:
        raise ApiError(400, f"'{name}' must be at least {minimum}, got {value}", param=name)
    return value


def _optional_number(body: dict[str, Any], name: str, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise ApiError(400, f"'{name}' must be a non-negative number, got {value!r}", param=name)
    return float(value)
