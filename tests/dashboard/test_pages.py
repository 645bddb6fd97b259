"""An AppTest per page on the realistic store: no exception, and the key numbers and event labels
are in the rendered figures' specs. Plus empty stores, invalid files and URL-selected views."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import streamlit as st
from dashboard_stores import ARMLESS, GATELESS, GATELESS_TIER, TINY_SCRAPES
from rendered import INJECTED, seen
from streamlit.testing.v1 import AppTest

from restorelens import spans as sc
from restorelens.analysis import Analysis, percentiles_of
from restorelens.analysis.report import ENGINE_METRICS, NO_GATE
from restorelens.collector import load_paths
from restorelens.dashboard import environment, figures, source, ui
from restorelens.dashboard.labels import MISSING
from restorelens.dashboard.segments import OUTSIDE_ENGINE_SPANS, PROCESS_STARTED
from restorelens.gate.modelclaim.phases import PHASES

PAGES = Path(__file__).resolve().parents[2] / "dashboard" / "pages"
TIMEOUT_S = 60  # DuckDB loads on a shared 2-core machine; a bound, not a speed claim


@pytest.fixture(autouse=True)
def fresh_caches() -> None:
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def on_store(store_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(environment.DB_ENV, str(store_path))
    monkeypatch.delenv(environment.LIMITS_ENV, raising=False)
    monkeypatch.delenv(environment.LABELS_ENV, raising=False)
    return store_path


@pytest.fixture
def on_engine_store(engine_store_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(environment.DB_ENV, str(engine_store_path))
    monkeypatch.delenv(environment.LIMITS_ENV, raising=False)
    monkeypatch.delenv(environment.LABELS_ENV, raising=False)
    return engine_store_path


@pytest.fixture
def on_gateless_store(gateless_store_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(environment.DB_ENV, str(gateless_store_path))
    monkeypatch.delenv(environment.LIMITS_ENV, raising=False)
    monkeypatch.delenv(environment.LABELS_ENV, raising=False)
    return gateless_store_path


@pytest.fixture
def on_armless_store(armless_store_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(environment.DB_ENV, str(armless_store_path))
    monkeypatch.delenv(environment.LIMITS_ENV, raising=False)
    monkeypatch.delenv(environment.LABELS_ENV, raising=False)
    return armless_store_path


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
    charts = {s["layout"]["title"]["text"]: s for s in specs(app)}
    # where the time went: one bar per wake episode, stretches named by the instant that ends them
    bars = charts[figures.TIME_BAR_TITLES["wake"]]
    # the cold start's engine exported its startup spans: its stretch to engine ready is split
    assert [trace["name"] for trace in bars["data"]] == [
        PROCESS_STARTED, sc.SPAN_VLLM_OVERALL_LOADING, OUTSIDE_ENGINE_SPANS, "engine ready", "readiness observed",
        "retry", "engine scheduled", "first token"]
    assert len({y for trace in bars["data"] for y in trace["y"]}) == 3
    with Analysis.open(on_store) as analysis:
        cold = analysis.wake_episodes().filter(pl.col("wake_path") == "cold-start").row(0, named=True)
    cold_bars = {t["name"]: [(base, x) for base, x, y in zip(t["base"], t["x"], t["y"], strict=True)
                             if "cold-start" in y] for t in bars["data"]}
    assert cold_bars["engine ready"] == []
    assert cold_bars[sc.SPAN_VLLM_OVERALL_LOADING] == [(cold["process_started_s"] + 2.0, 24.0)]
    outside = cold_bars[OUTSIDE_ENGINE_SPANS]
    assert sum(x for _, x in outside) == cold["outside_engine_spans_s"] == 7.1875
    assert max(base + x for base, x in outside) == pytest.approx(cold["ready_s"])
    (warm_ready,) = [x for t in bars["data"] if t["name"] == "engine ready"
                     for x, y in zip(t["x"], t["y"], strict=True) if "in-place" in y]
    assert warm_ready == 4.0625
    # distributions: an ECDF per wake path, its legend named by the paths on the spans
    ecdf = charts["Distribution per wake path (share of episodes at or below)"]
    with Analysis.open(on_store) as analysis:
        assert {t["name"] for t in ecdf["data"]} == set(analysis.wake_episodes()["wake_path"].to_list())
    assert charts[figures.TIME_BAR_TITLES["lending"]]


def test_overview_limits_come_from_the_cli(on_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.LIMITS_ENV, "wake.overshoot_s.max=100;lending.drain_s.max=100")
    app = run_page("overview")
    assert not app.error
    assert any("Every limit holds" in s.value for s in app.success)


def test_lending_page_draws_the_selected_episode(on_store: Path) -> None:
    with Analysis.open(on_store) as analysis:
        episode = analysis.lending_episodes().row(-1, named=True)
    app = run_page("lending", episode=episode["span_id"])
    bars, timeline = specs(app)
    with Analysis.open(on_store) as analysis:  # one bar per lending episode
        assert len({y for trace in bars["data"] for y in trace["y"]}) == analysis.lending_episodes().height
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
    bars, timeline, scatter = specs(app)
    assert len({y for trace in bars["data"] for y in trace["y"]}) == 3  # one bar per wake episode
    labels = texts(timeline)
    for label in ("first 503", "Retry-After elapses", "wake start", "engine ready", "readiness observed",
                  "retry 1 → 503", "retry 2 → 503", "success 200", "first token"):
        assert label in labels
    band = [shape for shape in timeline["layout"]["shapes"] if shape["type"] == "rect"]
    assert [(b["x0"], b["x1"]) for b in band] == [(31.25, 31.75)]
    assert sum(len(t["x"]) for t in scatter["data"] if t["name"] != "hint = ready") == 3
    assert {m.label: m.value for m in app.metric}["attempts"] == "4"
    assert any(caption.value.startswith("Attempts linked by their trace") for caption in app.caption)
    # the engine's startup phases: their statistics, then this wake's spans, then every episode
    stats, own, _ = (frame.value for frame in app.dataframe)
    assert list(stats["phase"]) == [sc.SPAN_VLLM_OVERALL_LOADING, sc.SPAN_VLLM_ENGINE_CORE_PROC_INIT,
                                    sc.SPAN_VLLM_LOAD_MODEL, sc.SPAN_VLLM_WARMUP_CPU, OUTSIDE_ENGINE_SPANS,
                                    "engine spans (covered)", "share covered"]
    assert list(stats["max"])[4] == 7.1875
    assert list(own["phase"]) == [sc.SPAN_VLLM_OVERALL_LOADING, f"· {sc.SPAN_VLLM_ENGINE_CORE_PROC_INIT}",
                                  f"· · {sc.SPAN_VLLM_LOAD_MODEL}", f"· · {sc.SPAN_VLLM_WARMUP_CPU}"]
    assert any("7.1875 s outside the engine's spans" in caption.value for caption in app.caption)


def test_a_wake_without_engine_spans_shows_no_phases_of_its_own(on_store: Path) -> None:
    with Analysis.open(on_store) as analysis:
        warm = analysis.wake_episodes().filter(pl.col("wake_path") == "in-place").row(0, named=True)
    app = run_page("wakes", episode=warm["span_id"])
    assert len(app.dataframe) == 2  # the phases' statistics (the cold start's) and the episodes
    assert not any("outside the engine's spans" in caption.value for caption in app.caption if "This wake" in
                   caption.value)


def test_an_unknown_episode_in_the_link_falls_back_with_a_warning(on_store: Path) -> None:
    app = run_page("wakes", episode="feedfacefeedface")
    assert app.warning and "feedfacefeedface" in app.warning[0].value
    assert [chart.key for chart in app.get("plotly_chart")] == ["wake-bars", "wake-timeline", "hint-scatter"]


def drawn_text(spec: dict) -> list[str]:
    """Every text a figure draws: its title, panel titles, axis titles, legend names and ticks."""
    layout = spec["layout"]
    shown = [layout.get("title", {}).get("text", ""), *panel_titles(spec)]
    shown += [axis.get("title", {}).get("text", "") for name, axis in layout.items() if name.startswith(("xaxis",
                                                                                                          "yaxis"))]
    for trace in spec["data"]:
        shown += [str(trace.get("name", "")), *(str(x) for x in trace.get("x") or [])]
    return shown


def test_lifecycle_page_has_a_lane_per_model(on_store: Path) -> None:
    app = run_page("lifecycle")
    lanes = specs(app)[0]
    # every phase the lifecycle has, in its legend, whether the store holds it or not
    assert [t["name"] for t in lanes["data"] if t.get("showlegend", True)] == list(PHASES)
    assert {y for t in lanes["data"] for y in t["y"] if y is not None} == {"tiny · pod-a", "small · pod-a"}


def test_trace_explorer_finds_a_request_and_keeps_its_trace_in_the_url(on_store: Path) -> None:
    app = run_page("traces")
    assert app.info and not app.get("plotly_chart")
    app = run_page("traces", request="wake-2")
    (waterfall,) = specs(app)
    bars = " ".join(note["text"] for note in waterfall["layout"]["annotations"])  # each span's row label
    for name in ("client.request", "POST", "gate.request", "llm_request"):
        assert name in bars
    trace_id = app.query_params["trace"]
    assert run_page("traces", trace=trace_id).get("plotly_chart")


def test_an_unknown_trace_is_a_message(on_store: Path) -> None:
    app = run_page("traces", trace="0" * 32)
    assert any("No request or trace" in i.value for i in app.info)


@pytest.mark.parametrize("page", ["overview", "lending", "wakes", "engine", "policies", "lifecycle", "traces"])
def test_every_page_on_an_empty_store_says_so(page: str, empty_store_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.DB_ENV, str(empty_store_path))
    app = run_page(page)
    assert app.info, f"{page}: no message"
    assert not app.get("plotly_chart")


@pytest.mark.parametrize("page", ["overview", "traces"])
def test_an_invalid_file_is_one_error_line(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bogus = tmp_path / "notes.duckdb"
    bogus.write_text("not a database\n")
    monkeypatch.setenv(environment.DB_ENV, str(bogus))
    app = run_page(page)
    assert len(app.error) == 1 and str(bogus) in seen(app.error[0].value)


def test_without_a_store_the_page_explains_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environment.DB_ENV, raising=False)
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
    monkeypatch.setenv(environment.DB_ENV, str(tmp_path / "spans.duckdb"))
    with Analysis.open(tmp_path / "spans.duckdb") as analysis:
        trace_id = analysis.requests()["trace_id"][0]
    app = run_page("traces", trace=trace_id)
    shown = [seen(body) for body in bodies(app)]
    assert any(f"services: {INJECTED}" in text or f"{INJECTED}, " in text for text in shown), shown


# --- the engine page ----------------------------------------------------------------------------


def by_name(spec: dict) -> dict[str, list[dict]]:
    """A figure's traces by their legend name (one per panel for the engine distributions)."""
    traces: dict[str, list[dict]] = {}
    for trace in spec["data"]:
        traces.setdefault(trace.get("name"), []).append(trace)
    return traces


def panel_titles(spec: dict) -> list[str]:
    return [annotation["text"] for annotation in spec["layout"].get("annotations", [])]


def table(app: AppTest, index: int = 0) -> pl.DataFrame:
    return pl.from_pandas(app.dataframe[index].value)


def test_the_engine_page_tables_each_engine_and_class_and_draws_their_distributions(on_store: Path) -> None:
    app = run_page("engine")
    with Analysis.open(on_store) as analysis:
        requests = analysis.engine_requests()
    expected = percentiles_of(requests, ENGINE_METRICS, ["engine", "traffic_class"])
    shown = table(app)
    assert shown.columns == ["engine", "traffic_class", "metric", "count", "p50", "p90", "p95", "p99", "max"]
    assert shown.select("engine", "traffic_class", "metric", "count").rows() == \
        expected.select("engine", "traffic_class", "metric", "count").rows()
    assert shown["max"].to_list() == pytest.approx(expected["max"].to_list())
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["engine requests"] == str(requests.height) == metrics["through a gate"]
    assert metrics["no gate"] == "0"
    (figure,) = specs(app)
    titles = panel_titles(figure)
    assert titles == ["queue (time_in_queue)", "schedule delay (upper bound)", "TTFT", "prefill", "decode"]
    assert figure["layout"]["title"]["text"].startswith("Distribution per engine · traffic class (")
    curves = by_name(figure)
    assert set(curves) == {f"{e} · {c}" for e, c in requests.select("engine", "traffic_class").unique().rows()}
    # the TTFT panel (the third): each curve climbs to every request at or below its group's max
    ttft = next(t for t in curves["restorelens-sim · interactive"] if t["xaxis"] == "x3")
    ttft_max = expected.filter((pl.col("engine") == "restorelens-sim") & (pl.col("traffic_class") == "interactive")
                               & (pl.col("metric") == "ttft_s"))["max"][0]
    assert ttft["y"][-1] == 1.0 and ttft["x"][-1] == pytest.approx(ttft_max)
    assert ttft["y"] == sorted(ttft["y"]) and ttft["x"] == sorted(ttft["x"])


def test_the_engine_page_covers_an_app_calling_vllm_with_no_gate(on_gateless_store: Path) -> None:
    app = run_page("engine")
    (policies,) = app.multiselect
    assert policies.options == ["no gate"] and policies.value == ["no gate"]
    metrics = {m.label: m.value for m in app.metric}
    assert (metrics["engine requests"], metrics["through a gate"], metrics["no gate"]) == (str(len(GATELESS)), "0",
                                                                                          str(len(GATELESS)))
    captions = " ".join(c.value for c in app.caption)
    assert "upper bound for 4 requests and the lower bound for 1" in captions
    assert f"{len(GATELESS)} requests carry no traffic class" in captions
    (figure,) = specs(app)
    assert set(by_name(figure)) == {"unknown_service:python · no class"}
    assert "schedule delay (upper ×4, lower ×1)" in panel_titles(figure)
    app.toggle(key="engine-by-policy").set_value(True).run()
    assert not app.exception
    assert set(table(app)["policy"]) == {"no gate"}
    (figure,) = specs(app)
    assert set(by_name(figure)) == {"unknown_service:python · no class · no gate"}
    assert figure["layout"]["title"]["text"].startswith("Distribution per engine · traffic class · policy (")
    slowest = table(app, 1)
    assert slowest["schedule_delay_s"].to_list() == [2.25, 1.375, 0.75, 0.5, 0.375]
    assert slowest["schedule_point"].to_list() == ["upper", "upper", "upper", "upper", "lower"]
    assert set(slowest["policy"]) == {"no gate"}


def test_the_label_mapping_reaches_the_analysis_the_pages_open(on_gateless_store: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.LABELS_ENV, json.dumps({"traffic_class": GATELESS_TIER}))
    app = run_page("engine")
    shown = table(app).filter(pl.col("metric") == "queue_s")
    assert dict(shown.select("traffic_class", "count").rows()) == {"premium": 3, "standard": 2}
    assert shown.filter(pl.col("traffic_class") == "standard")["max"].to_list() == [2.0]
    assert not any("carry no traffic class" in c.value for c in app.caption)


def test_a_mapped_class_attribute_absent_on_the_requests_is_named(on_gateless_store: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.LABELS_ENV, json.dumps({"traffic_class": "app.class"}))
    app = run_page("engine")
    (hint,) = [seen(c.value) for c in app.caption if "carry no traffic class" in c.value]
    assert hint.startswith(f"{len(GATELESS)} requests carry no traffic class ('no class'): the mapped attribute "
                           "app.class (traffic_class = app.class, from --label or --config) is absent on them")
    assert "--label traffic_class=ATTR" not in hint and "map your own" not in hint
    # a mapping of other labels only leaves the class unmapped: the hint says how to map it
    monkeypatch.setenv(environment.LABELS_ENV, json.dumps({"workload": "app.env"}))
    st.cache_resource.clear()
    app = run_page("engine")
    (hint,) = [seen(c.value) for c in app.caption if "carry no traffic class" in c.value]
    assert "map your own attribute with restorelens dashboard --label traffic_class=ATTR" in hint


def test_a_bad_label_mapping_in_the_environment_is_one_error_line(on_gateless_store: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.LABELS_ENV, json.dumps({"tier": GATELESS_TIER}))
    app = run_page("engine")
    assert len(app.error) == 1
    assert environment.LABELS_ENV in seen(app.error[0].value) and "unknown label" in seen(app.error[0].value)


def test_a_store_without_episodes_points_at_the_engine_page(on_gateless_store: Path) -> None:
    app = run_page("overview")
    assert any("the Engine page" in i.value for i in app.info)
    # the default limits name only episode views, which hold no rows: nothing to check, as
    # `restorelens check` says, and no episode sections below
    assert [s.value for s in app.subheader] == ["Limits"]
    assert [seen(w.value).split(":")[0] for w in app.warning] == ["Nothing to check"] * 2 and not app.success


def test_engine_limits_are_checked_on_a_store_without_episodes(on_gateless_store: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # the gateless requests' queues are 0.5, 0.25, 1, 2 and 0.125 s: p95 1.8 s, one of them over 1 s
    monkeypatch.setenv(environment.LIMITS_ENV, "engine.queue_s.p95=1;lending.ttft_s.p95=5")
    app = run_page("overview")
    assert any("the Engine page" in i.value for i in app.info)
    assert [s.value for s in app.subheader] == ["Limits"]  # and no empty episode sections below
    (broken,) = [seen(e.value) for e in app.error]
    (unchecked,) = [seen(w.value) for w in app.warning]
    assert unchecked.startswith("Nothing to check: lending.ttft_s.p95=5: no values in 0 lending episodes")
    assert broken.startswith("Limit broken: engine.queue_s.p95 = 1.8") and broken.endswith("> 1 (n=5)")
    with Analysis.open(on_gateless_store) as analysis:
        over = analysis.engine_requests().filter(pl.col("queue_s") > 1)
    breaches = table(app)
    assert set(breaches["limit"]) == {"engine.queue_s.p95=1"} and set(breaches["view"]) == {"engine"}
    assert sorted(breaches["id"]) == sorted(over["trace_id"]) and over.height == 1
    monkeypatch.setenv(environment.LIMITS_ENV, "engine.queue_s.p95=5")
    app = run_page("overview")
    assert not app.error and [s.value for s in app.success] == ["Every limit holds: engine\\.queue\\_s\\.p95\\=5"]


# --- the engine's pressure on the episode pages -------------------------------------------------


def test_a_wake_episode_shows_its_models_engines_pressure_from_before_t0(on_engine_store: Path) -> None:
    with Analysis.open(on_engine_store) as analysis:
        first = analysis.wake_episodes().row(0, named=True)
    assert first["model"] == "tiny"
    app = run_page("wakes", episode=first["span_id"])
    _bars, timeline, pressure, scatter = specs(app)
    traces = {trace["name"]: trace for trace in pressure["data"]}
    a, b = "http://engine-a:8000/metrics", "http://engine-b:8000/metrics"
    assert set(traces) == {f"{engine} {what}" for engine in (a, b) for what in ("KV cache", "running", "waiting")}
    # t0 = 200 s; the window runs from 195 s to the first token (t0 + 10.75 s) + 5 s
    inside = [s for s in TINY_SCRAPES[a] if 195.0 <= s[0] <= 215.75]
    assert traces[f"{a} KV cache"]["x"] == [at - 200.0 for at, *_ in inside] == [-0.25, 0.25, 5.0, 10.5]
    assert traces[f"{a} KV cache"]["y"] == [kv for *_, kv in inside]
    assert traces[f"{a} waiting"]["y"] == [waiting for _, _, waiting, _ in inside]
    assert traces[f"{b} running"]["x"] == [-0.5, 8.0] and traces[f"{b} running"]["y"] == [1, 2]
    assert pressure["layout"]["xaxis"]["range"] == [-5.0, 15.75]
    assert any(c.value == "At t0, the last scrape (0.250 s before): 3 running, 4 waiting, KV cache 87.5% used."
               for c in app.caption)
    columns = set(table(app, -1).columns)
    assert {"engine_running_at_t0", "engine_waiting_at_t0", "engine_kv_cache_usage_at_t0",
            "engine_pressure_age_s"} <= columns


def test_a_lending_episode_shows_the_scrapes_of_its_models_engine(on_engine_store: Path) -> None:
    from dashboard_stores import MOFLUX_MODEL

    from restorelens.dashboard.episodes import episode_window, lending_events

    with Analysis.open(on_engine_store) as analysis:
        episode = analysis.lending_episodes().row(-1, named=True)
    app = run_page("lending", episode=episode["span_id"])
    _bars, timeline, pressure = specs(app)
    assert MOFLUX_MODEL in pressure["layout"]["title"]["text"]
    start_s, end_s = episode_window(lending_events(episode))
    t0_s = (episode["t0"] - episode["t0"].replace(minute=0, second=0, microsecond=0)).total_seconds()
    expected = [k / 2 - t0_s for k in range(300) if start_s <= k / 2 - t0_s <= end_s]
    running = next(t for t in pressure["data"] if t["name"] == "http://moflux:8000/metrics running")
    assert running["x"] == pytest.approx(expected, abs=1e-6)
    assert {"engine_running_at_t0", "engine_pressure_age_s"} <= set(table(app).columns)


def test_an_episode_whose_engine_was_never_scraped_says_which_were(on_engine_store: Path) -> None:
    with Analysis.open(on_engine_store) as analysis:
        small = analysis.wake_episodes().filter(pl.col("model") == "small").row(0, named=True)
    app = run_page("wakes", episode=small["span_id"])
    assert len(specs(app)) == 3  # the bars, the timeline and the hint scatter: no empty pressure chart
    (note,) = [seen(i.value) for i in app.info]
    assert note.startswith("No scrape of an engine serving small from t0 -5 s") and note.endswith("tiny.")


@pytest.mark.parametrize("page", ["lending", "wakes"])
def test_without_scrapes_an_episode_page_says_how_to_record_them(on_store: Path, page: str) -> None:
    app = run_page(page)
    assert [i.value for i in app.info] == [ui.NO_SCRAPES]
    assert "restorelens collect --scrape URL" in seen(ui.NO_SCRAPES)
    assert len(specs(app)) == (2 if page == "lending" else 3)


@pytest.mark.parametrize("page", ["overview", "lending", "wakes", "engine", "policies", "lifecycle", "traces"])
def test_a_missing_value_reads_as_a_dash_never_none(on_store: Path, page: str) -> None:
    app = run_page(page)
    tables = app.dataframe
    assert all(table.proto.placeholder == MISSING for table in tables)  # Streamlit's own: "None"
    for picker in app.selectbox:
        assert not [option for option in picker.options if "None" in option], picker.label


def test_an_episode_without_run_or_seed_is_picked_by_a_dash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb
    from builders import Traces

    from restorelens.dashboard.labels import shown

    assert (shown(None), shown(3), shown("lend")) == (MISSING, "3", "lend")
    traces = Traces()  # a gate's restore that no run labelled: no run id, no seed
    traces.gate_restore(60.0, 64.5, link=None, policy="lend", grant_restored_s=61.0, drained_s=64.5)
    path = tmp_path / "unlabelled.duckdb"
    con = duckdb.connect(str(path))
    traces.store(con)
    con.close()
    monkeypatch.setenv(environment.DB_ENV, str(path))
    (option,) = run_page("lending").selectbox[0].options
    assert f"run {MISSING} · seed {MISSING}" in option and "None" not in option
