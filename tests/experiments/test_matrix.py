"""``restorelens experiment``: the matrix, its parsing, the study's table and the command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from restorelens.analysis import nearest_rank
from restorelens.analysis.study import StudyTable
from restorelens.cli import cli
from restorelens.errors import SettingError
from restorelens.experiments.matrix import MAX_SEEDS, Cell, Matrix, parse_arms, parse_seeds


@pytest.mark.parametrize(("text", "seeds"), [("1-5", (1, 2, 3, 4, 5)), ("1,3,3,7", (1, 3, 7)), ("1-3,9", (1, 2, 3, 9)),
                                             ("0", (0,))])
def test_seeds_are_ranges_and_lists(text: str, seeds: tuple[int, ...]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["a", "5-1", "-1", "1-", "", f"1-{MAX_SEEDS + 1}"])
def test_bad_seeds_are_a_setting_error_naming_the_option(text: str) -> None:
    with pytest.raises(SettingError, match="--seeds"):
        parse_seeds(text)


def test_arms_and_scenarios_are_checked() -> None:
    assert parse_arms("lend, static,lend") == ("lend", "static")
    with pytest.raises(SettingError, match="--arms.*greedy"):
        parse_arms("lend,greedy")
    with pytest.raises(SettingError, match="SCENARIO.*moflux-nope"):
        Matrix(("moflux-nope",))
    assert len(Matrix(("moflux-balanced", "moflux-fixed-burst"))) == 2 * 4 * 5


def test_the_budget_reaches_every_cells_scenario_and_must_be_a_positive_finite_number() -> None:
    matrix = Matrix(("moflux-balanced",), ("fcfs", "lend-budget"), (1,), restore_budget_s=0.25)
    assert [matrix.scenario(cell).restore_budget_s for cell in matrix.cells()] == [0.25, 0.25]
    assert [matrix.scenario(cell).arm for cell in matrix.cells()] == ["fcfs", "lend-budget"]
    assert Matrix(("moflux-balanced",)).scenario(Cell("moflux-balanced", "lend", 1)).restore_budget_s == 1.0
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(SettingError, match="--restore-budget-s"):
            Matrix(("moflux-balanced",), restore_budget_s=bad)


def test_frontier_medians_are_nearest_rank_over_the_seeds_that_have_a_goodput() -> None:
    runs = [{"scenario": "s", "arm": "lend", "seed": seed, "interactive_slo_goodput_rps": i,
             "batch_borrow_goodput_rps": b} for seed, i, b in ((1, 0.4, None), (2, 0.1, 0.2), (3, 0.3, 0.1),
                                                                (4, 0.2, None))]
    [median] = StudyTable(runs).frontier()["medians"]
    # 0.1 0.2 0.3 0.4 -> rank ceil(0.5 * 4) = 2: 0.2; batch has two values, 0.1 0.2 -> rank 1: 0.1
    assert median == {"scenario": "s", "arm": "lend", "seeds": 4, "interactive_slo_goodput_rps": 0.2,
                      "batch_borrow_goodput_rps": 0.1}


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([3.0, 1.0, 2.0], 0.5, 2.0), ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0), ([float(v) for v in range(11)], 0.95, 10.0),
    ([float(v) for v in range(20)], 0.95, 18.0), ([5.0], 0.0, 5.0), ([], 0.5, None),
])
def test_nearest_rank_is_the_value_at_rank_ceil_q_n(values: list[float], q: float, expected: float | None) -> None:
    assert nearest_rank(values, q) == expected


def test_the_command_plays_the_matrix_and_writes_the_studys_table(tmp_path: Path) -> None:
    out = tmp_path / "study"
    args = ["experiment", "moflux-fixed-burst", "--seeds", "1-2", "--arms", "static,lend", "--workers", "2",
            "--restore-budget-s", "2.5", "--out", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        f"moflux-fixed-burst-{arm}-s{seed}.jsonl" for arm in ("lend", "static") for seed in (1, 2)]
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["arm"], r["seed"]) for r in summary["runs"]] == [("static", 1), ("static", 2), ("lend", 1), ("lend", 2)]
    h3 = next(g for g in summary["gates"] if g["gate"] == "H3")
    assert h3["per_seed"] == {"1": pytest.approx(2 / 35), "2": pytest.approx(2 / 35)} and h3["holds"]
    # no fcfs or priority arm was played: those gates have nothing to compare
    assert [g["holds"] for g in summary["gates"] if g["gate"] in ("H1", "H2")] == [None, None]
    lend = [r for r in summary["runs"] if r["arm"] == "lend"]
    assert all(3.0 <= r["engine_schedule_s"] <= 5.0 for r in lend)
    assert (out / "summary.md").read_text() in result.output
    assert summary["restore_budget_s"] == 2.5
    # the frontier: each run's two goodputs, and per arm their medians over the seeds
    axes = ("interactive_slo_goodput_rps", "batch_borrow_goodput_rps")
    assert summary["frontier"]["points"] == [{k: r[k] for k in ("scenario", "arm", "seed", *axes)}
                                             for r in summary["runs"]]
    assert summary["frontier"]["medians"] == [
        {"scenario": "moflux-fixed-burst", "arm": arm, "seeds": 2,
         **{axis: nearest_rank([r[axis] for r in summary["runs"] if r["arm"] == arm], 0.5) for axis in axes}}
        for arm in ("static", "lend")]
    assert summary["frontier"]["medians"][0]["batch_borrow_goodput_rps"] == pytest.approx(2 / 35)

    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 1 and "holds an earlier experiment's files" in again.output and "Traceback" not in again.output


def test_an_unknown_scenario_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["experiment", "nope", "--out", str(tmp_path / "x")])
    assert result.exit_code == 1 and "SCENARIO" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x").exists()


def test_live_plays_the_runs_on_loopback_servers_and_scores_them_alike(tmp_path: Path) -> None:
    out = tmp_path / "live"
    result = CliRunner().invoke(cli, ["experiment", "moflux-fixed-burst", "--arms", "lend", "--seeds", "1", "--live",
                                      "--time-scale", "25", "--out", str(out)])
    assert result.exit_code == 0, result.output
    [run] = json.loads((out / "summary.json").read_text())["runs"]
    assert (run["scenario"], run["arm"], run["seed"]) == ("moflux-fixed-burst", "lend", 1)
    # real servers, time-scaled: the lending episode is there, in protocol seconds (no tolerance
    # asserted here: tests/experiments/test_live_vs_virtual.py compares live and virtual figures)
    assert run["engine_schedule_s"] is not None and run["grant_restore_s"] is not None
    assert run["batch_borrow_goodput_rps"] is not None
