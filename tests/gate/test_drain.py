"""A gate told to stop (SIGTERM) with a long stream in flight and a request queued: it answers the
queued one at once, cuts the stream at its drain deadline, exports every span, and exits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from restorelens import spans as S
from restorelens.serving import ServerThread

GUARD_S = 30.0  # hang guard: the engine's stream lasts longer than this; a gate that waits for it fails


async def completions(request: Request) -> Response:
    async def events() -> AsyncIterator[bytes]:
        for _ in range(int(4 * GUARD_S / 0.1)):  # far longer than any guard: only a cut ends it
            yield b'data: {"choices":[{"text":"a"}]}\n\n'
            await asyncio.sleep(0.1)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


ENGINE = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])


def _queued(url: str) -> int:
    metrics = httpx.get(url + "/metrics", timeout=GUARD_S).text
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in metrics.splitlines()
               if line.startswith("restorelens_gate_queued{"))


def _spans(path: str) -> Iterator[dict]:
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            for resource_spans in json.loads(line)["resourceSpans"]:
                for scope_spans in resource_spans["scopeSpans"]:
                    yield from scope_spans["spans"]


def _attributes(span: dict) -> dict[str, object]:
    return {a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])}


def test_sigterm_answers_the_queued_request_cuts_the_stream_at_the_deadline_and_keeps_its_spans(tmp_path) -> None:
    trace_file = str(tmp_path / "gate.jsonl")
    with ServerThread(ENGINE) as engine:
        gate = subprocess.Popen(
            [sys.executable, "-m", "restorelens", "gate", "--upstream", engine.url, "--port", "0", "--policy", "static",
             "--floors", "interactive=1,batch=1", "--trace-file", trace_file],
            stderr=subprocess.PIPE, text=True, env={**os.environ, "RESTORELENS_GATE_DRAIN_TIMEOUT_S": "1"},
        )
        try:
            assert gate.stderr is not None
            url = gate.stderr.readline().strip().rsplit(" ", 1)[1]
            batch = {"x-traffic-class": "batch"}
            body = {"model": "m", "prompt": "x", "stream": True}
            with httpx.Client(base_url=url, timeout=GUARD_S) as client, \
                    client.stream("POST", "/v1/completions", json=body, headers={**batch, "x-request-id": "stream-1"}) as stream:
                chunks = stream.iter_raw()
                assert next(chunks).startswith(b"data: ")  # in flight, holding batch's one slot
                queued: list[httpx.Response] = []
                waiter = threading.Thread(target=lambda: queued.append(httpx.post(
                    url + "/v1/completions", json=body, headers={**batch, "x-request-id": "queued-1"}, timeout=GUARD_S)))
                waiter.start()
                deadline = time.monotonic() + GUARD_S
                while _queued(url) < 1 and time.monotonic() < deadline:
                    time.sleep(0.02)
                gate.send_signal(signal.SIGTERM)
                waiter.join(GUARD_S)
                cut = False
                guard = time.monotonic() + GUARD_S
                try:
                    for _ in chunks:
                        if time.monotonic() > guard:
                            break  # the hang guard: still streaming, never cut
                except httpx.HTTPError:
                    cut = True  # the stream ended without its last chunk: cut, not finished
            _, errors = gate.communicate(timeout=GUARD_S)  # the hang guard: the stream alone lasts longer
        finally:
            if gate.poll() is None:
                gate.kill()
                gate.communicate()
    (answer,) = queued
    # Answered at drain, as a held request is: 503 and a Retry-After, not the 429 after its 30-s wait.
    assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1
    assert answer.json()["error"]["type"] == "shutting_down"
    assert gate.returncode == 0, errors
    assert "Traceback" not in errors
    assert cut
    requests = {attributes[S.ATTR_REQUEST_ID]: attributes for span in _spans(trace_file)
                if span["name"] == S.SPAN_GATE_REQUEST for attributes in [_attributes(span)]}
    assert set(requests) == {"stream-1", "queued-1"}
    assert requests["stream-1"][S.ATTR_ERROR_TYPE] == "gate_shutdown"
    assert requests["queued-1"][S.ATTR_GATE_DECISION] == "rejected"
