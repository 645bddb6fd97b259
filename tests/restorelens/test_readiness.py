"""The readiness check against real servers on loopback: the simulator asleep, awake and without
the sleep API, and small apps that answer what an engine should not (errors, non-JSON, too much)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from restorelens.errors import SettingError
from restorelens.readiness import (
    ASLEEP,
    COMPLETION_PROMPT,
    MAX_BODY_BYTES,
    NOT_READY,
    READY,
    ReadinessAnswer,
    ReadinessCheck,
    check_ready,
    parse_readiness,
    sleep_state,
)
from restorelens.serving import ServerThread
from restorelens.sim.app import create_app
from restorelens.sim.config import get_preset

AUTO, HEALTH, COMPLETION = ReadinessCheck("auto"), ReadinessCheck("health"), ReadinessCheck("completion")


def ask(url: str, check: ReadinessCheck, model: str | None = "m", timeout_s: float = 10.0) -> ReadinessAnswer:
    async def go() -> ReadinessAnswer:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            return await check_ready(client, url, check, model=model)

    return asyncio.run(go())


@pytest.fixture
def sim(serve_asgi: Callable[..., ServerThread]) -> Callable[..., str]:
    def start(start_mode: str = "ready", *, sleep_api: bool = True, asleep_requests: str = "hold") -> str:
        config = get_preset("tiny-cpu").replace(asleep_requests=asleep_requests)
        return serve_asgi(create_app(config, model_name="m", enable_sleep_mode=sleep_api, start_mode=start_mode)).url

    return start


def test_auto_tells_a_sleeping_engine_from_a_ready_one_where_health_cannot(sim) -> None:  # noqa: ANN001
    asleep, awake = sim("asleep"), sim("ready")
    assert ask(asleep, AUTO) == ReadinessAnswer(ASLEEP, "GET /is_sleeping: is_sleeping true", sleep_known=True)
    assert ask(awake, AUTO) == ReadinessAnswer(READY, "GET /is_sleeping: is_sleeping false", sleep_known=True)
    # the issue (#20): /health says 200 while the engine sleeps, so `health` calls it ready
    assert ask(asleep, HEALTH).state == READY
    # a trailing slash on the base URL changes nothing
    assert ask(asleep + "/", AUTO).state == ASLEEP


def test_auto_without_a_sleep_api_falls_back_to_health_and_says_the_sleep_state_is_unknown(sim) -> None:  # noqa: ANN001
    answer = ask(sim("ready", sleep_api=False), AUTO)
    assert (answer.state, answer.sleep_known) == (READY, False)
    assert answer.detail == "no /is_sleeping (sleep state unknown); GET /health answered 200"


def test_a_completion_check_needs_the_engine_to_serve(sim) -> None:  # noqa: ANN001
    refusing, awake = sim("asleep", asleep_requests="refuse"), sim("ready")
    assert ask(refusing, COMPLETION) == ReadinessAnswer(NOT_READY, "POST /v1/completions answered 503")
    assert ask(awake, COMPLETION) == ReadinessAnswer(READY, "POST /v1/completions answered 200")
    # A sleeping vLLM holds the completion until someone wakes it: no answer, so not ready.
    held = ask(sim("asleep"), COMPLETION, timeout_s=0.5)
    assert (held.state, held.detail) == (NOT_READY, "POST /v1/completions: ReadTimeout")
    with pytest.raises(ValueError, match="needs the model name"):
        ask(awake, COMPLETION, model=None)


def test_the_completion_check_sends_one_token_of_a_fixed_word(serve_asgi) -> None:  # noqa: ANN001
    seen: list[dict[str, Any]] = []

    async def completions(request: Request) -> Response:
        seen.append(await request.json())
        return JSONResponse({"choices": [{"text": "y"}]})

    url = serve_asgi(Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])).url
    assert ask(url, COMPLETION, model="qwen").state == READY
    assert seen == [{"model": "qwen", "prompt": COMPLETION_PROMPT, "max_tokens": 1}]


class Answers:
    """An app answering each path with what a test sets: (status, body bytes, streamed)."""

    def __init__(self) -> None:
        self.answers: dict[str, tuple[int, bytes, bool]] = {}

    def app(self) -> Starlette:
        async def answer(request: Request) -> Response:
            status, body, streamed = self.answers.get(request.url.path, (404, b"", False))
            if streamed:
                async def chunks() -> Any:
                    for start in range(0, len(body), 4096):
                        yield body[start:start + 4096]

                return StreamingResponse(chunks(), status_code=status, media_type="application/json")
            return Response(body, status_code=status, media_type="application/json")

        return Starlette(routes=[Route("/{path:path}", answer)])


@pytest.fixture
def answers(serve_asgi: Callable[..., ServerThread]) -> tuple[Answers, str]:
    app = Answers()
    return app, serve_asgi(app.app()).url


def test_auto_is_not_ready_on_an_error_or_an_answer_without_a_boolean(answers) -> None:  # noqa: ANN001
    app, url = answers
    app.answers["/health"] = (200, b"", False)
    for status, body, detail in (
        (503, b"", "GET /is_sleeping answered 503"),
        (200, b'{"is_sleeping": "no"}', "GET /is_sleeping: no boolean is_sleeping in the answer"),
        (200, b"[false]", "GET /is_sleeping: no boolean is_sleeping in the answer"),
        (200, b"not json", "GET /is_sleeping: no boolean is_sleeping in the answer"),
    ):
        app.answers["/is_sleeping"] = (status, body, False)
        # /health says 200 throughout: an engine whose sleep API errs is not judged by /health
        assert ask(url, AUTO) == ReadinessAnswer(NOT_READY, detail), (status, body)
    app.answers["/is_sleeping"] = (405, b"", False)
    assert ask(url, AUTO).state == READY  # no such route: the fallback


def test_a_json_check_compares_one_field_with_its_type(answers) -> None:  # noqa: ANN001
    app, url = answers
    check = parse_readiness({"path": "/state", "field": "sleeping", "equals": False}, "x")
    for body, state in (
        ({"sleeping": False}, READY),
        ({"sleeping": True}, NOT_READY),
        ({"sleeping": 0}, NOT_READY),  # JSON's 0 is not false
        ({"other": False}, NOT_READY),
    ):
        app.answers["/state"] = (200, json.dumps(body).encode(), False)
        assert ask(url, check).state == state, body
    app.answers["/state"] = (503, b'{"sleeping": false}', False)
    assert ask(url, check) == ReadinessAnswer(NOT_READY, "GET /state answered 503")
    app.answers["/state"] = (200, b"[1]", False)
    assert ask(url, check) == ReadinessAnswer(NOT_READY, "GET /state: the answer is no JSON object")
    numeric = parse_readiness({"path": "/state", "field": "n", "equals": 1}, "x")
    app.answers["/state"] = (200, b'{"n": 1.0}', False)
    assert ask(url, numeric).state == READY
    app.answers["/state"] = (200, b'{"n": true}', False)
    assert ask(url, numeric).state == NOT_READY  # JSON's true is not 1


@pytest.mark.parametrize("streamed", [False, True], ids=["content-length", "chunked"])
def test_an_answer_past_the_bound_is_not_ready(answers, streamed: bool) -> None:  # noqa: ANN001
    app, url = answers
    padding = " " * MAX_BODY_BYTES
    app.answers["/is_sleeping"] = (200, f'{{"is_sleeping": false}}{padding}'.encode(), streamed)
    assert ask(url, AUTO) == ReadinessAnswer(NOT_READY, "GET /is_sleeping: answer larger than 64 KiB")
    # the same answer within the bound is read (JSON allows the trailing blanks)
    app.answers["/is_sleeping"] = (200, f'{{"is_sleeping": false}}{padding[:1000]}'.encode(), streamed)
    assert ask(url, AUTO).state == READY


def test_an_engine_that_does_not_answer_is_not_ready_and_not_reached(serve_asgi) -> None:  # noqa: ANN001
    server = serve_asgi(Starlette())
    url = server.url
    server.stop()
    for check in (AUTO, HEALTH, COMPLETION, ReadinessCheck("json", "/s", "f", 1)):
        answer = ask(url, check)
        assert (answer.state, answer.reached) == (NOT_READY, False), check


def test_sleep_state_is_none_without_the_route(sim) -> None:  # noqa: ANN001
    async def go(url: str) -> ReadinessAnswer | None:
        async with httpx.AsyncClient(timeout=10.0) as client:
            return await sleep_state(client, url)

    assert asyncio.run(go(sim("ready", sleep_api=False))) is None
    asleep = asyncio.run(go(sim("asleep")))
    assert asleep is not None and asleep.asleep


def test_parse_readiness_names_the_setting() -> None:
    assert parse_readiness("completion", "c.readiness") == ReadinessCheck("completion")
    assert parse_readiness({"path": "/s", "field": "up", "equals": "yes"}, "c.readiness") == ReadinessCheck(
        "json", "/s", "up", "yes")
    for value, setting in (
        ("json", "c.readiness"),
        (3, "c.readiness"),
        ({"path": "s", "field": "f", "equals": 1}, "c.readiness.path"),
        ({"path": "/s", "field": "", "equals": 1}, "c.readiness.field"),
        ({"path": "/s", "field": "f"}, "c.readiness.equals"),
        ({"path": "/s", "field": "f", "equals": [1]}, "c.readiness.equals"),
        ({"path": "/s", "field": "f", "equals": 1, "when": 2}, "c.readiness.when"),
    ):
        with pytest.raises(SettingError) as raised:
            parse_readiness(value, "c.readiness")
        assert raised.value.setting == setting, value
