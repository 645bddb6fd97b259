"""Text from the spans never becomes markup in a figure (issue #17).

Plotly reads a subset of HTML in every text it draws (trace names, legends, hover text, tick
labels, annotations, titles): a span named ``<a href="...">x</a>`` would be a link in the chart.
Every figure is built from a store whose span, service and model names, policies, workloads,
paths and ids carry such markup (``dashboard_stores.HOSTILE``); its JSON must hold none of it as
tags, yet show it, as Plotly draws text, character for character.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

import plotly.graph_objects as go
import polars as pl
import pytest
from dashboard_stores import HOSTILE

from restorelens.analysis import Analysis
from restorelens.dashboard import figures, frontier, lifecycle, palette, timelines
from restorelens.dashboard.engine import engine_summary
from restorelens.dashboard.episodes import lending_detail, wake_detail
from restorelens.dashboard.overview import overview
from restorelens.dashboard.pressure import episode_pressure
from restorelens.dashboard.segments import SEGMENTS
from restorelens.dashboard.waterfall import waterfall

#: Tags our own templates and hover texts use; any other tag in a figure came from the data.
OUR_TAGS = {"br", "b", "extra"}
#: Plotly's named entities (svg_text_utils.js); the rest of "&name;" is drawn as written.
PLOTLY_ENTITIES = {"mu": "μ", "amp": "&", "lt": "<", "gt": ">", "nbsp": "\xa0", "times": "×", "plusmn": "±",
                   "deg": "°"}
_TAG = re.compile(r"<\s*/?\s*([A-Za-z]+)[^<>]*>")
_SPLIT_TAGS = re.compile(r"(<[^<>]*>)")
_ENTITY = re.compile(r"&(#\d+|#x[\da-fA-F]+|[a-z]+);")


def drawn(text: str) -> str:
    """The characters Plotly draws for ``text``: tags read (dropped here), entities converted."""
    def entity(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("#x"):
            return chr(int(name[2:], 16))
        if name.startswith("#"):
            return chr(int(name[1:]))
        return PLOTLY_ENTITIES.get(name, match.group(0))

    return "".join(_ENTITY.sub(entity, part) for part in _SPLIT_TAGS.split(text) if not _SPLIT_TAGS.fullmatch(part))


def strings(node: object, path: str = "") -> Iterator[tuple[str, str]]:
    """(path, string) for every string in a figure's JSON."""
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, f"{path}.{key}")
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            yield from strings(value, f"{path}[{index}]")


@pytest.fixture(scope="module")
def hostile_figures(hostile_store_path: Path) -> dict[str, go.Figure]:
    """Every figure the pages draw, built from the hostile store the way the pages build them."""
    with Analysis.open(hostile_store_path) as analysis:
        built: dict[str, go.Figure] = {}
        shown = overview(analysis, include_requests=True)
        for kind, segments in (("lending", shown.lending_segments), ("wake", shown.wake_segments)):
            built[f"{kind} bars"] = figures.time_bars(segments, figures.TIME_BAR_TITLES[kind], SEGMENTS[kind])
        built["lending ecdf"] = figures.engine_distributions(shown.lending_curves, figures.LENDING_TITLES,
                                                             ("policy",), known=palette.POLICIES)
        built["wake ecdf"] = figures.engine_distributions(shown.wake_curves, figures.WAKE_TITLES, ("wake path",),
                                                          known=palette.WAKE_PATHS)
        page = frontier.policy_page(analysis.policy_summary(), analysis.requests(), analysis.lending_episodes())
        built["frontier"] = frontier.frontier_figure(page)
        built["gates"] = frontier.gates_figure(page)
        built["ttft"] = frontier.ttft_figure(page, analysis.slo)
        built["lifecycle"] = lifecycle.lifecycle_swimlanes(analysis.lifecycle_intervals())
        if lifecycle.carries_memory(analysis.lifecycle_intervals()):
            built["memory"] = lifecycle.memory_over_time(analysis.lifecycle_intervals())
        request = analysis.requests().filter(pl.col("request_id").str.starts_with("wake-0")).row(0, named=True)
        built["waterfall"] = waterfall(analysis.trace(request["trace_id"]))
        episode = analysis.lending_episodes().row(0, named=True)
        gates = analysis.view("gate_requests").select("run_id", "policy", "slot", "grant_ns", "end_ns")
        built["lending timeline"] = timelines.lending_timeline(lending_detail(episode, gates))
        wakes = analysis.wake_episodes()
        for wake in wakes.iter_rows(named=True):
            typed = analysis.view("typed_model_wakes").filter(pl.col("span_id") == wake["span_id"])
            attempts = analysis.attempts().filter(pl.col("trace_id") == wake["request_trace_id"])
            detail = wake_detail(wake, typed.row(0, named=True) if typed.height else None, attempts)
            built[f"wake timeline {wake['wake_path'][:12]}"] = timelines.wake_timeline(detail)
        built["hint scatter"] = timelines.hint_scatter(wakes)
        engine = engine_summary(analysis.engine_requests(), by_policy=True)
        built["engine distributions"] = figures.engine_distributions(engine.curves)
        t0_ns = 1_000_000_000_000
        scrapes = pl.DataFrame({"at_ns": [t0_ns, t0_ns + 10**9], "target": [HOSTILE] * 2, "model_name": [HOSTILE] * 2,
                                "engine_index": ["0", "1"], "running": [1.0, 2.0], "waiting": [0.0, 1.0],
                                "kv_cache_usage_fraction": [0.5, 0.75], "preemptions_total": [0.0, 0.0]})
        built["pressure timeline"] = timelines.pressure_timeline(episode_pressure(scrapes, HOSTILE, t0_ns,
                                                                                       -5.0, 5.0))
    return built


def test_the_hostile_store_carries_markup_everywhere(hostile_store_path: Path) -> None:
    with Analysis.open(hostile_store_path) as analysis:
        spans = analysis.trace(analysis.requests()["trace_id"][0])
        assert HOSTILE in spans["name"].to_list()
        assert all(name.endswith(HOSTILE) for name in spans["service_name"])
        assert all(model.endswith(HOSTILE) for model in analysis.wake_episodes()["model"])
        assert all(policy.endswith(HOSTILE) for policy in analysis.lending_episodes()["policy"])


def test_no_figure_reads_markup_from_the_spans(hostile_figures: dict[str, go.Figure]) -> None:
    offending = []
    for name, figure in hostile_figures.items():
        for path, text in strings(figure.to_plotly_json()):
            tags = {tag.lower() for tag in _TAG.findall(text)}
            if tags - OUR_TAGS or "<b>bold" in text or "</span><br>" in text:
                offending.append(f"{name}{path}: {text[:160]!r}")
    assert offending == []


def test_text_from_the_spans_is_drawn_as_written(hostile_figures: dict[str, go.Figure]) -> None:
    # Escaped once, not twice: Plotly draws the hostile text character for character (its own
    # "&amp;" included), in every figure, wherever the data shows.
    for name, figure in hostile_figures.items():
        shown = [drawn(text) for _, text in strings(figure.to_plotly_json())]
        assert any(HOSTILE in text for text in shown), name


def test_no_data_is_formatted_into_a_hover_template(hostile_figures: dict[str, go.Figure]) -> None:
    # Data reaches our templates through %{...} fields only: a "%{" in a span name stays text.
    for name, figure in hostile_figures.items():
        for path, text in strings(figure.to_plotly_json()):
            if path.endswith("hovertemplate"):
                assert "evil" not in html.unescape(text), f"{name}{path}"


@pytest.mark.parametrize(("value", "escaped"), [
    ('<a href="https://evil.example">x</a>', '&lt;a href="https://evil.example"&gt;x&lt;/a&gt;'),
    ("<b>b</b> & <br>", "&lt;b&gt;b&lt;/b&gt; &amp; &lt;br&gt;"),
    ("a &lt; b", "a &amp;lt; b"),
    ("plain · text → 503", "plain · text → 503"),
    (None, "None"),
])
def test_literal_escapes_exactly_what_plotly_reads(value: object, escaped: str) -> None:
    assert figures.literal(value) == escaped
    assert drawn(escaped) == str(value)


def test_literals_keep_numbers_and_nulls() -> None:
    assert figures.literals(["<b>", 1, None, 2.5]) == ["&lt;b&gt;", 1, None, 2.5]
    assert drawn(figures.literal(HOSTILE)) == HOSTILE
