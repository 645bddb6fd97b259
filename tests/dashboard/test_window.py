"""The window ``restorelens dashboard --since/--until/--run`` sets: the store the command line names
is read for it (DuckDB and chDB), the sample traces and an upload are read whole, and the sidebar
says which window is shown."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import polars as pl
import pytest
import streamlit as st
from click.testing import CliRunner
from rendered import seen
from streamlit.testing.v1 import AppTest

from restorelens.analysis.window import Window
from restorelens.cli import cli
from restorelens.dashboard import environment, queries, source
from restorelens.errors import SettingError

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
APP = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "app.py"
#: A run with lending episodes and one with a wake episode: every kind of frame has rows to narrow.
RUNS = ("sample-moflux-balanced-lend", "sample-modelclaim-move")


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    st.cache_data.clear()
    st.cache_resource.clear()
    for name in (environment.WINDOW_ENV, environment.LABELS_ENV, environment.LIMITS_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The sample traces in a DuckDB store (the dashboard's loader), and copied by ``restorelens export
    --to`` into chDB."""
    folder = tmp_path_factory.mktemp("dashboard-window")
    duck = str(source.load_into_store(source.sample_files(), folder / "spans.duckdb"))
    chdb = f"chdb:{folder / 'chdb'}"
    exported = CliRunner().invoke(cli, ["export", "--db", duck, "--to", chdb])
    assert exported.exit_code == 0, exported.output
    return {"duckdb": duck, "chdb": chdb}


def frames(path: str) -> dict[str, pl.DataFrame]:
    """What the pages read of ``path``, through the reader they use (queries.StoreReader)."""
    with queries.StoreReader(path).analysis() as analysis:
        return {"requests": analysis.requests().select("request_id", "run_id").sort("request_id"),
                "lending": analysis.lending_episodes().select("span_id", "run_id").sort("span_id"),
                "wake": analysis.wake_episodes().select("span_id", "run_id").sort("span_id"),
                "runs": analysis.runs().select("run_id").sort("run_id")}


@pytest.mark.parametrize("kind", ["duckdb", "chdb"])
def test_the_cli_store_is_read_for_the_runs_of_the_window(stores: dict[str, str], kind: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = stores[kind]
    monkeypatch.setenv(environment.DB_ENV, path)
    whole = frames(path)
    monkeypatch.setenv(environment.WINDOW_ENV, environment.window_env_value(Window(runs=RUNS)))
    windowed = frames(path)
    for name, frame in whole.items():
        expected = frame.filter(pl.col("run_id").is_in(RUNS))
        assert windowed[name].equals(expected), name
        assert 0 < expected.height < frame.height, name  # the window narrows each frame, none to nothing


@pytest.mark.parametrize("kind", ["duckdb", "chdb"])
def test_the_cli_store_is_read_for_the_time_of_the_window(stores: dict[str, str], kind: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The sample traces start at 2026-01-01T00:00:00Z: a window from one second on drops the
    traces begun in that second, and one ending before it holds nothing."""
    path = stores[kind]
    monkeypatch.setenv(environment.DB_ENV, path)
    whole = frames(path)["requests"]
    monkeypatch.setenv(environment.WINDOW_ENV, environment.window_env_value(Window(since_ns=1_767_225_601 * 10**9)))
    later = frames(path)["requests"]
    assert 0 < later.height < whole.height
    monkeypatch.setenv(environment.WINDOW_ENV, environment.window_env_value(Window(until_ns=1_767_225_600 * 10**9)))
    assert frames(path)["requests"].is_empty()


def test_the_sample_traces_and_an_upload_are_read_whole(stores: dict[str, str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.DB_ENV, stores["duckdb"])
    monkeypatch.setenv(environment.WINDOW_ENV, environment.window_env_value(Window(runs=RUNS[:1])))
    files = source.sample_files()
    samples = queries.sample_store(tuple(map(str, files)), tuple(int(p.stat().st_mtime_ns) for p in files))
    assert frames(samples)["runs"]["run_id"].n_unique() == len(files) > 1
    payload = b"".join((SAMPLES / f"moflux-balanced-{policy}.jsonl").read_bytes() for policy in ("lend", "static"))
    upload = queries.uploaded_store(hashlib.sha256(payload).hexdigest(), "two-runs.jsonl",
                                    environment.DEFAULT_MAX_UPLOAD_BYTES, io.BytesIO(payload))
    assert set(frames(upload)["requests"]["run_id"]) == {"sample-moflux-balanced-lend", "sample-moflux-balanced-static"}
    # the window is the CLI's store's alone: a broken one stops that store, not the others
    monkeypatch.setenv(environment.WINDOW_ENV, '{"runs": [""]}')
    assert frames(samples)["runs"].height == len(files)
    with pytest.raises(SettingError, match=environment.WINDOW_ENV):
        queries.StoreReader(stores["duckdb"])


#: A run id holding markdown: the caption shows it as written (``ui.plain``).
MARKED_RUN = "![x](https://evil.example/p.png) [click](mailto:me@evil.example) <img src=x> :red[x] **b**"


def test_the_sidebar_says_the_window_and_the_pages_show_it(stores: dict[str, str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    duck = stores["duckdb"]
    monkeypatch.setenv(environment.DB_ENV, duck)
    window = Window(since_ns=1_767_225_600 * 10**9, until_ns=1_767_229_200 * 10**9, runs=(RUNS[0], MARKED_RUN))
    expected = frames(duck)
    lending = expected["lending"].filter(pl.col("run_id") == RUNS[0]).height
    monkeypatch.setenv(environment.WINDOW_ENV, environment.window_env_value(window))
    app = AppTest.from_file(str(APP), default_timeout=120).run()
    assert not app.exception, [e.value for e in app.exception]
    captions = [seen(c.value) for c in app.sidebar.caption]
    assert (f"Showing: the store {duck} (read-only), spans from 2026-01-01T00:00:00Z to 2026-01-01T01:00:00Z, "
            f"runs {RUNS[0]}, {MARKED_RUN}") in captions
    assert "Showing 1 of 1 runs." in captions  # the run filter offers the window's runs alone
    counts = {m.label: int(m.value) for m in app.metric}
    assert counts["lending episodes"] == lending > 0 and counts["wake episodes"] == 0
    app.sidebar.radio[0].set_value("sample traces").run()  # the samples are read whole
    assert not app.exception
    assert f"Showing: {len(source.sample_files())} sample file(s)" in [seen(c.value) for c in app.sidebar.caption]
    assert int({m.label: m.value for m in app.metric}["wake episodes"]) == expected["wake"].height > 0


def test_a_broken_window_is_one_red_line_and_no_store(stores: dict[str, str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(environment.DB_ENV, stores["duckdb"])
    monkeypatch.setenv(environment.WINDOW_ENV, '{"since_ns": 2, "until_ns": 1}')
    app = AppTest.from_file(str(APP), default_timeout=120).run()
    assert not app.exception
    assert [seen(e.value) for e in app.error] == [
        f"setting {environment.WINDOW_ENV} until_ns: must be after {environment.WINDOW_ENV} since_ns"]
    assert "Showing: no store" in [c.value for c in app.sidebar.caption]
    assert not app.metric
