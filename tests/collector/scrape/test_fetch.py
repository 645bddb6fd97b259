"""One scrape against real servers: its answer's time and samples, every way it fails and why,
the deadline over the whole exchange, and the URLs it refuses."""

from __future__ import annotations

import asyncio
import gzip
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from metrics_servers import METRICS, PATIENCE_S, ListSink, TricklingHead, engine_app
from starlette.responses import Response, StreamingResponse

from restorelens.collector.scrape import Scraped, ScrapeFailed, Scraper, scrape_once, target_problem
from restorelens.serving import ServerThread, bind_socket


def _dribble() -> Response:
    async def body():  # noqa: ANN202
        yield METRICS
        while True:  # a body that never ends, a byte at a time
            await asyncio.sleep(0.05)
            yield b"#"

    return StreamingResponse(body(), media_type="text/plain")


async def _never_answers() -> Response:
    await asyncio.sleep(3)  # far past the scrape's timeout
    return Response(METRICS)


FLOOD_SERIES = 500


class EndlessFlood:
    """An answer of kept series that never ends, counting the pieces the server got to send."""

    def __init__(self) -> None:
        self.sent = 0
        self.ended = threading.Event()

    def __call__(self) -> Response:
        async def body():  # noqa: ANN202
            try:
                while True:
                    yield "".join(f'vllm:num_requests_running{{n="{self.sent}_{i}"}} 1\n' for i in range(1000)).encode()
                    self.sent += 1
                    await asyncio.sleep(0)
            finally:
                self.ended.set()

        return StreamingResponse(body(), media_type="text/plain")


ENDLESS = EndlessFlood()


# ~70 kB of valid lines, a two-byte character cut between two pieces, then a byte no UTF-8 has
SPLIT_HEAD = b"# pad\n" * 11_000 + b'vllm:num_requests_running{n="\xc3'
SPLIT_TAIL = b'\xa9"} 1\nx\xff\n'


def _split_character() -> Response:
    return StreamingResponse(iter([SPLIT_HEAD, SPLIT_TAIL]), media_type="text/plain")

ANSWERS: dict[str, Callable[[], Any]] = {
    "/ok": lambda: Response(METRICS, media_type="text/plain; version=0.0.4"),
    "/gzip": lambda: Response(gzip.compress(METRICS), headers={"content-encoding": "gzip"}),
    "/bomb": lambda: Response(gzip.compress(b"# x\n" * 1_000_000), headers={"content-encoding": "gzip"}),
    "/large": lambda: Response(b"# padding\n" * 1000 + METRICS),
    "/chunked-large": lambda: StreamingResponse(iter([b"# padding\n"] * 1000 + [METRICS])),
    "/dribble": _dribble,
    "/status": lambda: Response(b"no", status_code=503),
    "/redirect": lambda: Response(b"", status_code=302, headers={"location": "/ok"}),
    "/latin1": lambda: Response(b'm{a="\xe9"} 1\n'),
    "/garbage": lambda: Response(b"<html>not metrics</html>\n"),
    "/brotli": lambda: Response(METRICS, headers={"content-encoding": "br"}),
    "/slow": _never_answers,
    "/endless": ENDLESS,
    "/split-character": _split_character,
    "/flood": lambda: Response("".join(f'vllm:num_requests_running{{n="{i}"}} {i}\n' for i in range(FLOOD_SERIES))),
}


@pytest.fixture(scope="module")
def engine() -> ServerThread:
    with ServerThread(engine_app(ANSWERS)) as server:
        yield server


def _scrape(url: str, *, max_scrape_bytes: int = 8 * 2**20, timeout_s: float = 2.0, max_series: int = 1000) -> Scraped:
    async def once() -> Scraped:
        async with httpx.AsyncClient() as client:
            return await scrape_once(
                client, url, timeout_s=timeout_s, max_scrape_bytes=max_scrape_bytes, max_series=max_series,
                clock_ns=lambda: 123,
            )

    return asyncio.run(once())


@pytest.mark.parametrize("path", ["/ok", "/gzip"])
def test_a_scrape_gives_its_answers_time_and_kept_samples(engine: ServerThread, path: str) -> None:
    answered_ns, samples, capped = _scrape(engine.url + path)
    assert answered_ns == 123 and not capped
    assert [(s.name, s.value) for s in samples] == [("vllm:num_requests_running", 1.0), ("vllm:num_requests_waiting", 2.0)]


def test_a_scrape_reads_at_most_max_series_and_says_it_was_cut(engine: ServerThread) -> None:
    scraped = _scrape(engine.url + "/flood", max_series=10)
    assert scraped.capped
    assert [s.value for s in scraped.samples] == [float(i) for i in range(10)]
    assert not _scrape(engine.url + "/flood", max_series=FLOOD_SERIES).capped


def test_a_flood_is_received_only_up_to_the_cap(engine: ServerThread) -> None:
    """An answer without end, under no size limit: the scrape ends at its cap, not at its deadline,
    and the engine is cut off (it sent a few of its pieces, each 1,000 series)."""
    scraped = _scrape(engine.url + "/endless", max_scrape_bytes=2**40, timeout_s=20.0)
    assert scraped.capped and len(scraped.samples) == 1000
    assert ENDLESS.ended.wait(PATIENCE_S), "the engine was never cut off"
    assert ENDLESS.sent < 1000  # what the loopback's buffers hold (~100 here), not 20 s of sending


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/status", "HTTP 503"),
        ("/redirect", "HTTP 302"),
        ("/large", f"answer of {10_000 + len(METRICS)} bytes exceeds --max-scrape-bytes 10000"),
        ("/chunked-large", "answer exceeds --max-scrape-bytes 10000"),
        ("/bomb", "answer exceeds --max-scrape-bytes 10000"),
        ("/latin1", "answer is not UTF-8 (byte 5)"),
        ("/garbage", "not the Prometheus text format: line 1: expected a metric name"),
        ("/brotli", "unsupported Content-Encoding 'br'"),
    ],
)
def test_a_failed_scrape_says_why(engine: ServerThread, path: str, reason: str) -> None:
    with pytest.raises(ScrapeFailed) as caught:
        _scrape(engine.url + path, max_scrape_bytes=10_000)
    assert str(caught.value).startswith(reason)


def test_a_byte_that_is_no_utf8_is_named_by_its_place_in_the_answer_across_pieces(engine: ServerThread) -> None:
    with pytest.raises(ScrapeFailed) as caught:
        _scrape(engine.url + "/split-character")
    bad_at = len(SPLIT_HEAD) + SPLIT_TAIL.index(b"\xff")
    assert str(caught.value) == f"answer is not UTF-8 (byte {bad_at})"


@pytest.mark.parametrize("path", ["/slow", "/dribble"])
def test_a_scrape_that_does_not_complete_in_time_fails(engine: ServerThread, path: str) -> None:
    with pytest.raises(ScrapeFailed, match=r"within 0\.3 s"):
        _scrape(engine.url + path, timeout_s=0.3)


def test_the_timeout_bounds_the_whole_exchange_even_while_the_head_trickles_in() -> None:
    """httpx's timeouts are per read; a head sent a byte every 0.5 s took 43 s with a 1 s timeout."""
    server = TricklingHead()
    try:
        started = time.monotonic()
        with pytest.raises(ScrapeFailed, match=r"^no answer within 1 s$"):
            _scrape(server.url, timeout_s=1.0)
        # a behaviour bound, not a speed: well before the server has sent its head
        assert time.monotonic() - started < server.total_s / 2
    finally:
        server.close()


def test_an_invalid_url_fails_the_scrape_as_any_failure_does() -> None:
    with pytest.raises(ScrapeFailed, match="InvalidURL"):  # not an httpx.HTTPError: it took the "unexpected" path
        _scrape("http://h\x00/m")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://user:secret@127.0.0.1:8000/metrics", "'http://***@127.0.0.1:8000/metrics' holds credentials"),
        ("http://user@h/metrics", "holds credentials"),
        ("http://h /m", "holds spaces or control characters"),
        (" http://h/m", "holds spaces or control characters"),
        ("http://h\t/m", "holds spaces or control characters"),
        ("http://h:0/metrics", "port 0 cannot be connected to"),
        ("http://h:99999/metrics", "is not a URL"),
        ("http://h$x/metrics", "'h$x' is not a host name"),
        ("ftp://h/metrics", "is not an http:// or https:// URL"),
        ("http://h/metrics#x", "has a fragment"),
    ],
)
def test_urls_that_cannot_be_scraped_or_would_leak_credentials_are_refused(url: str, problem: str) -> None:
    assert problem in (target_problem(url) or "")
    assert "secret" not in (target_problem(url) or "")
    with pytest.raises(ValueError, match=re.escape(problem)):
        Scraper([url], ListSink())


def test_urls_with_a_path_a_query_ipv6_or_https_are_accepted() -> None:
    for url in ("http://127.0.0.1:8000/metrics", "https://engine.example/a/metrics?x=1", "http://[::1]:8000/metrics"):
        assert target_problem(url) is None


def test_collect_refuses_a_scrape_url_with_credentials_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from restorelens.cli import cli

    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(cli, ["collect", "--db", str(db), "--port", "0", "--scrape", "http://u:secret@h/metrics"])
    assert result.exit_code != 0 and "Traceback" not in result.output and "secret" not in result.output
    assert "--scrape" in result.output and "holds credentials" in result.output
    assert not db.exists()


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ("100001", "Error: setting --max-series-per-scrape: at most 100000, the engine metric samples the store's "
                   "writer lets wait: a larger scrape could never be stored"),
        ("0", "Error: Invalid value for '--max-series-per-scrape': 0 is not in the range x>=1."),
    ],
)
def test_collect_refuses_a_series_cap_it_could_not_keep_in_one_line(tmp_path: Path, given: str, problem: str) -> None:
    from click.testing import CliRunner

    from restorelens.cli import cli

    db = tmp_path / "t.duckdb"
    result = CliRunner().invoke(cli, ["collect", "--db", str(db), "--port", "0", "--max-series-per-scrape", given])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert result.output.strip().splitlines()[-1] == problem
    assert not db.exists()


def test_a_dead_target_fails_the_scrape() -> None:
    with bind_socket(listen=False) as sock:  # bound, never listening: refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
        with pytest.raises(ScrapeFailed, match="ConnectError"):
            _scrape(url)
