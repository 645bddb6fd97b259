"""ModelClaim wake scenarios in virtual time: the whole span chain, decomposed by the real analysis.

Each scenario runs through ``restorelens run SCENARIO --virtual --out FILE`` (the CLI), the file is
loaded with the collector's loader into a DuckDB store, and ``Analysis.wake_episodes()`` must give
exactly what ``expected_wake`` derives from the engine presets (not read back from the run), for
every sleep -> wake cycle of the run (the default arm, ``fixed``: the same wake each time).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from restorelens.analysis import Analysis
from restorelens.cli import cli
from restorelens.collector import load_paths
from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_SCENARIOS, expected_wake
from restorelens.spans import (
    ATTR_MODELCLAIM_GPU_BYTES,
    ATTR_MODELCLAIM_HOST_RAM_BYTES,
    ATTR_MODELCLAIM_PHASE,
    SPAN_MODELCLAIM_STATE,
)

EXACT = 1e-6  # virtual time: exact up to the nanosecond timestamps at an epoch-sized float


def run_to_store(tmp_path: Path, name: str, *extra: str) -> tuple[Path, dict]:
    out = tmp_path / f"{name}.jsonl"
    result = CliRunner().invoke(cli, ["run", name, "--virtual", "--out", str(out), "--run-id", "r1", "--json", *extra])
    assert result.exit_code == 0, result.output
    db = tmp_path / "spans.duckdb"
    summary = load_paths([out], db)
    assert summary.loaded > 0 and summary.rejected == 0 and not summary.errors
    return db, json.loads(result.output)


@pytest.mark.parametrize("name", list(MODELCLAIM_SCENARIOS))
def test_each_path_decomposes_exactly_as_the_scenario_defines(tmp_path: Path, name: str) -> None:
    scenario = MODELCLAIM_SCENARIOS[name]
    expected = expected_wake(scenario)
    db, summary = run_to_store(tmp_path, name, "--cycles", "2")
    with Analysis.open(db) as analysis:
        wakes = analysis.wake_episodes()
        attempts = analysis.attempts()
        requests = analysis.requests()
    assert wakes.height == 2, wakes
    assert summary["arm"] == "fixed"
    # total: first token of the successful attempt, which the client also saw as its first chunk
    assert wakes.row(0, named=True)["total_s"] == pytest.approx(summary["first_token_s"], abs=1e-3)
    assert summary["success_attempt_s"] == pytest.approx(expected.success_s, abs=EXACT)
    for wake, request_id in zip(wakes.iter_rows(named=True), (f"{name}-first", f"{name}-first-c2"), strict=True):
        assert wake["wake_path"] == scenario.wake_path
        assert wake["first_status"] == 503
        assert wake["attempts"] == expected.attempts
        for column, value in (("retry_after_s", expected.retry_after_s), ("ready_s", expected.ready_s),
                              ("observed_s", expected.observed_s), ("hint_error_s", expected.hint_error_s),
                              ("overshoot_s", expected.overshoot_s), ("engine_schedule_s", 0.0)):
            assert wake[column] == pytest.approx(value, abs=EXACT), column
        assert wake["served"] and not wake["censored"] and not wake["clock_skew"]
        assert wake["request_id"] == request_id and wake["run_id"] == "r1"

        first = attempts.filter(attempts["request_id"] == request_id).sort("attempt_index")
        statuses = first["status_code"].to_list()
        assert statuses == [503] * (expected.attempts - 1) + [200]
        assert first["resend_count"].to_list()[1:] == list(range(1, expected.attempts))
        refused = first.filter(first["status_code"] == 503)
        assert set(refused["decision"].to_list()) == {"not_ready"}
        assert refused["retry_after_s"].to_list()[0] == scenario.expected_retry_after_s
        assert refused["modelclaim_phase"].null_count() == 0 and refused["modelclaim_reason"].null_count() == 0
        last = first.row(-1, named=True)
        assert last["decision"] == "admitted" and last["reached_engine"]
        # the wake links to the gate.request of the very first attempt
        assert wake["trigger_span_id"] == first.row(0, named=True)["gate_span_id"]
    # the second cycle (a fresh deployment, set up again) begins once the first one ended (a cold start
    # at once), in the same run
    cycle2 = requests["request_id"].str.ends_with("-c2")
    assert requests.filter(~cycle2)["end"].max() <= requests.filter(cycle2)["start"].min()
    assert cycle2.sum() == 2 and set(requests["run_id"]) == {"r1"}


def test_paths_show_their_own_phases_and_neighbour_or_origin(tmp_path: Path) -> None:
    (tmp_path / "room").mkdir()
    (tmp_path / "move").mkdir()
    db, _ = run_to_store(tmp_path / "room", "modelclaim-make-room", "--cycles", "1")
    with Analysis.open(db) as analysis:
        wake = analysis.wake_episodes().row(0, named=True)
        attempts = analysis.attempts()
    first = attempts.filter(attempts["request_id"] == "modelclaim-make-room-first")
    assert wake["neighbour"] == "qwen2.5-1.5b"
    assert first.sort("attempt_index").row(0, named=True)["modelclaim_reason"] == "WaitingForRoom"
    db, _ = run_to_store(tmp_path / "move", "modelclaim-move", "--cycles", "1")
    with Analysis.open(db) as analysis:
        wake = analysis.wake_episodes().row(0, named=True)
        reasons = analysis.attempts()["modelclaim_reason"].drop_nulls().unique().to_list()
    assert wake["from_pod"] == "pod-1" and wake["pod"] == "pod-2"
    assert "Moving" in reasons


def test_state_spans_carry_the_memory_each_state_holds(tmp_path: Path) -> None:
    out = tmp_path / "in-place.jsonl"
    result = CliRunner().invoke(cli, ["run", "modelclaim-in-place", "--virtual", "--out", str(out)])
    assert result.exit_code == 0, result.output
    states = []
    for line in out.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    if span["name"] == SPAN_MODELCLAIM_STATE:
                        attrs = {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}
                        states.append(attrs)
    held = {(s[ATTR_MODELCLAIM_PHASE], int(s[ATTR_MODELCLAIM_GPU_BYTES]), int(s[ATTR_MODELCLAIM_HOST_RAM_BYTES]))
            for s in states}
    claim = MODELCLAIM_SCENARIOS["modelclaim-in-place"].claims[0]
    per_gpu = claim.max_footprint_bytes + claim.kv_floor_bytes
    # with the wake reserve, asleep still holds the full perGPU; level-1 sleep puts the weights in host RAM
    assert ("Sleeping", per_gpu, claim.weight_bytes) in held
    assert ("Activating", per_gpu, claim.weight_bytes) in held
    assert ("Active", per_gpu, 0) in held


def test_the_same_seed_gives_the_same_spans(tmp_path: Path) -> None:
    def names_and_times(path: Path) -> list[tuple[str, str, str]]:
        rows = []
        for line in path.read_text().splitlines():
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    rows += [(s["name"], s["startTimeUnixNano"], s["endTimeUnixNano"]) for s in ss["spans"]]
        return sorted(rows)

    outs = []
    for i in range(2):
        out = tmp_path / f"{i}.jsonl"
        assert CliRunner().invoke(cli, ["run", "modelclaim-cold-start", "--virtual", "--out", str(out)]).exit_code == 0
        outs.append(names_and_times(out))
    assert outs[0] == outs[1] and len(outs[0]) > 10


def test_the_runners_drive_the_lifecycle_through_its_public_calls() -> None:
    # The live runner can only use the gate's HTTP endpoints; the virtual one must not reach into
    # VirtualLifecycle's internals either, or the two could set the deployment up differently.
    import ast
    import inspect

    from restorelens.experiments.modelclaim import deployment, virtual

    for module in (virtual, deployment):
        private = [node.attr for node in ast.walk(ast.parse(inspect.getsource(module)))
                   if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                   and isinstance(node.value, ast.Attribute) and node.value.attr in ("lifecycle", "core", "backend")]
        assert private == [], (module.__name__, private)
