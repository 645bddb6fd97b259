"""``restorelens experiment --replay``: workloads built from recorded stores, and the command on them."""

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
from restorelens.errors import SettingError
from restorelens.experiments.catalog import get_scenario
from restorelens.experiments.matrix import Cell, Matrix, _cells_of_job, _job, play
from restorelens.experiments.replay import (
    DEFAULT_REPLAY_ENGINE,
    RecordedRequest,
    parse_class_map,
    prompt_chars_for,
    replay_workload,
    replays_from_store,
    scenario_from_json,
)
from restorelens.sim.config import PRESETS
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
VLLM_DIRECT = ROOT / "tests" / "analysis" / "data" / "vllm_direct.jsonl"
ENGINE = PRESETS[DEFAULT_REPLAY_ENGINE]
T0_NS = 1_767_225_600_000_000_000


def _request(i: int, at_s: float, traffic_class: str | None = "interactive", **fields: Any) -> RecordedRequest:
    return RecordedRequest(**{"run_id": "r", "request_id": f"q{i}", "source": "client",
                              "arrival_ns": T0_NS + round(at_s * 1e9), "traffic_class": traffic_class,
                              "prompt_tokens": 118, "completion_tokens": 16, **fields})


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


# --- the workload, from rows ---------------------------------------------------------------------


def test_every_prompt_length_an_engine_can_count_is_hit_exactly() -> None:
    for engine in PRESETS.values():
        floor = engine.estimate_prompt_tokens(0)
        for tokens in range(1, 5_000):
            chars = prompt_chars_for(tokens, engine)
            if tokens <= floor:
                assert chars == 0
                continue
            assert engine.estimate_prompt_tokens(chars) == tokens
            assert engine.estimate_prompt_tokens(chars - 1) < tokens  # the fewest characters


def test_arrivals_keep_their_offsets_from_the_first_to_the_microsecond() -> None:
    rows = [_request(2, 10.0000004), _request(0, 3.25), _request(1, 3.25), _request(3, 3.2500006)]
    replay = replay_workload(rows, ENGINE, name="replay-r", engine_preset=DEFAULT_REPLAY_ENGINE)
    assert [(a.at_s, a.request_id) for a in replay.workload.arrivals] == [
        (0.0, "q0"), (0.0, "q1"), (0.000001, "q3"), (6.75, "q2")]
    assert replay.workload.name == "replay-r" and replay.run_id == "r"


def test_classes_come_from_the_recording_then_the_class_map_then_the_gates_default() -> None:
    rows = [_request(0, 0, "batch"), _request(1, 1, "gold"), _request(2, 2, "bronze"), _request(3, 3, None)]
    replay = replay_workload(rows, ENGINE, name="x", engine_preset="p", class_map=parse_class_map(["gold=batch"]))
    assert [a.traffic_class for a in replay.workload.arrivals] == ["batch", "batch", "interactive", "interactive"]
    assert replay.defaulted_classes == {"bronze": 1, None: 1}
    assert "2 played as interactive" in replay.describe()
    with pytest.raises(SettingError, match="--replay-class"):
        parse_class_map(["gold=vip"])


def test_tokens_are_the_engines_and_a_request_never_served_takes_its_classs_median() -> None:
    rows = [
        _request(0, 0, prompt_tokens=100, completion_tokens=24, max_tokens=32),  # stopped early: 24 is its length
        _request(1, 1, prompt_tokens=300, completion_tokens=40),
        _request(2, 2, prompt_tokens=200, completion_tokens=8),
        _request(3, 3, prompt_tokens=None, completion_tokens=None),  # rejected at the gate: no engine span
        _request(4, 4, "batch", prompt_tokens=1_607, completion_tokens=None, max_tokens=64),
    ]
    replay = replay_workload(rows, ENGINE, name="x", engine_preset="p")
    counted = [(ENGINE.estimate_prompt_tokens(a.prompt_chars), a.max_tokens) for a in replay.workload.arrivals]
    # the median of 100, 300, 200 by nearest rank is 200; of 24, 40, 8 it is 24
    assert counted == [(100, 24), (300, 40), (200, 8), (200, 24), (1_607, 64)]
    assert (replay.prompt_from_median, replay.output_from_median, replay.cut_to_fit) == (1, 1, 0)


def test_a_request_longer_than_the_engine_takes_is_cut_to_fit() -> None:
    rows = [_request(0, 0, prompt_tokens=4_000, completion_tokens=500), _request(1, 1, prompt_tokens=9_000)]
    replay = replay_workload(rows, ENGINE, name="x", engine_preset="p")
    for arrival in replay.workload.arrivals:
        assert ENGINE.estimate_prompt_tokens(arrival.prompt_chars) + arrival.max_tokens <= ENGINE.max_model_len
    assert [a.max_tokens for a in replay.workload.arrivals] == [96, 1] and replay.cut_to_fit == 2


def test_a_run_without_phases_is_one_window_contention_for_interactive_and_borrow_for_batch() -> None:
    replay = replay_workload([_request(0, 5), _request(1, 7, "batch"), _request(2, 25)], ENGINE, name="x",
                             engine_preset="p")
    workload = replay.workload
    assert [a.phase for a in workload.arrivals] == [ARRIVAL_PHASE_RETURN, ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN]
    assert {(p.name, p.start_s, p.end_s) for p in workload.phases} == {
        (ARRIVAL_PHASE_RETURN, 0.0, 20.0), (ARRIVAL_PHASE_BORROW, 0.0, 20.0)}
    assert replay.windows == "whole replay"


def test_a_labelled_run_keeps_its_recorded_phases_and_windows() -> None:
    rows = [_request(0, 3, arrival_phase="interactive-alone", arrival_phase_start_s=0.0, arrival_phase_window_s=25.0),
            _request(1, 61, arrival_phase="return", arrival_phase_start_s=60.0, arrival_phase_window_s=25.0),
            _request(2, 70)]  # no phase in a labelled run: played, not scored
    workload = replay_workload(rows, ENGINE, name="x", engine_preset="p").workload
    assert [a.phase for a in workload.arrivals] == ["interactive-alone", "return", ""]
    assert [(p.name, p.start_s, p.end_s) for p in workload.phases] == [
        ("interactive-alone", 0.0, 25.0), ("return", 60.0, 85.0)]


def test_a_run_with_no_token_counts_at_all_is_one_line_naming_replay() -> None:
    with pytest.raises(SettingError, match="--replay.*no request of the run reached an engine"):
        replay_workload([_request(0, 0, prompt_tokens=None, completion_tokens=None)], ENGINE, name="x",
                        engine_preset="p")


def test_the_sql_follows_the_house_style_and_the_span_contract() -> None:
    sql = resources.files("restorelens.experiments").joinpath("sql", "replay_requests.sql").read_text()
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
