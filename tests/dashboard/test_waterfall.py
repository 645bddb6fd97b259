"""The trace explorer's waterfall on a real sample trace: a cold start's request, answered 503 five
times while the model loaded and then served, and the ``modelclaim.wake`` span linking to it."""

from __future__ import annotations

import html
import json
from pathlib import Path

import plotly.graph_objects as go
import polars as pl
import pytest

from restorelens import spans as sc
from restorelens.analysis import Analysis
from restorelens.collector import load_paths
from restorelens.dashboard import palette
from restorelens.dashboard.waterfall import (MIN_BAR_SHARE, explorer_link, http_status, linked, waterfall,
                                             with_status)

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "modelclaim-cold-start.jsonl"
MARKUP = "<b>x</b>"


@pytest.fixture(scope="module")
def cold_start(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The sample's ``modelclaim.wake`` trace and the request trace its link names."""
    db = tmp_path_factory.mktemp("waterfall") / "spans.duckdb"
    summary = load_paths([SAMPLE], db)
    assert summary.rejected == 0 and summary.malformed == 0, summary.describe()
    with Analysis.open(db) as analysis:
        (wake_trace,) = analysis.wake_episodes()["trace_id"].to_list()
        wake = analysis.trace(wake_trace)
        (request_trace,) = linked(wake)["linked_trace_id"].to_list()
        return wake, analysis.trace(request_trace)


def bars(figure: go.Figure) -> go.Bar:
    (bar,) = [trace for trace in figure.data if trace.type == "bar"]
    return bar


def labels(figure: go.Figure) -> list[str]:
    """Each row's label (annotations in the left margin), top to bottom."""
    return [note.text for note in sorted(figure.layout.annotations, key=lambda note: note.y)]


def test_one_row_per_span_with_every_attempt_apart(cold_start: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    _, request = cold_start
    figure = waterfall(request)
    bar = bars(figure)
    assert len(bar.y) == request.height and len(set(bar.y)) == request.height
    posts = request.filter(pl.col("name") == sc.SPAN_HTTP_POST).height
    assert posts >= 6  # five 503s, the served attempt and the gate's upstream call
    rows = labels(figure)
    assert sorted(note.y for note in figure.layout.annotations) == sorted(bar.y)
    assert sum(sc.SPAN_HTTP_POST in label for label in rows) == posts
    # in tree order and indented by depth
    assert [label.startswith("\u00a0" * 3 * depth) and not label.startswith("\u00a0" * (3 * depth + 1))
            for label, depth in zip(rows, request["depth"], strict=True)] == [True] * request.height


def test_the_503_attempts_are_in_the_status_colour(cold_start: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    _, request = cold_start
    figure = waterfall(request)
    bar = bars(figure)
    statuses = with_status(request)["http_status"].to_list()
    assert statuses.count(503) >= 5
    for status, service, colour, label in zip(statuses, request["service_name"], bar.marker.color,
                                              labels(figure), strict=True):
        if status == 503:
            assert colour == palette.STATUS[503] and label.endswith("503")
        else:
            assert colour == palette.colour(service, palette.SERVICES)
    assert [row[3] for row in bar.customdata].count("HTTP 503 Service Unavailable") == statuses.count(503)
    legend = {trace.name for trace in figure.data if trace.showlegend is not False}
    assert "answered 503 Service Unavailable" in legend
    assert set(request["service_name"]) <= legend


def test_a_429_under_the_old_attribute_name_is_highlighted_too(cold_start: tuple[pl.DataFrame, pl.DataFrame],
                                                              ) -> None:
    _, request = cold_start
    answered = [[{"key": sc.ATTR_HTTP_STATUS_CODE_OLD, "value": "429"}]] * request.height
    figure = waterfall(request.with_columns(pl.Series("attributes", answered)))
    assert set(bars(figure).marker.color) == {palette.STATUS[429]}
    assert http_status({sc.ATTR_HTTP_STATUS_CODE: "503", sc.ATTR_HTTP_STATUS_CODE_OLD: "429"}) == 503
    assert http_status({sc.ATTR_HTTP_STATUS_CODE: "n/a"}) is None and http_status(None) is None


def test_every_bar_is_at_least_the_minimum_width_and_the_hover_keeps_its_duration(
        cold_start: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    _, request = cold_start
    bar = bars(waterfall(request))
    extent = max(o + d for o, d in zip(request["offset_s"], request["duration_s"], strict=True))
    assert extent > 50.0
    narrowest = MIN_BAR_SHARE * extent
    assert min(bar.x) == pytest.approx(narrowest)
    durations = request["duration_s"].to_list()
    assert sum(d < narrowest for d in durations) >= 10  # the 503 attempts took no virtual time
    assert [row[2] for row in bar.customdata] == durations
    assert "%{x" not in bar.hovertemplate  # the drawn width is never shown as the duration


def test_text_from_the_spans_shows_as_written(cold_start: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    _, request = cold_start
    hostile = request.with_columns(pl.lit(MARKUP).alias("name"), pl.lit(MARKUP).alias("service_name"),
                                   pl.col("event_names").list.eval(pl.lit(MARKUP)))
    figure = waterfall(hostile)
    spec = json.dumps(figure.to_plotly_json())
    assert MARKUP not in spec
    escaped = html.escape(MARKUP, quote=False)
    assert all(label.endswith((escaped, f"{escaped} · 503", f"{escaped} · 200"))
               for label in labels(figure))
    assert {row[0] for row in bars(figure).customdata} == {escaped}
    assert escaped in {trace.name for trace in figure.data}


def test_an_empty_trace_is_an_empty_figure(cold_start: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    _, request = cold_start
    assert waterfall(request.clear()).data == ()


def test_the_wake_links_to_its_request(cold_start: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    wake, request = cold_start
    (link,) = linked(wake).iter_rows(named=True)
    assert link["name"] == sc.SPAN_MODELCLAIM_WAKE and link["span_id"] == wake["span_id"][0]
    assert link["linked_span_id"] in request["span_id"].to_list()
    assert explorer_link(link["linked_trace_id"]) == f"traces?trace={link['linked_trace_id']}"
    assert linked(request).is_empty()  # the request's own spans link nowhere


@pytest.mark.parametrize("value", ["javascript:alert(1)", "../overview", "0" * 31, "g" * 32, "", None,
                                   "0" * 32 + ")[x](https://evil.example"])
def test_only_a_trace_id_becomes_a_link(value: object) -> None:
    assert explorer_link(value) is None


def test_a_long_span_name_is_shortened_in_its_row_and_whole_in_the_hover(
        cold_start: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    _, request = cold_start
    long = "x" * 100
    figure = waterfall(request.with_columns(pl.lit(long).alias("name")))
    assert all(len(label.lstrip("\u00a0").split(" · ")[0]) < 50 for label in labels(figure))
    assert {row[0] for row in bars(figure).customdata} == {long}
