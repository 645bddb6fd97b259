"""The dashboard in a real browser: ``restorelens dashboard`` as a subprocess on a free port, Debian's
chromium driven by Playwright, every page opened on the realistic store, the repository's sample
traces and an experiment's store, and checked for what a person would look at: one bar per episode,
every lifecycle phase in the legend, one frontier point per arm × seed, a failed upload's error.

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``; Playwright cannot download browsers
here). ``pytest -m browser --screenshots DIR`` writes a screenshot of every page to DIR; the README's
picture is ``--screenshots docs/screenshots``'s ``samples-overview.png``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
STARTUP_S = 60.0  # bounds, not speed claims: Streamlit's first start on a busy 2-core machine
RENDER_MS = 60_000
#: Page name -> URL path (the root forwards to the overview).
PAGES = {"overview": "overview", "lending": "lending", "wakes": "wakes", "engine": "engine", "policies": "policies",
         "lifecycle": "lifecycle", "traces": "traces"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def dashboard_url(store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(store_path, tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="module")
def engine_url(engine_store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The realistic store with gateless requests and engines' scrapes."""
    with serving(engine_store_path, tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="module")
def hostile_url(hostile_store_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(hostile_store_path, tmp_path_factory) as url:
        yield url


@pytest.fixture
def screenshots(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """Where page screenshots go: ``--screenshots DIR`` when given, else the test's own folder."""
    wanted = request.config.getoption("--screenshots")
    if wanted is None:
        return tmp_path
    folder = Path(wanted).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def serving(store_path: Path, tmp_path_factory: pytest.TempPathFactory, *,
            temp_dir: Path | None = None) -> Iterator[str]:
    """``restorelens dashboard --db store_path`` on a free port until the block ends; ``temp_dir``:
    the server's temporary folder (TMPDIR)."""
    port = free_port()
    log = (tmp_path_factory.mktemp("dashboard-server") / "server.log").open("wb")
    command = [sys.executable, "-m", "restorelens", "dashboard", "--db", str(store_path), "--port", str(port)]
    environment = {**os.environ, **({"TMPDIR": str(temp_dir)} if temp_dir is not None else {})}
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               env=environment)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert process.poll() is None, f"the dashboard exited with {process.returncode}; see {log.name}"
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as answer:
                    if answer.read() == b"ok":
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"the dashboard was not healthy within {STARTUP_S:g} s"
            time.sleep(0.25)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have exited on its own
            os.killpg(process.pid, signal.SIGTERM)  # its own session: Streamlit and nothing else
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)
        log.close()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium); "
                    "`playwright install` cannot download browsers here")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def open_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url, timeout=RENDER_MS)
    page.wait_for_selector("[data-testid='stAppViewContainer']", timeout=RENDER_MS)
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=RENDER_MS)
    body = page.inner_text("body")
    assert page.locator("[data-testid='stException']").count() == 0, body
    assert "Page not found" not in body, url
    return page


def chart_text(page, index: int = 0) -> str:
    chart = page.get_by_test_id("stPlotlyChart").nth(index)
    chart.locator("svg.main-svg").first.wait_for(timeout=RENDER_MS)
    return chart.inner_text() + " ".join(chart.locator("text").all_text_contents())


def test_every_page_renders_without_an_exception(browser, dashboard_url: str, tmp_path: Path) -> None:
    for name, url_path in PAGES.items():
        page = open_page(browser, f"{dashboard_url}/{url_path}")
        assert page.locator("h1").first.inner_text().strip(), name
        # The source picker can draw a moment after the script reports notRunning on a busy machine.
        page.get_by_test_id("stSidebar").get_by_text("span store (--db)").wait_for(timeout=RENDER_MS)
        sidebar = page.get_by_test_id("stSidebar").inner_text()
        assert "Lending episodes" in sidebar and "Trace explorer" in sidebar  # st.navigation, not pages/
        if name != "traces":
            chart_text(page)
        page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        page.close()
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(f"{n}.png" for n in PAGES)


def test_the_lending_timeline_draws_its_event_labels(browser, dashboard_url: str, tmp_path: Path) -> None:
    page = open_page(browser, f"{dashboard_url}/lending")
    drawn = chart_text(page, 1)  # the timeline, under the bars of every episode
    for label in ("demand returned", "grant restored", "borrowed drained", "engine scheduled", "first token",
                  "borrowed slots"):
        assert label in drawn, label
    assert "episode=" in page.url  # the chosen episode is in the link
    page.screenshot(path=str(tmp_path / "lending.png"), full_page=True)
    page.close()


def test_the_wake_timeline_draws_retries_and_the_overshoot(browser, dashboard_url: str, store_path: Path,
                                                           tmp_path: Path) -> None:
    import polars as pl

    from restorelens.analysis import Analysis

    with Analysis.open(store_path) as analysis:
        wakes = analysis.wake_episodes()
    cold = wakes.filter(pl.col("wake_path") == "cold-start")["span_id"][0]
    page = open_page(browser, f"{dashboard_url}/wakes?episode={cold}")  # a shared link to one episode
    drawn = chart_text(page, 1)  # the timeline, under the bars of every episode
    for label in ("first 503", "Retry-After elapses", "wake start", "engine ready", "readiness observed",
                  "retry 1 → 503", "retry 2 → 503", "success 200", "first token", "overshoot 0.50 s"):
        assert label in drawn, label
    # the cold start's engine exported its startup spans: its bar splits the stretch to engine ready
    from restorelens import spans as sc
    from restorelens.dashboard.figures import TIME_BAR_TITLES
    from restorelens.dashboard.segments import OUTSIDE_ENGINE_SPANS, PROCESS_STARTED

    bars = {trace["name"]: trace for trace in plotted(page, TIME_BAR_TITLES["wake"].split(" (")[0])}
    assert list(bars)[:4] == [PROCESS_STARTED, sc.SPAN_VLLM_OVERALL_LOADING, OUTSIDE_ENGINE_SPANS, "engine ready"]
    assert bars[sc.SPAN_VLLM_OVERALL_LOADING]["x"] == [24.0]
    assert sum(bars[OUTSIDE_ENGINE_SPANS]["x"]) == 7.1875
    page.get_by_text("Engine startup phases").first.wait_for(timeout=RENDER_MS)
    page.screenshot(path=str(tmp_path / "wakes.png"), full_page=True)
    page.close()


def test_the_engine_page_draws_its_table_and_distributions_and_no_gate(browser, engine_url: str,
                                                                        tmp_path: Path) -> None:
    page = open_page(browser, f"{engine_url}/engine")
    drawn = chart_text(page)
    for label in ("queue (time_in_queue)", "schedule delay (", "TTFT", "prefill", "decode",
                  "restorelens-sim · interactive", "unknown_service:python · no class"):
        assert label in drawn, label
    assert page.get_by_test_id("stDataFrame").count() == 2  # the statistics and the slowest requests
    main = page.get_by_test_id("stMain")
    assert "no gate" in main.inner_text()  # the policy filter's chip for the gateless requests
    main.get_by_text("Split by policy").click()
    page.get_by_test_id("stPlotlyChart").first.get_by_text("unknown_service:python · no class · no gate").wait_for(
        timeout=RENDER_MS)
    page.screenshot(path=str(tmp_path / "engine.png"), full_page=True)
    page.close()


def test_an_episode_page_draws_the_engines_pressure_when_scraped(browser, engine_url: str, dashboard_url: str,
                                                                  tmp_path: Path) -> None:
    page = open_page(browser, f"{engine_url}/lending")
    drawn = chart_text(page, 2)  # waits for the third chart (bars, timeline, pressure) to be drawn
    assert page.get_by_test_id("stPlotlyChart").count() == 3
    for label in ("KV-cache usage", "requests running and waiting", "http://moflux:8000/metrics running",
                  "http://moflux:8000/metrics waiting"):
        assert label in drawn, label
    page.screenshot(path=str(tmp_path / "lending-pressure.png"), full_page=True)
    page.close()
    page = open_page(browser, f"{dashboard_url}/wakes")  # a store without scrapes: one line instead
    assert "hint" in chart_text(page, 2).lower()  # the third chart is the hint scatter, not pressure
    body = page.get_by_test_id("stMain").inner_text()
    assert "No engine metrics in this store: record them with restorelens collect --scrape URL" in body
    assert page.get_by_test_id("stPlotlyChart").count() == 3
    page.close()


#: Anything in a chart's elements that only markup read from the data could have made: a link, a
#: link's target, the styles of <b> and <span style="color:red"> (Plotly keeps each text as given
#: in data-unformatted, escaped: not looked at). Streamlit draws every title in <b> itself.
_MARKUP_DRAWN = """chart => {
    const found = [...chart.querySelectorAll("svg a")].map(a => "link " + a.outerHTML.slice(0, 120));
    for (const element of chart.querySelectorAll("*")) {
        for (const attribute of [...element.attributes].filter(a => /^(xlink:)?href$|^style$/.test(a.name))) {
            const value = attribute.value.replace(/\\s+/g, "").toLowerCase();
            if (value.includes("evil.example") || value.includes("fill:red") || value.includes("color:red")
                || (element.closest("svg") && !element.closest(".gtitle") && value.includes("font-weight:bold"))) {
                const text = element.closest("[data-unformatted]")?.getAttribute("data-unformatted");
                found.push(`${element.tagName} ${attribute.name}=${attribute.value} in ${text}`.slice(0, 300));
            }
        }
    }
    return found;
}"""


def test_markup_in_the_spans_is_drawn_as_text_never_as_links(browser, hostile_url: str, hostile_store_path: Path,
                                                              tmp_path: Path) -> None:
    from dashboard_stores import HOSTILE

    from restorelens.analysis import Analysis

    with Analysis.open(hostile_store_path) as analysis:
        trace_id = analysis.requests()["trace_id"][0]
        hostile_bar = analysis.trace(trace_id)["name"].to_list().index(HOSTILE)  # the waterfall's bars in order
    for name, url_path in (("traces", f"traces?trace={trace_id}"), ("lifecycle", "lifecycle"),
                           ("wakes", "wakes"), ("lending", "lending"), ("engine", "engine"),
                           ("policies", "policies"), ("overview", "")):
        page = open_page(browser, f"{hostile_url}/{url_path}")
        charts = page.get_by_test_id("stPlotlyChart")
        charts.first.locator("svg.main-svg").first.wait_for(timeout=RENDER_MS)
        drawn = " ".join(chart_text(page, index) for index in range(charts.count()))
        assert HOSTILE in drawn, name  # shown as written, character for character
        if name == "traces":  # the hover text too: the span named HOSTILE (and its event, drawn on it)
            bar = charts.first.locator(".trace.bars .point path").nth(hostile_bar)
            bar.hover(force=True, timeout=RENDER_MS)  # force: Plotly's drag layer lies over the bars
            hover = charts.first.locator(".hoverlayer .hovertext")
            hover.first.wait_for(timeout=RENDER_MS)
            assert HOSTILE in " ".join(hover.all_text_contents())
        for index in range(charts.count()):
            assert charts.nth(index).evaluate(_MARKUP_DRAWN) == [], f"{name} chart {index}"
        page.screenshot(path=str(tmp_path / f"hostile-{name}.png"), full_page=True)
        page.close()


# --- the repository's sample traces, an upload and an experiment's store -----------------------------


@pytest.fixture(scope="module")
def samples_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from restorelens.collector import load_paths
    from restorelens.dashboard import source

    store = tmp_path_factory.mktemp("samples") / "samples.duckdb"
    load_paths(source.sample_files(), store)
    return store


@pytest.fixture(scope="module")
def samples_url(samples_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(samples_store, tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="module")
def experiment_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """What ``restorelens experiment`` leaves behind: the study's four arms, two seeds."""
    from experiment_store import build_experiment_store

    with serving(build_experiment_store(tmp_path_factory.mktemp("experiment")), tmp_path_factory) as url:
        yield url


def plotted(page, index: int | str = 0) -> list[dict]:
    """The traces of a page's chart as Plotly drew them (name, x, y, showlegend): the ``index``-th,
    or the one whose drawn text holds ``index`` (its title), waited for by that text."""
    charts = page.get_by_test_id("stPlotlyChart")
    chart = charts.nth(index) if isinstance(index, int) else charts.filter(has_text=index).first
    chart.locator("svg.main-svg").first.wait_for(timeout=RENDER_MS)
    return chart.locator(".js-plotly-plot").evaluate(
        "el => el.data.map(t => ({name: t.name, x: Array.from(t.x || []), y: Array.from(t.y || []), "
        "showlegend: t.showlegend !== false, mode: t.mode || '', type: t.type || '', meta: t.meta || ''}))")


def legend(page, index: int = 0) -> list[str]:
    chart = page.get_by_test_id("stPlotlyChart").nth(index)
    chart.locator(".legendtext").first.wait_for(timeout=RENDER_MS)
    return chart.locator(".legendtext").all_text_contents()


def bars_per_episode(page, kind: str = "lending") -> int:
    """How many distinct bars (y categories) the ``kind`` (lending, wake) "where the time went"
    chart draws, found by its title: a page's charts can appear in any order while it draws."""
    from restorelens.dashboard.figures import TIME_BAR_TITLES

    title = TIME_BAR_TITLES[kind].split(" (")[0]
    return len({y for trace in plotted(page, title) for y in trace["y"]})


def test_every_page_of_the_sample_traces_answers_at_a_glance(browser, samples_url: str, samples_store: Path,
                                                            screenshots: Path) -> None:
    from restorelens.analysis import Analysis
    from restorelens.gate.modelclaim.phases import PHASES

    with Analysis.open(samples_store) as analysis:
        lending, wakes = analysis.lending_episodes().height, analysis.wake_episodes().height
    assert lending and wakes
    page = open_page(browser, samples_url)  # the root forwards to /overview
    page.wait_for_url("**/overview*", timeout=RENDER_MS)
    assert page.locator("h1").first.inner_text().strip() == "Recovery overview"
    assert bars_per_episode(page, "lending") == lending and bars_per_episode(page, "wake") == wakes
    assert legend(page, 0) == ["grant restored", "borrowed drained", "engine scheduled", "first token"]
    page.screenshot(path=str(screenshots / "samples-overview.png"), full_page=True)
    page.close()
    for name, kind, count in (("lending", "lending", lending), ("wakes", "wake", wakes)):
        page = open_page(browser, f"{samples_url}/{name}")
        assert bars_per_episode(page, kind) == count, name
        page.screenshot(path=str(screenshots / f"samples-{name}.png"), full_page=True)
        page.close()
    page = open_page(browser, f"{samples_url}/lifecycle")
    drawn = legend(page, 0)
    assert all(phase in drawn for phase in PHASES), drawn
    with Analysis.open(samples_store) as analysis:
        intervals = analysis.lifecycle_intervals()
    lanes = intervals.select("run_id", "model", "pod").unique().height
    chart = page.get_by_test_id("stPlotlyChart").first
    # every state a bar as drawn (not only in the figure's data), one lane per run, model and pod
    drawn_bars = chart.locator(".trace.bars .point path").evaluate_all(
        "paths => paths.filter(p => p.getBBox().width > 0 || p.getBBox().height > 0).length")
    assert drawn_bars == intervals.height
    assert chart.locator(".yaxislayer-above .ytick").count() == lanes
    page.screenshot(path=str(screenshots / "samples-lifecycle.png"), full_page=True)
    page.close()
    for name in ("engine", "policies", "traces"):
        page = open_page(browser, f"{samples_url}/{name}")
        page.screenshot(path=str(screenshots / f"samples-{name}.png"), full_page=True)
        page.close()


def test_the_overview_has_its_own_path_and_the_filter_stays_in_the_link(browser, samples_url: str,
                                                                         samples_store: Path) -> None:
    from restorelens.analysis import Analysis

    with Analysis.open(samples_store) as analysis:
        episodes = analysis.lending_episodes()
    balanced = episodes.filter(episodes["run_id"].str.contains("balanced-lend")).height
    assert 0 < balanced < episodes.height
    page = open_page(browser, f"{samples_url}/overview?scenario=moflux-balanced&policy=lend")
    assert page.locator("h1").first.inner_text().strip() == "Recovery overview"
    assert bars_per_episode(page, "lending") == balanced
    # another page keeps the selection, in its link too
    page.get_by_test_id("stSidebarNav").get_by_text("Lending episodes").click()
    page.wait_for_url("**/lending*", timeout=RENDER_MS)
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=RENDER_MS)
    assert bars_per_episode(page, "lending") == balanced
    assert "scenario=moflux-balanced" in page.url and "policy=lend" in page.url
    page.close()


def test_a_failed_upload_shows_its_error_and_no_data(browser, samples_store: Path,
                                                    tmp_path_factory: pytest.TempPathFactory,
                                                    screenshots: Path) -> None:
    """Never the --db store in its place: the error, naming the user's file and line, and nothing else."""
    temp_dir = tmp_path_factory.mktemp("dashboard-tmp")
    bad = tmp_path_factory.mktemp("upload") / "my-traces.jsonl"
    bad.write_text('{"resourceSpans": []}\n{"resourceSpans": [{"scopeSpans": [\n')
    with serving(samples_store, tmp_path_factory, temp_dir=temp_dir) as url:
        page = open_page(browser, f"{url}/overview")
        page.get_by_test_id("stSidebar").get_by_text("upload an OTLP file").click()
        page.get_by_test_id("stSidebar").locator("input[type='file']").set_input_files(str(bad))
        error = page.get_by_test_id("stAlertContentError").first
        error.wait_for(timeout=RENDER_MS)
        text = error.inner_text()
        assert "my-traces.jsonl:2" in text, text  # the user's file and line, not a temporary copy
        assert "upload.jsonl" not in text and str(temp_dir) not in text
        page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=RENDER_MS)
        main = page.get_by_test_id("stMain")
        assert main.get_by_test_id("stPlotlyChart").count() == 0 and main.get_by_test_id("stMetric").count() == 0
        assert "Showing: no store" in page.get_by_test_id("stSidebar").inner_text()
        page.screenshot(path=str(screenshots / "upload-error.png"), full_page=True)
        page.close()
    # nothing of the failed upload stays behind, and the server's folder goes with it
    assert not list(temp_dir.glob("**/upload-*")) and not list(temp_dir.glob("restorelens-dashboard-*"))


def test_every_page_of_an_experiment_store_and_its_frontier(browser, experiment_url: str,
                                                           screenshots: Path) -> None:
    from experiment_store import EXPERIMENT_ARMS, EXPERIMENT_SEEDS

    page = open_page(browser, f"{experiment_url}/policies")
    frontier = plotted(page, 0)
    points = [(trace["name"], x, y) for trace in frontier if trace["meta"] == "seeds"
              for x, y in zip(trace["x"], trace["y"], strict=True)]
    # one point per arm x seed, each arm once in the legend under its policy's name
    assert sorted(name for name, _, _ in points) == sorted(EXPERIMENT_ARMS * len(EXPERIMENT_SEEDS))
    assert sorted(legend(page, 0)) == sorted(EXPERIMENT_ARMS)
    assert sorted(t["name"] for t in frontier if t["meta"] == "median") == sorted(EXPERIMENT_ARMS)
    body = page.get_by_test_id("stMain").inner_text()
    for gate in ("H1", "H2", "H3"):
        assert gate in body, gate
    page.screenshot(path=str(screenshots / "experiment-policies.png"), full_page=True)
    page.close()
    for name in ("overview", "lending", "wakes", "engine", "lifecycle", "traces"):
        page = open_page(browser, f"{experiment_url}/{name}")
        assert page.locator("h1").first.inner_text().strip(), name
        if name in ("overview", "lending"):
            assert bars_per_episode(page, "lending") > 0, name
        page.screenshot(path=str(screenshots / f"experiment-{name}.png"), full_page=True)
        page.close()
