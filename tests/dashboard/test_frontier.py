"""The policy page's data and figures (``dashboard/frontier.py``) on an experiment store.

The store is what ``restorelens experiment`` leaves behind (``experiment_store``): one scenario,
the study's four arms, two seeds. The page must show the study's own figures: the same points,
medians and gates as ``analysis.study.score`` computes on the same store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
import pytest
import streamlit as st
from dashboard_stores import ARMLESS, HOSTILE
from experiment_store import EXPERIMENT_ARMS, EXPERIMENT_SEEDS, experiment_store_path  # noqa: F401 (fixture)
from streamlit.testing.v1 import AppTest

from restorelens.analysis import FRONTIER_AXES, GATES, Analysis, Slo, nearest_rank
from restorelens.analysis.report import NO_GATE
from restorelens.dashboard import environment, frontier, palette
from restorelens.dashboard.figures import literal
from restorelens.dashboard.labels import NO_WORKLOAD
from restorelens.analysis.study import StudyTable, score


def frames(path: Path, slo: Slo | None = None) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    with Analysis.open(path, slo=slo) as analysis:
        return analysis.policy_summary(), analysis.requests(), analysis.lending_episodes()


@pytest.fixture(scope="module")
def page(experiment_store_path: Path) -> frontier.PolicyPage:  # noqa: F811
    return frontier.policy_page(*frames(experiment_store_path))


@pytest.fixture(scope="module")
def study(experiment_store_path: Path) -> StudyTable:  # noqa: F811
    """The experiment command's table of the same store, one scenario per workload as on the page."""
    with Analysis.open(experiment_store_path) as analysis:
        workloads = sorted(set(analysis.policy_summary()["workload"].to_list()))
        return score(analysis, {workload: workload for workload in workloads})


def traces(figure: go.Figure, meta: str) -> list[Any]:
    return [trace for trace in figure.data if trace.meta == meta]


def legend(figure: go.Figure) -> list[str]:
    """The legend's entries as Plotly lists them: by ``legendrank`` (default 1000), then in trace order."""
    shown = [trace for trace in figure.data if trace.showlegend is not False]
    return [trace.name for trace in sorted(shown, key=lambda t: 1000 if t.legendrank is None else t.legendrank)]


def test_the_page_holds_every_arm_and_seed_of_the_matrix(page: frontier.PolicyPage) -> None:
    assert page.scenarios == ("fixed-burst",) and page.arms == EXPERIMENT_ARMS and not page.empty
    assert page.runs.height == len(EXPERIMENT_ARMS) * len(EXPERIMENT_SEEDS)
    assert set(page.runs.select("arm", "seed").rows()) == {(a, s) for a in EXPERIMENT_ARMS for s in EXPERIMENT_SEEDS}


def test_the_per_run_table_is_the_studys(page: frontier.PolicyPage, study: StudyTable) -> None:
    assert page.runs.to_dicts() == study.runs
    assert page.points.to_dicts() == study.frontier()["points"]
    assert page.medians.to_dicts() == study.frontier()["medians"]


def test_the_frontier_has_one_point_per_arm_and_seed(page: frontier.PolicyPage,
                                                     experiment_store_path: Path) -> None:  # noqa: F811
    figure = frontier.frontier_figure(page)
    seeds = traces(figure, "seeds")
    assert sum(len(trace.x) for trace in seeds) == len(EXPERIMENT_ARMS) * len(EXPERIMENT_SEEDS)
    summary = frames(experiment_store_path)[0]
    for trace in seeds:
        assert len(trace.x) == len(trace.y) == len(EXPERIMENT_SEEDS)
        drawn = {int(seed): (x, y) for (_, seed), x, y in zip(trace.customdata, trace.x, trace.y, strict=True)}
        expected = summary.filter(pl.col("policy") == trace.name)
        assert drawn == {row["seed"]: tuple(row[axis] for axis in FRONTIER_AXES)
                         for row in expected.iter_rows(named=True)}


def test_the_frontier_marks_each_arms_nearest_rank_median(page: frontier.PolicyPage,
                                                         experiment_store_path: Path) -> None:  # noqa: F811
    figure = frontier.frontier_figure(page)
    medians = traces(figure, "median")
    assert [trace.name for trace in medians] == list(EXPERIMENT_ARMS)
    summary = frames(experiment_store_path)[0]
    for trace in medians:
        arm = summary.filter(pl.col("policy") == trace.name)
        assert (trace.x[0], trace.y[0]) == tuple(nearest_rank(arm[axis].to_list(), 0.5) for axis in FRONTIER_AXES)
        assert trace.marker.symbol == "diamond" and trace.marker.size > traces(figure, "seeds")[0].marker.size


def test_legends_name_the_policies_and_match_the_points_colours(page: frontier.PolicyPage) -> None:
    for figure in (frontier.frontier_figure(page), frontier.ttft_figure(page, Slo())):
        assert legend(figure) == list(EXPERIMENT_ARMS)
        for entry in (trace for trace in figure.data if trace.showlegend is not False):
            assert entry.marker.color == palette.colour(entry.name, palette.POLICIES) == palette.POLICIES[entry.name]
            group = [trace for trace in figure.data if trace.legendgroup == entry.legendgroup]
            assert {trace.marker.color for trace in group} == {entry.marker.color}
        assert figure.layout.template == pio.templates[palette.TEMPLATE]


def test_the_gates_per_seed_deltas_and_medians_are_the_studys(page: frontier.PolicyPage, study: StudyTable) -> None:
    assert [(row["gate"], dict(zip(*_seeds_of(page, row["gate"]), strict=True)), row["median_rps"], row["holds"])
            for row in page.gates.iter_rows(named=True)] == \
        [(gate["gate"], gate["per_seed"], gate["median"], gate["holds"]) for gate in study.gates]
    assert page.gates["label"].to_list() == [gate.label for gate in GATES]
    assert page.gates["verdict"].to_list() == ["n/a" if g["holds"] is None else "holds" if g["holds"] else "fails"
                                               for g in study.gates]


def _seeds_of(page: frontier.PolicyPage, gate: str) -> tuple[list[int], list[float]]:
    deltas = page.deltas.filter(pl.col("gate") == gate)
    return deltas["seed"].to_list(), deltas["delta_rps"].to_list()


def test_the_gates_figure_draws_each_delta_the_median_and_the_threshold_in_the_verdicts_colour(
        page: frontier.PolicyPage, study: StudyTable) -> None:
    figure = frontier.gates_figure(page)
    [threshold] = traces(figure, "threshold")
    assert list(threshold.y) == [gate.threshold_rps for gate in GATES]
    ticks = list(threshold.x)
    assert [tick.split(":")[0] for tick in ticks] == [gate.name for gate in GATES]
    drawn: dict[str, list[float]] = {}
    for trace in traces(figure, "seeds"):
        assert trace.marker.color == frontier.VERDICTS[trace.name]
        for tick, y in zip(trace.x, trace.y, strict=True):
            drawn.setdefault(tick.split(":")[0], []).append(y)
    assert {name: sorted(values) for name, values in drawn.items()} == \
        {gate["gate"]: sorted(gate["per_seed"].values()) for gate in study.gates if gate["per_seed"]}
    medians = {tick.split(":")[0]: (y, trace.name, trace.marker.color)
               for trace in traces(figure, "median") for tick, y in zip(trace.x, trace.y, strict=True)}
    for gate in study.gates:
        verdict = "holds" if gate["holds"] else "fails"
        assert medians[gate["gate"]] == (gate["median"], verdict, frontier.VERDICTS[verdict])
    assert set(legend(figure)) == {"threshold", *{("holds" if g["holds"] else "fails") for g in study.gates}}


def test_the_ttft_figure_has_one_point_per_arm_and_seed_and_the_slos_line(page: frontier.PolicyPage,
                                                                         study: StudyTable) -> None:
    slo = Slo(ttft_s=2.5, e2e_s=20.0)
    figure = frontier.ttft_figure(page, slo)
    drawn = {(trace.name, int(seed)): y for trace in traces(figure, "seeds")
             for (_, seed), y in zip(trace.customdata, trace.y, strict=True)}
    assert drawn == {(run["arm"], run["seed"]): run["interactive_ttft_p95_s"] for run in study.runs}
    assert [shape.y0 for shape in figure.layout.shapes] == [2.5]
    assert "TTFT ≤ 2.5 s" in [annotation.text for annotation in figure.layout.annotations][-1]


def test_a_stricter_slo_lowers_the_interactive_goodput_on_the_page(experiment_store_path: Path) -> None:  # noqa: F811
    strict = frontier.policy_page(*frames(experiment_store_path, Slo(ttft_s=0.0, e2e_s=0.0)))
    assert set(strict.points["interactive_slo_goodput_rps"].to_list()) == {0.0}


def test_requests_without_a_gate_or_workload_read_no_gate_and_no_workload(armless_store_path: Path) -> None:
    page = frontier.policy_page(*frames(armless_store_path))
    assert page.scenarios[-1] == NO_WORKLOAD and NO_GATE in page.arms
    assert ("balanced", NO_GATE, 1) in set(page.runs.select("scenario", "arm", "seed").rows())
    assert (NO_WORKLOAD, NO_GATE) in set(page.runs.select("scenario", "arm").rows())
    assert len(ARMLESS) == page.runs.filter(pl.col("arm") == NO_GATE).height
    for figure in (frontier.frontier_figure(page), frontier.gates_figure(page), frontier.ttft_figure(page, Slo())):
        text = [value for value in _strings(figure.to_plotly_json()) if "None" in value]
        assert text == []
    annotations = [a.text for a in frontier.frontier_figure(page).layout.annotations]
    assert annotations[:len(page.scenarios)] == list(page.scenarios)


def test_text_from_the_spans_reaches_the_figures_as_written(hostile_store_path: Path) -> None:
    page = frontier.policy_page(*frames(hostile_store_path))
    assert any(HOSTILE in arm for arm in page.arms)
    for figure in (frontier.frontier_figure(page), frontier.gates_figure(page), frontier.ttft_figure(page, Slo())):
        shown = list(_strings(figure.to_plotly_json()))
        assert not [value for value in shown if HOSTILE in value]  # never as markup
        assert [value for value in shown if literal(HOSTILE) in value]  # but drawn as written
    assert legend(frontier.frontier_figure(page)) == [literal(arm) for arm in page.arms]


def test_a_store_without_policy_arms_is_an_empty_page(empty_store_path: Path) -> None:
    page = frontier.policy_page(*frames(empty_store_path))
    assert page.empty and page.scenarios == () and page.gates.is_empty()
    for figure in (frontier.frontier_figure(page), frontier.gates_figure(page), frontier.ttft_figure(page, Slo())):
        assert [trace for trace in figure.data if trace.meta == "seeds"] == []


def _strings(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [text for value in node.values() for text in _strings(value)]
    if isinstance(node, (list, tuple)):
        return [text for value in node for text in _strings(value)]
    return []


# --- the page -------------------------------------------------------------------------------------

PAGE = Path(__file__).resolve().parents[2] / "dashboard" / "pages" / "policies.py"


def run_policy_page(store: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv(environment.DB_ENV, str(store))
    monkeypatch.delenv(environment.LIMITS_ENV, raising=False)
    monkeypatch.delenv(environment.LABELS_ENV, raising=False)
    st.cache_data.clear()
    app = AppTest.from_file(str(PAGE), default_timeout=60)
    app.run()
    assert not app.exception, [e.value for e in app.exception]
    return app


def test_the_page_states_the_slo_and_draws_the_frontier_gates_and_ttft(experiment_store_path: Path,  # noqa: F811
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    app = run_policy_page(experiment_store_path, monkeypatch)
    assert "TTFT ≤ 5 s and end-to-end ≤ 30 s" in app.caption[0].value
    frontier_spec, gates_spec, ttft_spec = (json.loads(chart.proto.spec) for chart in app.get("plotly_chart"))
    seeds = [trace for trace in frontier_spec["data"] if trace.get("meta") == "seeds"]
    assert sum(len(trace["x"]) for trace in seeds) == len(EXPERIMENT_ARMS) * len(EXPERIMENT_SEEDS)
    assert [trace.get("meta") for trace in gates_spec["data"]][0] == "threshold"
    assert ttft_spec["layout"]["shapes"][0]["y0"] == 5.0
    gates, runs = app.dataframe[0].value, app.dataframe[1].value
    assert list(gates["gate"]) == [gate.name for gate in GATES]
    assert len(runs) == len(EXPERIMENT_ARMS) * len(EXPERIMENT_SEEDS)


def test_a_store_without_policy_arms_says_so(empty_store_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = run_policy_page(empty_store_path, monkeypatch)
    assert app.info and "restorelens experiment" in app.info[0].value
    assert not app.get("plotly_chart")
