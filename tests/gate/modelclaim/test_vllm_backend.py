"""VllmSleepBackend against the simulator's real sleep API: an attach finds the engine asleep or
ready by the claim's readiness check (vLLM's /health says 200 either way), and a wake is ready when
that check says so."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from restorelens.gate.modelclaim.actions import StartEngine, WakeEngine
from restorelens.gate.modelclaim.backends import EngineAnswer
from restorelens.gate.modelclaim.vllm_backend import EngineOperationError, VllmSleepBackend
from restorelens.readiness import ReadinessCheck, parse_readiness
from restorelens.serving import ServerThread
from restorelens.sim.app import create_app

START = StartEngine("m", 1, "p1", (0,))
WAKE = WakeEngine("m", 1, "p1")


@pytest.fixture
def sim(serve_asgi: Callable[..., ServerThread]) -> Callable[[str], str]:
    def start(start_mode: str) -> str:
        return serve_asgi(create_app("tiny-cpu", model_name="m", enable_sleep_mode=True, start_mode=start_mode)).url

    return start


def attach(url: str, check: ReadinessCheck | None = None, **options: float) -> tuple[EngineAnswer, bool]:
    """The attach's answer, and whether the engine still sleeps after it (an attach never wakes)."""
    async def go() -> tuple[EngineAnswer, bool]:
        backend = VllmSleepBackend({"m": url}, poll_interval_s=0.02, readiness=check, **options)
        try:
            answer = await backend.start(START, 0.0)
            return answer, await backend.is_sleeping(url)
        finally:
            await backend.close()

    return asyncio.run(go())


def test_an_attach_to_a_sleeping_engine_says_so(sim) -> None:  # noqa: ANN001
    url = sim("asleep")
    answer, still_asleep = attach(url)
    assert (answer.url, answer.attached, answer.asleep) == (url, True, True)
    assert still_asleep


def test_an_attach_to_a_ready_engine_is_an_attach_not_a_start(sim) -> None:  # noqa: ANN001
    answer, still_asleep = attach(sim("ready"))
    assert (answer.attached, answer.asleep, still_asleep) == (True, False, False)


def test_a_check_that_cannot_see_sleep_still_finds_the_engine_asleep(sim) -> None:  # noqa: ANN001
    # A sleeping engine fails a completion (503): without asking /is_sleeping the attach would
    # wait out start_timeout_s and fail the claim instead of keeping it Sleeping.
    answer, _ = attach(sim("asleep"), ReadinessCheck("completion"), start_timeout_s=60)
    assert (answer.attached, answer.asleep) == (True, True)


def test_an_attach_whose_check_never_passes_fails_naming_the_check(sim) -> None:  # noqa: ANN001
    check = parse_readiness({"path": "/is_sleeping", "field": "is_sleeping", "equals": "no"}, "x")
    with pytest.raises(EngineOperationError) as raised:
        attach(sim("ready"), check, start_timeout_s=0.3)
    assert str(raised.value).endswith(
        "not ready of the attach within 0.3 s by its readiness check (GET /is_sleeping -> is_sleeping == 'no'); "
        "last: GET /is_sleeping: is_sleeping is false")


def test_a_wake_is_ready_when_the_claims_check_says_so(sim) -> None:  # noqa: ANN001
    url = sim("asleep")

    async def go() -> tuple[EngineAnswer, float, int]:
        backend = VllmSleepBackend({"m": url}, poll_interval_s=0.02, readiness=ReadinessCheck("completion"))
        try:
            assert (await backend.start(START, 0.0)).asleep
            called_s = backend.clock.now_s()
            answer = await backend.wake(WAKE, called_s)
            served = await backend.client.post(f"{url}/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 1})
            return answer, called_s, served.status_code
        finally:
            await backend.close()

    answer, called_s, status = asyncio.run(go())
    assert answer.ready_at_s >= called_s and not answer.attached
    assert status == 200


def test_a_wake_fails_at_once_when_the_engine_stops_answering() -> None:
    # A transport whose /is_sleeping cannot connect: an engine gone mid-wake (a real server cannot
    # answer /wake_up and then refuse connections on cue). Without failing at once the wake would
    # poll for its whole 120 s.
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/wake_up":
            return httpx.Response(200, json={"status": "awake"})
        raise httpx.ConnectError("connection refused", request=request)

    async def go() -> None:
        client = httpx.AsyncClient(transport=httpx.MockTransport(answer))
        backend = VllmSleepBackend({"m": "http://engine:8000"}, poll_interval_s=0.02, client=client)
        backend._instances[("m", 1)] = "http://engine:8000"  # as an attach leaves it
        try:
            with pytest.raises(EngineOperationError, match=r"GET /is_sleeping: connection refused \(after /wake_up\)"):
                await backend.wake(WAKE, 0.0)
        finally:
            await backend.close()

    asyncio.run(go())
