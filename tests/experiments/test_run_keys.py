"""One number per name: ``run --json``, ``experiment``'s summary and the report of the run's own
spans give a key the same value for the same run (scenario, arm, seed), whichever prints it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from restorelens.cli import cli

SCENARIO, ARM, SEED = "moflux-balanced", "static", "1"


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_key_means_the_same_in_run_experiment_and_report(tmp_path: Path) -> None:
    spans = tmp_path / "run.jsonl"
    run = json.loads(_invoke("run", SCENARIO, "--virtual", "--arm", ARM, "--seed", SEED, "--out", str(spans), "--json"))
    _invoke("experiment", SCENARIO, "--arms", ARM, "--seeds", SEED, "--out", str(tmp_path / "study"))
    [study] = json.loads((tmp_path / "study" / "summary.json").read_text())["runs"]
    _invoke("load", str(spans), "--db", str(tmp_path / "run.duckdb"))
    report = json.loads(_invoke("report", "--db", str(tmp_path / "run.duckdb"), "--format", "json",
                                "--section", "policy_summary"))
    [summary] = report["policy_summary"]

    # the contention-window goodput, under its one name: the experiment's figure is the report's
    # of the same run's spans
    assert study["interactive_slo_goodput_rps"] == summary["interactive_slo_goodput_rps"]
    # the run's own figure is over the whole run, so it has a name of its own
    assert "interactive_slo_goodput_rps" not in run and "interactive_slo_met" not in run
    assert run["interactive_slo_goodput_whole_run_rps"] != study["interactive_slo_goodput_rps"]
    met, interactive = (int(n) for n in run["interactive_slo_met_whole_run"].split("/"))
    assert interactive == summary["interactive_requests"] and met > summary["interactive_slo_met"]
    for a, b in ((run, study), (run, summary), (study, summary)):
        shared = set(a) & set(b)
        assert {key: a[key] for key in shared} == {key: b[key] for key in shared}
