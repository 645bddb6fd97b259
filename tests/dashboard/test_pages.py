"""An AppTest per page on the realistic store: no exception, and the key numbers and event labels
are in the rendered figures' specs. Plus empty stores, invalid files and URL-selected views."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import streamlit as st
from rendered import INJECTED, seen
from streamlit.testing.v1 import AppTest

from restorelens.analysis import Analysis
from restorelens.collector import load_paths
from restorelens.dashboard import source

PAGES = Path(__file__).resolve().parents[2] / "dashboard" / "pages"
TIMEOUT_S = 60  # DuckDB loads on a shared 2-core machine; a bound, not a speed claim


@pytest.fixture(autouse=True)
def fresh_caches() -> None:
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def on_store(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(source.DB_ENV, str(store_path))
    monkeypatch.delenv(source.LIMITS_ENV, raising=False)
    return store_path


def run_page(name: str, **query: str) -> AppTest:
    app = AppTest.from_file(str(PAGES / f"{name}.py"), default_timeout=TIMEOUT_S)
    for key, value in query.items():
        app.query_params[key] = value
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def specs(app: AppTest) -> list[dict]:
    return [json.loads(element.proto.spec) for element in app.get("plotly_chart")]


def texts(spec: dict) -> list[str]:
    return [str(t) for trace in spec["data"] for t in (trace.get("text") or [])]


def test_overview_shows_counts_statistics_and_broken_limits(on_store: Path) -> None:
    app = run_page("overview")
    assert "requests" not in {m.label for m in app.metric}
    app.toggle(key="requests").set_value(True).run()
    assert not app.exception
    metrics = {m.label: m.value for m in app.metric}
    with Analysis.open(on_store) as analysis:
        assert metrics["lending episodes"] == str(analysis.lending_episodes().height)
        assert metrics["requests"] == str(analysis.requests().height)
    assert metrics["wake episodes"] == "3"
    assert any("wake.overshoot_s.p95" in seen(e.value) for e in app.error)
    wake_spec = next(s for s in specs(app) if "Wake episodes" in s["layout"]["title"]["text"])
    names = {trace["name"] for trace in wake_spec["data"]}
    assert "tiny · cold-start max" in names
    (cold_max,) = [t for t in wake_spec["data"] if t["name"] == "tiny · cold-start max"]
    assert dict(zip(cold_max["x"], cold_max["y"], strict=True))["overshoot_s"] == 0.5


def test_overview_limits_come_from_the_cli(on_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(source.LIMITS_ENV, "wake.overshoot_s.max=100;lending.drain_s.max=100")
    app = run_page("overview")
    assert not app.error
    assert any("Every limit holds" in s.value for s in app.success)


def test_lending_page_draws_the_selected_episode(on_store: Path) -> None:
    with Analysis.open(on_store) as analysis:
        episode = analysis.lending_episodes().row(-1, named=True)
    app = run_page("lending", episode=episode["span_id"])
    (timeline,) = specs(app)
    labels = texts(timeline)
    for label in ("demand returned", "grant restored", "borrowed drained", "engine scheduled", "first token"):
        assert label in labels
    marks = next(t for t in timeline["data"] if t.get("name") == "events")
    events = dict(zip(marks["text"], marks["x"], strict=True))
    assert events["borrowed drained"] == pytest.approx(episode["drain_s"])
    assert {t.get("name") for t in timeline["data"]} >= {"own slots", "borrowed slots"}
    assert app.query_params["episode"] == episode["span_id"]
    assert {m.label: m.value for m in app.metric}["borrowed drained"] == f"{episode['drain_s']:.3f} s"


def test_wake_page_draws_retries_hint_and_overshoot(on_store: Path) -> None:
    with Analysis.open(on_store) as analysis:
        cold = analysis.wake_episodes().filter(pl.col("wake_path") == "cold-start").row(0, named=True)
    app = run_page("wakes", episode=cold["span_id"])
    timeline, scatter = specs(app)
    labels = texts(timeline)
    for label in ("first 503", "Retry-After elapses", "wake start", "engine ready", "readiness observed",
                  "retry 1 → 503", "retry 2 → 503", "success 200", "first token"):
        assert label in labels
    band = [shape for shape in timeline["layout"]["shapes"] if shape["type"] == "rect"]
    assert [(b["x0"], b["x1"]) for b in band] == [(31.25, 31.75)]
    assert sum(len(t["x"]) for t in scatter["data"] if t["name"] != "hint = ready") == 3
    assert {m.label: m.value for m in app.metric}["attempts"] == "4"


def test_an_unknown_episode_in_the_link_falls_back_with_a_warning(on_store: Path) -> None:
    app = run_page("wakes", episode="feedfacefeedface")
    assert app.warning and "feedfacefeedface" in app.warning[0].value
    assert len(specs(app)) == 2


def test_policy_page_plots_one_dot_per_seed_and_paired_differences(on_store: Path) -> None:
    app = run_page("policies")
    goodput, paired = specs(app)
    slo = next(t for t in goodput["data"] if t["name"] == "balanced interactive_slo_goodput_rps")
    assert sorted(slo["x"]) == ["lend", "lend", "static", "static"]
    assert "policy − static" in paired["layout"]["title"]["text"]
    assert {t["x"][0] for t in paired["data"] if t.get("x")} == {"lend"}


def test_lifecycle_page_has_a_lane_per_model(on_store: Path) -> None:
    app = run_page("lifecycle")
    (lanes,) = specs(app)
    assert {t["name"] for t in lanes["data"]} == {"Sleeping", "Waking", "Ready"}
    assert {y for t in lanes["data"] for y in t["y"]} == {"tiny", "small"}


def test_trace_explorer_finds_a_request_and_keeps_its_trace_in_the_url(on_store: Path) -> None:
    app = run_page("traces")
    assert app.info and not app.get("plotly_chart")
    app = run_page("traces", request="wake-2")
    (waterfall,) = specs(app)
    bars = " ".join(waterfall["data"][0]["y"])
    for name in ("client.request", "POST", "gate.request", "llm_request"):
        assert name in bars
    trace_id = app.query_params["trace"]
    assert run_page("traces", trace=trace_id).get("plotly_chart")


def test_an_unknown_trace_is_a_message(on_store: Path) -> None:
    app = run_page("traces", trace="0" * 32)
    assert any("No request or trace" in i.value for i in app.info)


@pytest.mark.parametrize("page", ["overview", "lending", "wakes", "policies", "lifecycle", "traces"])
def test_every_page_on_an_empty_store_says_so(page: str, empty_store_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(source.DB_ENV, str(empty_store_path))
    app = run_page(page)
    assert app.info, f"{page}: no message"
    assert not app.get("plotly_chart")


@pytest.mark.parametrize("page", ["overview", "traces"])
def test_an_invalid_file_is_one_error_line(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bogus = tmp_path / "notes.duckdb"
    bogus.write_text("not a database\n")
    monkeypatch.setenv(source.DB_ENV, str(bogus))
    app = run_page(page)
    assert len(app.error) == 1 and str(bogus) in seen(app.error[0].value)


def test_without_a_store_the_page_explains_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(source.DB_ENV, raising=False)
    app = run_page("overview")
    assert "restorelens dashboard --db FILE" in app.info[0].value


def bodies(app: AppTest) -> list[str]:
    """Every markdown body on the page (Streamlit renders markdown in each of these)."""
    kinds = ("markdown", "caption", "info", "warning", "error", "success", "title", "subheader")
    return [element.value for kind in kinds for element in getattr(app, kind)]


@pytest.mark.parametrize(("page", "param"), [("traces", "trace"), ("traces", "request"), ("lending", "episode"),
                                             ("wakes", "episode")])
def test_text_from_the_link_shows_as_written_never_as_markdown(on_store: Path, page: str, param: str) -> None:
    app = run_page(page, **{param: INJECTED})
    shown = [seen(body) for body in bodies(app)]  # seen() fails on a link, an image or raw HTML
    assert any(repr(INJECTED) in text for text in shown), shown


def test_text_from_the_spans_shows_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sample = source.SAMPLE_DIR / "modelclaim-in-place.jsonl"
    spans = tmp_path / "spans.jsonl"
    spans.write_text(sample.read_text().replace('"restorelens-sim"', json.dumps(INJECTED)))
    load_paths([spans], tmp_path / "spans.duckdb")
    monkeypatch.setenv(source.DB_ENV, str(tmp_path / "spans.duckdb"))
    with Analysis.open(tmp_path / "spans.duckdb") as analysis:
        trace_id = analysis.requests()["trace_id"][0]
    app = run_page("traces", trace=trace_id)
    shown = [seen(body) for body in bodies(app)]
    assert any(f"services: {INJECTED}" in text or f"{INJECTED}, " in text for text in shown), shown
