"""``restorelens experiment --replay`` on recorded stores (``experiments.replay.store``), the query, and a replay
sent to a worker (``experiments.replay.scenario_json``)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from restorelens import spans
from restorelens.analysis import Analysis
from restorelens.cli import cli
from restorelens.collector import SpanStore, load_paths
from restorelens.experiments.catalog import get_scenario
from restorelens.experiments.matrix import Cell, Matrix, _cells_of_job, _job, play
from restorelens.experiments.replay.scenario_json import scenario_from_json
from restorelens.experiments.replay.store import DEFAULT_REPLAY_ENGINE, replays_from_store
from restorelens.sim.config import PRESETS

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "sample_traces"
VLLM_DIRECT = ROOT / "tests" / "analysis" / "data" / "vllm_direct.jsonl"
ENGINE = PRESETS[DEFAULT_REPLAY_ENGINE]


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


# --- the query ---------------------------------------------------------------------------------------


def test_the_sql_follows_the_house_style_and_the_span_contract() -> None:
    sql = resources.files("restorelens.experiments.replay").joinpath("sql", "replay_requests.sql").read_text()
    assert sql.startswith("-- ") and re.search(r"^final as \($", sql, re.M)
    assert sql.rstrip().endswith("select * from final") and "$excluded_phases" in sql
    assert not re.search(r"\{\w*\}", sql)
    for key, sql_type in re.findall(r"try_cast\(\"SpanAttributes\"\['([^']+)'\] as (\w+)\)", sql):
        assert spans.ATTRIBUTE_TYPES[key] == spans.INT and sql_type == "bigint"
    for literal in re.findall(r"'([a-z_.]+)'", sql.split('"SpanName" in', 1)[1].splitlines()[0]):
        assert literal in spans.span_names().values()


# --- a store written by `restorelens experiment` -------------------------------------------------


@pytest.fixture(scope="module")
def experiment_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One fcfs run of Balanced, seed 1, as `restorelens experiment` plays and stores it: every
    request reaches the engine (no gate), so every token count is recorded."""
    folder = tmp_path_factory.mktemp("experiment")
    files = play(Matrix(("moflux-balanced",), ("fcfs",), (1,)), folder / "runs", workers=1)
    db = folder / "spans.duckdb"
    assert not load_paths(files, db).errors
    return db


def test_a_replayed_experiment_store_reproduces_the_recorded_arrivals_and_tokens_exactly(
        experiment_store: Path) -> None:
    [replay] = replays_from_store(experiment_store)
    played = get_scenario("moflux-balanced", "fcfs")
    engine = played.engine_config(1)
    original = played.workload(1).arrivals
    replayed = replay.workload.arrivals
    first_s = original[0].at_s
    assert [(a.request_id, a.traffic_class, a.phase) for a in replayed] == [
        (a.request_id, a.traffic_class, a.phase) for a in original]
    assert [a.at_s for a in replayed] == [round(a.at_s - first_s, 6) for a in original]
    # the engine of the replay counts each prompt as the recorded engine did, and generates as many tokens
    assert [ENGINE.estimate_prompt_tokens(a.prompt_chars) for a in replayed] == [
        engine.estimate_prompt_tokens(a.prompt_chars) for a in original]
    assert [a.max_tokens for a in replayed] == [a.max_tokens for a in original]
    assert (replay.name, replay.run_id, replay.windows) == ("replay-moflux-balanced-fcfs-s1", "moflux-balanced-fcfs-s1",
                                                            "recorded")
    assert replay.prompt_from_median == replay.output_from_median == replay.prompt_inexact == 0
    recorded_phases = {(p.name, p.start_s, p.end_s) for p in played.workload(1).phases}
    assert {(p.name, p.start_s, p.end_s) for p in replay.workload.phases} <= recorded_phases


def test_a_replay_travels_to_a_worker_whole_with_the_budget(experiment_store: Path) -> None:
    [replay] = replays_from_store(experiment_store)
    matrix = Matrix((replay.name, "moflux-fixed-burst"), ("static", "lend"), (1, 2), 2.5,
                    {replay.name: replay.scenario()})
    chunk = [(cell, Path(f"{cell.run_id}.jsonl")) for cell in matrix.cells()]
    rebuilt = _cells_of_job(_job(matrix, chunk))
    assert [(cell, path) for _, cell, path in rebuilt] == chunk
    assert all(scenario.restore_budget_s == 2.5 for scenario, _, _ in rebuilt)
    assert [scenario.arm for scenario, _, _ in rebuilt] == [cell.arm for cell, _ in chunk]
    replayed = [scenario for scenario, cell, _ in rebuilt if cell.scenario == replay.name]
    assert all(scenario.workload(7) == replace(replay.workload, seed=7) for scenario in replayed)
    assert scenario_from_json(json.loads(_job(matrix, chunk[:1]))["replays"][0]) == replay.scenario()
    assert matrix.scenario(Cell("moflux-fixed-burst", "lend", 1)) == replace(
        get_scenario("moflux-fixed-burst", "lend"), restore_budget_s=2.5)


# --- the sample traces' store, through the command ---------------------------------------------------


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("samples") / "spans.duckdb"
    result = _invoke("load", str(SAMPLES), "--db", str(db))
    assert result.exit_code == 0, result.output
    return db


def test_replaying_the_sample_traces_under_their_own_arms_scores_what_was_recorded(
        sample_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "replayed"
    runs = ("sample-moflux-balanced-lend", "sample-moflux-balanced-static")
    result = _invoke("experiment", "--replay", str(sample_store), "--replay-run", runs[0], "--replay-run", runs[1],
                     "--arms", "static,lend", "--workers", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert (out / "summary.md").read_text() in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert [r["recorded_run_id"] for r in summary["replay"]["runs"]] == list(runs)
    assert summary["replay"]["runs"][0]["requests"] == 66 and summary["restore_budget_s"] == 1.0
    assert {(r["scenario"], r["arm"], r["seed"]) for r in summary["runs"]} == {
        (f"replay-{run}", arm, 1) for run in runs for arm in ("static", "lend")}
    with Analysis.open(sample_store) as analysis:
        recorded = {row["policy"]: row for row in analysis.policy_summary().iter_rows(named=True)
                    if row["workload"] == "balanced"}
    # each recorded run, replayed under the arm it was recorded with, gives back its goodputs
    for run in runs:
        arm = run.rsplit("-", 1)[1]
        [replayed] = [r for r in summary["runs"] if (r["scenario"], r["arm"]) == (f"replay-{run}", arm)]
        for metric in ("interactive_slo_goodput_rps", "batch_borrow_goodput_rps"):
            assert replayed[metric] == pytest.approx(recorded[arm][metric])
    assert len(summary["frontier"]["points"]) == 4 and len(summary["frontier"]["medians"]) == 4


def test_by_default_every_recorded_run_but_the_wakes_is_replayed_once(sample_store: Path) -> None:
    replays = replays_from_store(sample_store)
    assert [r.run_id for r in replays] == [
        "sample-moflux-balanced-lend", "sample-moflux-balanced-static", "sample-moflux-fixed-burst-lend",
        "sample-moflux-long-context-lend", "sample-moflux-long-context-static"]
    assert all(r.windows == "recorded" and r.workload.arrivals[0].at_s == 0.0 for r in replays)


# --- traces of another client: vLLM's spans alone ------------------------------------------------


@pytest.fixture(scope="module")
def vllm_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("vllm") / "spans.duckdb"
    assert not load_paths([VLLM_DIRECT], db).errors
    return db


def test_traces_without_client_spans_arrive_from_vllms_spans_under_the_apps_tiers(vllm_store: Path) -> None:
    [replay] = replays_from_store(vllm_store, labels={"traffic_class": "app.tier"},
                                  class_map={"gold": "interactive", "bronze": "batch"})
    with Analysis.open(vllm_store, labels={"traffic_class": "app.tier"}) as analysis:
        engine = analysis.engine_requests().sort("attempt_start")
    starts_ns = engine["attempt_start"].dt.epoch("ns").to_list()
    # nanoseconds -> seconds from the first arrival, to the microsecond
    assert [a.at_s for a in replay.workload.arrivals] == [round((t - starts_ns[0]) / 1e9, 6) for t in starts_ns]
    assert [a.request_id for a in replay.workload.arrivals] == engine["span_id"].to_list()
    assert [a.traffic_class for a in replay.workload.arrivals] == [
        "interactive" if tier == "gold" else "batch" for tier in engine["traffic_class"].to_list()]
    # vLLM's completion tokens are each request's length, one stopped before its max_tokens of 32
    assert [a.max_tokens for a in replay.workload.arrivals] == engine["completion_tokens"].to_list()
    assert 24 in engine["completion_tokens"].to_list()
    assert [ENGINE.estimate_prompt_tokens(a.prompt_chars) for a in replay.workload.arrivals] == \
        engine["prompt_tokens"].to_list()
    assert replay.run_id is None and replay.name == "replay" and replay.windows == "whole replay"


def test_the_command_replays_vllms_traces(vllm_store: Path, tmp_path: Path) -> None:
    result = _invoke("experiment", "--replay", str(vllm_store), "--replay-label", "traffic_class=app.tier",
                     "--replay-class", "gold=interactive", "--replay-class", "bronze=batch", "--arms", "fcfs,lend",
                     "--workers", "1", "--out", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "replay: 5 requests of no run id (2 interactive, 3 batch)" in result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [(r["scenario"], r["arm"]) for r in summary["runs"]] == [("replay", "fcfs"), ("replay", "lend")]


# --- bad input: one line naming the flag or the file ---------------------------------------------


@pytest.mark.parametrize(("args", "named"), [
    (["moflux-balanced", "--replay", "{db}"], "--replay"),
    ([], "SCENARIO"),
    (["moflux-balanced", "--replay-run", "x"], "--replay-run"),
    (["moflux-balanced", "--replay-engine", "tiny-cpu"], "--replay-engine"),
    (["--replay", "{db}", "--replay-run", "nope"], "--replay-run"),
    (["--replay", "{db}", "--replay-engine", "nope"], "--replay-engine"),
    (["--replay", "{db}", "--replay-class", "gold=vip"], "--replay-class"),
    (["--replay", "{db}", "--replay-label", "tier"], "--replay-label"),
    (["--replay", "{empty}"], "--replay"),
    (["--replay", "{missing}"], "missing.duckdb"),
    (["moflux-balanced", "--restore-budget-s", "nan"], "--restore-budget-s"),
    (["moflux-balanced", "--restore-budget-s", "inf"], "--restore-budget-s"),
    (["moflux-balanced", "--restore-budget-s", "0"], "--restore-budget-s"),
    (["moflux-balanced", "--restore-budget-s", "-1"], "--restore-budget-s"),
])
def test_bad_input_is_one_line_naming_the_flag_or_the_file(sample_store: Path, tmp_path: Path, args: list[str],
                                                            named: str) -> None:
    empty = tmp_path / "empty.duckdb"
    SpanStore(empty).close()
    paths = {"db": str(sample_store), "empty": str(empty), "missing": str(tmp_path / "missing.duckdb")}
    result = _invoke("experiment", *[a.format(**paths) for a in args], "--out", str(tmp_path / "out"))
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert named in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "out").exists()


def test_nothing_replayable_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty.duckdb"
    SpanStore(empty).close()
    result = _invoke("experiment", "--replay", str(empty), "--out", str(tmp_path / "out"))
    assert "--replay" in result.output and "nothing to replay" in result.output
