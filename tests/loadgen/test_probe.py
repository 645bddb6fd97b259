from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from restorelens.cli import cli
from restorelens.clock import ScaledClock
from restorelens.loadgen.client import TracedClient
from restorelens.loadgen.probe import decompose, run_probe
from restorelens.loadgen.request import AttemptRecord, ClientRequest, RequestResult
from restorelens.loadgen.retry import HonourRetryAfter
from restorelens.loadgen.retry_after import RetryAfter
from restorelens.readiness import ReadinessCheck
from restorelens.spans import SPAN_CLIENT_REQUEST, SPAN_HTTP_POST


def test_decompose_a_wake_where_the_hint_overshoots() -> None:
    # 503 + Retry-After 10 at t=100, engine ready at 104, client back at 110, first token at 110.5.
    result = RequestResult(
        "p", "interactive", "ok", 100.0, 111.0,
        (AttemptRecord(1, 100.0, 100.01, 503, RetryAfter(10.0, "10")), AttemptRecord(2, 110.01, 110.2, 200)),
        first_chunk_s=110.5,
    )
    report = decompose(result, ready_at_s=104.0, not_ready_at_s=103.5)
    assert report.first_status == 503 and report.retry_after_s == 10.0
    assert report.polled_ready_s == 4.0 and report.polled_not_ready_s == 3.5
    assert abs(report.success_s - 10.2) < 1e-9 and abs(report.polled_overshoot_s - 6.01) < 1e-9
    assert report.polled_hint_error_s == 6.0 and report.attempts == 2 and report.statuses == (503, 200)
    assert abs(report.first_chunk_s - 10.5) < 1e-9
    assert report.ready_s is None and report.episode_note is not None  # the wake episode is the store's


def test_decompose_without_readiness_or_success() -> None:
    result = RequestResult("p", "batch", "gave_up", 0.0, 30.0, (AttemptRecord(1, 0.0, 0.1, 503, RetryAfter(None, "x", "unparseable")),))
    report = decompose(result)
    assert report.polled_ready_s is None and report.success_s is None and report.polled_overshoot_s is None
    assert report.retry_after_invalid == "unparseable" and report.first_chunk_s == 30.0


class SleepingModel:
    """Stand-in gateway (until the real gate runs here): a model that is ready ``wake_s`` after the
    first request; before that, 503 + Retry-After; ``/health`` says the same. ``like_vllm``: its
    ``/health`` says 200 throughout and ``/is_sleeping`` tells whether it can serve, as vLLM's do."""

    def __init__(self, clock: ScaledClock, wake_s: float, retry_after: str, like_vllm: bool = False) -> None:
        self.clock, self.wake_s, self.retry_after, self.like_vllm = clock, wake_s, retry_after, like_vllm
        self.woken_at_s: float | None = None

    def ready(self) -> bool:
        return self.woken_at_s is not None and self.clock.now_s() >= self.woken_at_s + self.wake_s

    def app(self) -> Starlette:
        async def completions(request: Request) -> Response:
            await request.body()
            if self.woken_at_s is None:
                self.woken_at_s = self.clock.now_s()
            if not self.ready():
                return JSONResponse({"error": "waking"}, 503, headers={"Retry-After": self.retry_after})
            return JSONResponse({"choices": [{"text": "x"}]})

        async def health(request: Request) -> Response:
            return Response(status_code=200 if self.ready() or self.like_vllm else 503)

        async def is_sleeping(request: Request) -> Response:
            return JSONResponse({"is_sleeping": not self.ready()})

        routes = [Route("/v1/completions", completions, methods=["POST"]), Route("/health", health)]
        return Starlette(routes=routes + ([Route("/is_sleeping", is_sleeping)] if self.like_vllm else []))


def test_probe_polls_readiness_and_measures_the_overshoot(serve_asgi, tracer_provider, span_exporter) -> None:
    # 5x faster than real time: the 2-s wake and 6-s hint take 1.2 s. The client comes back 3.5
    # protocol seconds (0.7 real seconds) after the last poll that can first see readiness, so a
    # stall on a busy machine does not reorder them; a higher scale would shrink that margin.
    clock = ScaledClock(time_scale=5.0, start_s=0.0)
    model = SleepingModel(clock, wake_s=2.0, retry_after="6")
    url = serve_asgi(model.app()).url

    async def go():
        async with TracedClient(url, policy=HonourRetryAfter(), tracer_provider=tracer_provider, clock=clock, sleep=clock.sleep) as client:
            request = ClientRequest("probe-1", "tiny", "x" * 40, 4, stream=False)
            return await run_probe(client, request, readiness_url=f"{url}/health", poll_interval_s=0.5, sleep=clock.sleep)

    report = asyncio.run(go())
    assert report.outcome == "ok" and report.statuses == (503, 200) and report.retry_after_s == 6.0
    assert report.polled_not_ready_s is not None and report.polled_not_ready_s < report.polled_ready_s
    # readiness was seen before the client came back: the hint overshot it
    assert 2.0 <= report.polled_ready_s < report.success_s and report.polled_overshoot_s > 0
    assert report.polled_hint_error_s == 6.0 - report.polled_ready_s
    names = sorted(s.name for s in span_exporter.get_finished_spans())
    assert names == [SPAN_HTTP_POST, SPAN_HTTP_POST, SPAN_CLIENT_REQUEST]  # polls are not traced


def test_probe_cli_against_a_local_gateway(scripted_gateway, tmp_path) -> None:
    script, url = scripted_gateway((503, {"Retry-After": "1"}), (200, {}))
    out = tmp_path / "spans.jsonl"
    result = CliRunner().invoke(cli, ["probe", url, "--model", "tiny", "--json", "--out", str(out), "--no-stream"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["first_status"] == 503 and report["retry_after_s"] == 1.0 and report["attempts"] == 2
    assert report["outcome"] == "ok" and report["statuses"] == [503, 200]
    assert script.seen[0]["body"]["model"] == "tiny"
    span_names = [s["name"] for line in out.read_text().splitlines() for rs in json.loads(line)["resourceSpans"]
                  for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert sorted(span_names) == [SPAN_HTTP_POST, SPAN_HTTP_POST, SPAN_CLIENT_REQUEST]

    text = CliRunner().invoke(cli, ["probe", url, "--model", "tiny", "--no-stream"])
    assert text.exit_code == 0 and "first status   200" in text.output and "attempts       1 (200)" in text.output


def test_probe_cli_rejects_a_bad_url_in_one_line() -> None:
    result = CliRunner().invoke(cli, ["probe", "localhost:8000", "--model", "m"])
    assert result.exit_code == 1 and "setting URL" in result.output and "Traceback" not in result.output


def test_probe_exits_1_when_the_request_does_not_succeed(scripted_gateway) -> None:
    script, url = scripted_gateway((503, {"Retry-After": "0"}))
    result = CliRunner().invoke(cli, ["probe", url, "--model", "tiny", "--json", "--no-stream", "--max-attempts", "2"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)  # the decomposition is still printed, on stdout
    assert report["outcome"] == "gave_up" and report["statuses"] == [503, 503] and len(script.seen) == 2
    assert "probe failed: the request ended gave_up" in result.stderr and "Traceback" not in result.output


def test_duration_flags_carry_their_unit_and_the_old_names_still_work(scripted_gateway) -> None:
    help_text = CliRunner().invoke(cli, ["probe", "--help"]).output
    for flag in ("--deadline-s", "--interval-s", "--poll-interval-s", "--timeout-s"):
        assert flag in help_text
    for old in ("--deadline ", "--interval ", "--poll-interval ", "--timeout ", "--deadline,", "--timeout,"):
        assert old not in help_text  # accepted, but not offered
    script, url = scripted_gateway((503, {}))
    for interval_flag, deadline_flag in (("--interval-s", "--deadline-s"), ("--interval", "--deadline")):
        result = CliRunner().invoke(cli, ["probe", url, "--model", "tiny", "--json", "--no-stream", "--policy", "fixed",
                                          interval_flag, "0.05", deadline_flag, "0.01"])
        # the 0.01-s deadline stops the retries: one attempt, or two when the first answer came
        # before the deadline (the 0.05-s wait is clamped to it); the default would allow 20
        assert result.exit_code == 1, result.output
        report = json.loads(result.stdout)
        assert report["outcome"] == "gave_up" and report["statuses"] in ([503], [503, 503])
    bad = CliRunner().invoke(cli, ["probe", url, "--model", "tiny", "--timeout-s", "0"])
    assert bad.exit_code == 2 and "--timeout-s" in bad.output


def probe_a_waking_engine(serve_asgi, tracer_provider, readiness: ReadinessCheck | None):  # noqa: ANN001, ANN201
    """The probe against a vLLM-like model whose 2-s wake starts at the first request; the client
    comes back after the 3-s hint. 5x faster than real time."""
    clock = ScaledClock(time_scale=5.0, start_s=0.0)
    url = serve_asgi(SleepingModel(clock, wake_s=2.0, retry_after="3", like_vllm=True).app()).url

    async def go():
        async with TracedClient(url, policy=HonourRetryAfter(), tracer_provider=tracer_provider, clock=clock, sleep=clock.sleep) as client:
            request = ClientRequest("probe-1", "tiny", "x" * 40, 4, stream=False)
            return await run_probe(client, request, readiness_url=f"{url}/health", readiness=readiness,
                                   poll_interval_s=0.25, sleep=clock.sleep)

    return asyncio.run(go())


def test_the_probe_counts_ready_only_when_the_check_says_so(serve_asgi, tracer_provider) -> None:  # noqa: ANN001
    # The default check reads the URL ending in /health as the engine's base and asks /is_sleeping.
    report = probe_a_waking_engine(serve_asgi, tracer_provider, None)
    assert report.outcome == "ok" and report.statuses == (503, 200)
    assert report.polled_not_ready_s is not None and report.polled_ready_s > 1.0  # protocol seconds, of a 2-s wake
    assert report.readiness == ("GET /is_sleeping -> is_sleeping == false (else /health); "
                                "ready when GET /is_sleeping: is_sleeping false")
    assert f"readiness      {report.readiness}" in report.lines()
    # what --readiness-url http://ENGINE/health used to report: ready at the first poll, before the
    # 2-s wake could have ended
    naive = probe_a_waking_engine(serve_asgi, tracer_provider, ReadinessCheck("health"))
    assert naive.polled_not_ready_s is None and naive.polled_ready_s < 2.0


def test_probe_cli_takes_a_json_readiness_check(scripted_gateway, serve_asgi) -> None:  # noqa: ANN001
    _, url = scripted_gateway((200, {}))

    async def state(request: Request) -> Response:
        return JSONResponse({"sleeping": False, "load": "1"})

    engine = serve_asgi(Starlette(routes=[Route("/state", state)])).url
    for field, equals, ready in (("sleeping", "false", True), ("sleeping", "true", False), ("load", "1", False),
                                 ("load", '"1"', True)):
        # "false" is JSON's false; 1 is a number, not the string the engine sent
        result = CliRunner().invoke(cli, ["probe", url, "--model", "tiny", "--json", "--no-stream", "--readiness-url",
                                          f"{engine}/state", "--readiness-field", field, "--readiness-equals", equals,
                                          "--poll-interval-s", "0.05"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        assert (report["polled_ready_s"] is not None) is ready, (field, equals, report)
        assert report["readiness"].startswith(f"GET /state -> {field} == ")


def test_probe_cli_refuses_readiness_options_that_do_not_fit_in_one_line() -> None:
    base = ["probe", "http://127.0.0.1:9", "--model", "m"]
    engine = ["--readiness-url", "http://127.0.0.1:9/state"]
    for options, message in (
        (["--readiness", "health"], "setting --readiness: needs --readiness-url (the engine to check)"),
        (["--readiness-field", "up"], "setting --readiness-field: needs --readiness-url"),
        (engine + ["--readiness-field", "up"], "setting --readiness-equals: give the value of 'up' that means ready"),
        (engine + ["--readiness-equals", "1"], "setting --readiness-field: give the JSON field to compare"),
        (engine + ["--readiness", "completion", "--readiness-field", "up", "--readiness-equals", "1"],
         "setting --readiness-field: a JSON check replaces --readiness completion; give one of them"),
        (["--readiness-url", "127.0.0.1:9/health"], "setting --readiness-url: '127.0.0.1:9/health' is not an http(s) URL"),
    ):
        result = CliRunner().invoke(cli, base + options)
        assert result.exit_code == 1, (options, result.output)
        assert message in result.output and "Traceback" not in result.output, (options, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    bad = CliRunner().invoke(cli, base + ["--readiness", "json"])
    assert bad.exit_code == 2 and "--readiness" in bad.output  # json is --readiness-field's


def test_probe_db_needs_the_probes_spans_in_that_store(tmp_path) -> None:  # noqa: ANN001
    result = CliRunner().invoke(cli, ["probe", "http://127.0.0.1:9", "--model", "m", "--db", str(tmp_path / "s.duckdb")])
    assert result.exit_code == 1 and "setting --db: needs --collector" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
