"""A stand-in gateway for the client and probe tests.

Until the real gate + simulator can be started here (see test_live_gate.py for that path), this
small Starlette app plays an OpenAI-compatible gateway that answers a scripted series of statuses
(e.g. 503 with Retry-After, then 200) and records what each attempt sent. It is a real HTTP server
under uvicorn, not a mock of the client's transport.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from restorelens.clock import VirtualClock
from restorelens.protocol import preempted_event
from restorelens.serving import ServerThread


@dataclass
class Scripted:
    """Answers in order; the last one repeats. Each is (status, headers)."""

    answers: list[tuple[int, dict[str, str]]]
    seen: list[dict[str, Any]] = field(default_factory=list)
    ready: bool = False

    def app(self) -> Starlette:
        async def completions(request: Request) -> Response:
            body = await request.json()
            self.seen.append({"headers": dict(request.headers), "body": body})
            status, headers = self.answers[min(len(self.seen) - 1, len(self.answers) - 1)]
            if status != 200:
                # A 503 scripted with "error-type" says what kind (e.g. the gate's "preempted").
                error_type = headers.get("error-type")
                body = {"message": "not ready", "code": status, **({"type": error_type} if error_type else {})}
                return JSONResponse({"error": body}, status,
                                    headers={k: v for k, v in headers.items() if k != "error-type"})
            # A 200 scripted with "preempt-after-ms" streams one token, then the gate's preemption event.
            preempt_ms = headers.get("preempt-after-ms")
            if body.get("stream"):
                async def events() -> Any:
                    for token in ("a", "b"):
                        yield f"data: {json.dumps({'choices': [{'text': token}]})}\n\n"
                        if preempt_ms is not None:
                            yield preempted_event("taken back", int(preempt_ms), str(-(-int(preempt_ms) // 1000)))
                            return
                    yield "data: [DONE]\n\n"

                return StreamingResponse(events(), media_type="text/event-stream")
            return JSONResponse({"choices": [{"text": "ok"}], "usage": {"completion_tokens": 1}})

        async def health(request: Request) -> Response:
            return Response(status_code=200 if self.ready else 503)

        return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"]), Route("/health", health)])


@pytest.fixture
def scripted_gateway(serve_asgi: Callable[..., ServerThread]) -> Iterator[Callable[..., tuple[Scripted, str]]]:
    def start(*answers: tuple[int, dict[str, str]]) -> tuple[Scripted, str]:
        script = Scripted(list(answers))
        return script, serve_asgi(script.app()).url

    yield start


class SleepAdvancesClock:
    """The client's sleep in virtual time: advance the clock, return at once."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.waits_s: list[float] = []

    async def __call__(self, wait_s: float) -> None:
        self.waits_s.append(wait_s)
        self.clock.advance_to(self.clock.now_s() + wait_s)
