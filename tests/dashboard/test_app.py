"""The entrypoint (navigation + span source) and the sample/upload sources."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import polars as pl
import pytest
import streamlit as st
from dashboard_stores import moflux_files
from experiment_store import experiment_store_path  # noqa: F401 (a fixture)
from streamlit.testing.v1 import AppTest

from restorelens.analysis import Analysis
from restorelens.dashboard import environment, queries, source
from restorelens.errors import InputError

APP = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "app.py"


@pytest.fixture(autouse=True)
def fresh_caches() -> None:
    st.cache_data.clear()
    st.cache_resource.clear()


def test_the_entrypoint_opens_the_overview_and_switches_pages(store_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.DB_ENV, str(store_path))
    app = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not app.exception
    assert app.title[0].value == "Recovery overview"
    assert app.sidebar.radio[0].value == "span store (--db)"
    app.switch_page(str(APP.parent / "wakes.py")).run()
    assert not app.exception
    assert app.title[0].value == "Wake episodes"
    assert [chart.key for chart in app.get("plotly_chart")] == ["wake-bars", "wake-timeline", "hint-scatter"]
    app.switch_page(str(APP.parent / "engine.py")).run()
    assert not app.exception
    assert app.title[0].value == "Engine"
    assert len(app.get("plotly_chart")) == 1 and app.dataframe


def test_without_db_the_entrypoint_offers_an_upload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environment.DB_ENV, raising=False)
    monkeypatch.setattr(source, "SAMPLE_DIR", Path("/nonexistent-restorelens-samples"))
    app = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not app.exception
    assert app.sidebar.radio[0].options == ["upload an OTLP file"]
    assert "restorelens dashboard --db FILE" in app.info[0].value


def test_an_uploaded_jsonl_file_becomes_a_readable_store(tmp_path: Path) -> None:
    (jsonl, *_) = moflux_files(tmp_path)
    payload = jsonl.read_bytes()
    path = Path(queries.uploaded_store(hashlib.sha256(payload).hexdigest(), "../../etc/run.jsonl",
                                       environment.DEFAULT_MAX_UPLOAD_BYTES, io.BytesIO(payload)))
    # in this process's folder; the upload's name is no part of any path (tests/dashboard/test_uploads.py)
    assert path.parent.parent == source.work_folder() and path.parent.name.startswith("upload-")
    assert {p.name for p in path.parent.iterdir()} <= {"spans.duckdb", "spans.duckdb.wal"}
    with Analysis.open(path) as analysis:
        assert analysis.requests().height > 0


def test_an_upload_without_spans_is_an_input_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_text(json.dumps({"hello": "world"}) + "\n")
    with pytest.raises(InputError, match="no OTLP spans could be read"):
        source.load_into_store([junk], tmp_path / "spans.duckdb")


def test_sample_traces_are_found_and_loaded(tmp_path: Path) -> None:
    samples = tmp_path / "sample_traces"
    samples.mkdir()
    for path in moflux_files(tmp_path)[:2]:
        path.rename(samples / path.name)
    (samples / "README.md").write_text("not traces")
    files = source.sample_files(samples)
    assert [p.name for p in files] == ["moflux-lend-1.jsonl", "moflux-lend-2.jsonl"]
    store = queries.sample_store(tuple(map(str, files)), (0, 0))
    with Analysis.open(store) as analysis:
        assert set(analysis.requests()["run_id"]) == {"lend-1", "lend-2"}


def test_the_store_stamp_changes_when_spans_are_written(tmp_path: Path) -> None:
    from restorelens.collector import load_paths

    db = tmp_path / "spans.duckdb"
    files = moflux_files(tmp_path)
    load_paths(files[:1], db)
    before = source.store_stamp(db)
    load_paths(files[1:2], db)
    assert source.store_stamp(db) != before


def test_the_repository_sample_traces_show_wake_and_lending_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environment.DB_ENV, raising=False)
    assert source.sample_files(), f"no sample traces in {source.SAMPLE_DIR}"
    app = AppTest.from_file(str(APP), default_timeout=120).run()
    assert not app.exception
    assert app.sidebar.radio[0].value == "sample traces"
    counts = {m.label: int(m.value) for m in app.metric}
    assert counts["wake episodes"] > 0 and counts["lending episodes"] > 0
    app.switch_page(str(APP.parent / "wakes.py")).run()
    assert not app.exception
    bars, timeline = (json.loads(chart.proto.spec) for chart in app.get("plotly_chart")[:2])
    assert {"engine ready", "first token"} <= {trace["name"] for trace in bars["data"]}
    labels = {str(t) for trace in timeline["data"] for t in (trace.get("text") or [])}
    assert {"engine ready", "first token"} <= labels


def test_the_sidebar_filter_from_the_link_narrows_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """A link naming a scenario and a policy opens the pages on those runs only, and keeps them."""
    monkeypatch.delenv(environment.DB_ENV, raising=False)
    app = AppTest.from_file(str(APP), default_timeout=120)
    app.query_params["scenario"] = "moflux-balanced"
    app.query_params["policy"] = "lend"
    app.run()
    assert not app.exception
    counts = {m.label: int(m.value) for m in app.metric}
    files = source.sample_files()
    store = queries.sample_store(tuple(map(str, files)), tuple(int(p.stat().st_mtime_ns) for p in files))
    with Analysis.open(store) as analysis:
        lending = analysis.lending_episodes()
    expected = lending.filter(lending["run_id"] == "sample-moflux-balanced-lend").height
    assert 0 < expected < lending.height
    assert counts["lending episodes"] == expected and counts["wake episodes"] == 0
    assert app.multiselect(key="filter-scenario").value == ["moflux-balanced"]
    # AppTest keeps a parameter of one value as that value
    assert app.query_params["scenario"] in ("moflux-balanced", ["moflux-balanced"])
    assert app.query_params["policy"] in ("lend", ["lend"])
    app.switch_page(str(APP.parent / "lending.py")).run()
    assert not app.exception
    bars = json.loads(app.get("plotly_chart")[0].proto.spec)
    assert len({y for trace in bars["data"] for y in trace["y"]}) == expected


def test_a_lending_episodes_borrowed_slots_return_to_zero_once_drained() -> None:
    """Gate spans carry no run id: the slots of the other runs of the same policy must not count."""
    files = source.sample_files()
    store = queries.sample_store(tuple(map(str, files)), tuple(int(p.stat().st_mtime_ns) for p in files))
    with Analysis.open(store) as analysis:
        episodes = analysis.lending_episodes().filter(pl.col("drain_s").is_not_null())
    assert episodes["run_id"].n_unique() > 1 and set(episodes["policy"]) == {"lend"}
    for episode in episodes.iter_rows(named=True):
        occupancy = queries.lending_detail(store, source.store_stamp(store), episode["span_id"]).occupancy
        before = occupancy.filter(pl.col("offset_s") < episode["drain_s"])
        after = occupancy.filter(pl.col("offset_s") >= episode["drain_s"])
        assert before["borrowed"].max() > 0 and after["borrowed"].to_list() == [0] * after.height, episode["run_id"]


def test_the_lifecycle_page_shows_the_chosen_runs_lanes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environment.DB_ENV, raising=False)
    app = AppTest.from_file(str(APP), default_timeout=120)
    app.query_params["scenario"] = "modelclaim-move"
    app.run()
    app.switch_page(str(APP.parent / "lifecycle.py")).run()
    assert not app.exception and app.title[0].value == "Model lifecycle"
    lanes = json.loads(app.get("plotly_chart")[0].proto.spec)
    shown = {y for trace in lanes["data"] for y in trace["y"] if y is not None}
    assert shown and all(lane.startswith("sample-modelclaim-move · ") for lane in shown), shown


@pytest.mark.parametrize("value", ["5000", "3600.5", "nan", "inf", "-1", "1e400", "abc"])
def test_an_slo_from_the_link_the_sidebar_cannot_take_is_the_default(value: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(environment.DB_ENV, raising=False)
    app = AppTest.from_file(str(APP), default_timeout=120)
    app.query_params["slo_ttft_s"] = value
    app.query_params["percentile"] = "bogus"
    app.run()
    assert not app.exception
    assert app.number_input(key="slo_ttft_s").value == 5.0  # never 0 s, which would fail every request
    assert app.radio(key="percentile").value == "linear"


def test_the_sidebar_slo_rescores_the_policy_page(experiment_store_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.DB_ENV, str(experiment_store_path))

    def frontier_x(ttft_s: float) -> list[float]:
        app = AppTest.from_file(str(APP), default_timeout=120)
        app.query_params["slo_ttft_s"] = str(ttft_s)
        app.run()
        app.switch_page(str(APP.parent / "policies.py")).run()
        assert not app.exception
        assert any(f"TTFT ≤ {ttft_s:g} s" in caption.value for caption in app.caption)
        spec = json.loads(app.get("plotly_chart")[0].proto.spec)
        return sorted(x for trace in spec["data"] if trace.get("meta") == "seeds" for x in trace["x"])

    default, strict = frontier_x(5.0), frontier_x(0.05)
    assert len(default) == len(strict) and sum(strict) < sum(default)


def test_the_dashboard_reads_chdb_as_it_reads_the_duckdb_store(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """--source chdb:PATH: every page renders from the warehouse, with the DuckDB store's numbers."""
    from click.testing import CliRunner

    from restorelens.cli import cli

    files = source.sample_files()
    duck = queries.sample_store(tuple(map(str, files)), tuple(int(p.stat().st_mtime_ns) for p in files))
    chdb = f"chdb:{tmp_path / 'chdb'}"
    assert CliRunner().invoke(cli, ["export", "--db", duck, "--to", chdb]).exit_code == 0
    seen = {}
    for store in (duck, chdb):
        monkeypatch.setenv(environment.DB_ENV, store)
        app = AppTest.from_file(str(APP), default_timeout=120).run()
        assert not app.exception, [e.value for e in app.exception]
        counts = {m.label: m.value for m in app.metric}
        bars = json.loads(app.get("plotly_chart")[0].proto.spec)
        pages = {}
        for page in ("lending", "wakes", "engine", "policies", "lifecycle", "traces"):
            app.switch_page(str(APP.parent / f"{page}.py")).run()
            assert not app.exception, (store, page, [e.value for e in app.exception])
            pages[page] = len(app.get("plotly_chart"))
        seen[store] = (counts, sorted({y for trace in bars["data"] for y in trace["y"]}), pages)
    assert seen[chdb] == seen[duck]
    assert int(seen[duck][0]["wake episodes"]) > 0
