"""The sidebar's run filter: the runs offered, the runs a selection keeps, the rows it keeps."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from restorelens.analysis import Analysis
from restorelens.analysis.report import NO_GATE
from restorelens.dashboard.selection import Selection, runs_of, select, selected_runs


def _runs() -> pl.DataFrame:
    return runs_of(pl.DataFrame({
        "run_id": ["a", "b", "c", None], "scenario": ["s1", "s1", "s2", None], "workload": ["w", "w", "v", None],
        "policy": ["lend", "static", None, "lend"], "seed": [1, 2, 1, None], "requests": [10, 20, 5, 7],
    }))


def test_runs_offer_only_run_ids_and_spell_a_gateless_run_no_gate() -> None:
    runs = _runs()
    assert runs["run_id"].to_list() == ["a", "b", "c"] and runs["requests"].to_list() == [10, 20, 5]
    assert runs.filter(pl.col("run_id") == "c")["policy"].to_list() == [NO_GATE]


def test_a_selection_keeps_the_runs_matching_every_field() -> None:
    runs = _runs()
    assert selected_runs(runs, Selection()) is None
    assert selected_runs(runs, Selection(scenarios=("s1",))) == {"a", "b"}
    assert selected_runs(runs, Selection(scenarios=("s1",), seeds=(2,))) == {"b"}
    assert selected_runs(runs, Selection(policies=(NO_GATE,))) == {"c"}
    assert selected_runs(runs, Selection(run_ids=("a",), policies=("static",))) == frozenset()


def test_select_filters_by_run_id_else_by_the_arm_labels() -> None:
    runs = _runs()
    episodes = pl.DataFrame({"run_id": ["a", "b", None], "x": [1, 2, 3]})
    # nothing chosen: every row, those without a run id too; anything chosen: only the chosen runs'
    assert select(episodes, runs, Selection()).height == 3
    assert select(episodes, runs, Selection(scenarios=("s1",)))["x"].to_list() == [1, 2]
    summary = pl.DataFrame({"policy": ["lend", "static", None], "workload": ["w", "w", "v"], "seed": [1, 2, 1]},
                           schema_overrides={"policy": pl.String})
    assert select(summary, runs, Selection(policies=(NO_GATE,)))["workload"].to_list() == ["v"]
    assert select(summary, runs, Selection(seeds=(2,)))["policy"].to_list() == ["static"]
    unlabelled = pl.DataFrame({"y": [1]})
    assert select(unlabelled, runs, Selection(seeds=(2,))).height == 1


def test_a_mapped_run_label_reaches_the_episodes_the_filter_offers(store_path: Path) -> None:
    import duckdb

    con = duckdb.connect(str(store_path), read_only=True)
    try:
        own = set(runs_of(Analysis(con).runs())["run_id"])
        analysis = Analysis(con, labels={"run_id": "restore.scenario"})
        offered = set(runs_of(analysis.runs())["run_id"])
        assert offered and not offered & own  # the mapped attribute, not restorelens's own run id
        for episodes in (analysis.lending_episodes(), analysis.wake_episodes()):
            assert episodes.height and set(episodes["run_id"]) <= offered
        runs = runs_of(analysis.runs())
        chosen = Selection(run_ids=(sorted(offered)[0],))
        kept = select(analysis.wake_episodes(), runs, chosen).height + \
            select(analysis.lending_episodes(), runs, chosen).height
        assert kept > 0
    finally:
        con.close()
