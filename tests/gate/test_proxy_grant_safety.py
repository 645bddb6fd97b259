"""Stateful property test through the real proxy: no grant leaks however requests end.

A real gate (uvicorn on loopback, tracing to memory) in front of a STAND-IN engine: no real engine
holds a request until told, fails with a 500, stalls past the gate's timeout or drops the
connection mid-stream on demand. Clients are raw sockets, so a disconnect happens exactly when the
rule says. Policies are swapped at run time through ``PUT /admin/policy``.

After every step the gate must settle to exactly one grant per request the engine is still holding
for a connected client. At the end, with every client gone and every hold released, nothing may be
in flight or queued, every restoration episode must be drained, and every request that reached the
gate must have ended its ``gate.request`` span.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from restorelens import spans as S
from restorelens.gate import GateSettings
from restorelens.gate.app import create_gate_app
from restorelens.serving import ServerThread
from restorelens.telemetry import build_tracer_provider

TOKEN = "grant-safety-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
FLOORS = {"interactive": 3, "batch": 1}
KINDS = ("ok", "hold", "fail", "hang", "drop")
POLICIES = (
    {"policy": "lend", "floors": FLOORS, "lendable_slots": 2},
    {"policy": "static", "floors": FLOORS},
    {"policy": "fcfs", "capacity": 4},
)
SETTLE_POLLS = 300  # 10 ms apart: generous for a loaded machine, bounded so a leak fails


def standin_engine() -> tuple[Starlette, dict[str, asyncio.Event], set[str]]:
    """(the app, hold releases by request id, ids of held requests the engine is still serving)."""
    releases: dict[str, asyncio.Event] = {}
    holding: set[str] = set()

    async def completions(request: Request) -> Response:
        payload = await request.json()
        request_id = request.headers["x-request-id"]
        kind = payload["model"]
        if kind == "fail":
            return JSONResponse({"error": {"message": "engine exploded"}}, 500)
        if kind == "hang":
            await asyncio.sleep(1)  # past the gate's upstream_timeout_s: the gate answers 504
        if kind == "ok" or kind == "hang":
            return JSONResponse({"choices": [{"text": "ok"}]})

        async def stream():
            yield b"data: {}\n\n"
            if kind == "drop":
                raise RuntimeError("engine dropped the connection")  # uvicorn aborts it mid-stream
            holding.add(request_id)
            try:
                await releases.setdefault(request_id, asyncio.Event()).wait()
            finally:
                holding.discard(request_id)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def release(request: Request) -> Response:
        releases.setdefault(request.path_params["request_id"], asyncio.Event()).set()
        return JSONResponse({})

    app = Starlette(routes=[
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/release/{request_id}", release, methods=["POST"]),
    ])
    return app, releases, holding


class ProxyGrantSafety(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        app, _, self.engine_holding = standin_engine()
        self.engine = ServerThread(app).start()
        self.provider = build_tracer_provider("grant-safety", "memory")
        gate_settings = GateSettings(
            upstreams={"*": self.engine.url}, admin_token=TOKEN, policy="lend", floors=FLOORS, lendable_slots=2,
            queue_limit=3, wait_timeout_s=0.3, upstream_timeout_s=0.2,
        )
        self.gate = ServerThread(create_gate_app(gate_settings, tracer_provider=self.provider)).start()
        self.clients: dict[str, tuple[socket.socket, str]] = {}  # request id -> (socket, kind), still connected
        self.sent = 0

    # --- rules ---------------------------------------------------------------------------------

    @rule(kind=st.sampled_from(KINDS), traffic_class=st.sampled_from(sorted(FLOORS)))
    def send(self, kind: str, traffic_class: str) -> None:
        self.sent += 1
        request_id = f"r{self.sent}"
        body = json.dumps({"model": kind, "prompt": "x", "stream": kind in ("hold", "drop")}).encode()
        sock = socket.create_connection((self.gate.host, self.gate.port))
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nhost: gate\r\ncontent-type: application/json\r\n"
            b"x-request-id: %s\r\nx-traffic-class: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (request_id.encode(), traffic_class.encode(), len(body), body)
        )
        self.clients[request_id] = (sock, kind)

    @precondition(lambda self: self.clients)
    @rule(index=st.integers(0, 100))
    def disconnect(self, index: int) -> None:
        request_id = sorted(self.clients)[index % len(self.clients)]
        sock, _ = self.clients.pop(request_id)
        sock.close()

    @precondition(lambda self: self.engine_holding)
    @rule(index=st.integers(0, 100))
    def release(self, index: int) -> None:
        held = sorted(self.engine_holding)
        httpx.post(f"{self.engine.url}/release/{held[index % len(held)]}")

    @rule(change=st.sampled_from(POLICIES))
    def swap_policy(self, change: dict) -> None:
        answer = httpx.put(self.gate.url + "/admin/policy", json=change, headers=AUTH)
        assert answer.status_code == 200, answer.text

    # --- invariants ----------------------------------------------------------------------------

    def _state(self) -> dict:
        return httpx.get(self.gate.url + "/admin/state", headers=AUTH).json()

    @staticmethod
    def _in_flight(state: dict) -> int:
        return sum(state["in_flight_own"].values()) + state["in_flight_borrowed"]

    @invariant()
    def grants_settle_to_the_requests_still_held(self) -> None:
        """Once settled, the grants are exactly the requests the engine holds for connected clients:
        none leaked, none released while its request still runs."""
        for _ in range(SETTLE_POLLS):
            state = self._state()
            connected = {rid for rid, (_, kind) in self.clients.items() if kind == "hold"}
            if self._in_flight(state) == len(connected & self.engine_holding):
                return
            time.sleep(0.01)
        raise AssertionError(f"grants leaked: {state}")

    def teardown(self) -> None:
        try:
            for sock, _ in self.clients.values():
                sock.close()
            self.clients.clear()
            for _ in range(SETTLE_POLLS):
                for request_id in list(self.engine_holding):
                    httpx.post(f"{self.engine.url}/release/{request_id}")
                state = self._state()
                if self._in_flight(state) == 0 and sum(state["queued"].values()) == 0 and not self.engine_holding:
                    break
                time.sleep(0.01)
            else:
                raise AssertionError(f"grants leaked after every client left: {state}")
            open_episodes = [e for e in state["restoration_episodes"] if e["borrowed_drained_s"] is None]
            assert open_episodes == []
            # Every request that reached the gate ended its span, however it ended.
            for _ in range(SETTLE_POLLS):
                spans = self.provider.restorelens_exporter.get_finished_spans()  # type: ignore[attr-defined]
                if sum(s.name == S.SPAN_GATE_REQUEST for s in spans) == self.sent:
                    break
                time.sleep(0.01)
            else:
                raise AssertionError(f"{self.sent} requests, {sum(s.name == S.SPAN_GATE_REQUEST for s in spans)} gate.request spans")
        finally:
            self.gate.stop()
            self.engine.stop()
            self.provider.shutdown()


ProxyGrantSafety.TestCase.settings = settings(max_examples=12, stateful_step_count=12, deadline=None)
TestProxyGrantSafety = ProxyGrantSafety.TestCase
