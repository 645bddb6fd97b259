"""``restorelens experiment --out DIR``: an earlier experiment's folder is refused or resumed, never
merged into; every run's file is written whole."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from restorelens.cli import cli
from restorelens.experiments.matrix import Matrix, play

ARGS = ("experiment", "moflux-balanced", "--arms", "static,lend", "--seeds", "1-2")


def _experiment(out: Path, *extra: str) -> Result:
    return CliRunner().invoke(cli, [*ARGS, "--out", str(out), *extra])


def _spans(result: Result) -> str:
    """The "4 runs, N spans: ..." line's count."""
    [line] = [line for line in result.output.splitlines() if " runs, " in line]
    return line.split(" runs, ")[1].split(" spans")[0]


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Result]:
    out = tmp_path_factory.mktemp("first") / "study"
    result = _experiment(out, "--workers", "2")
    assert result.exit_code == 0, result.output
    return out, result


@pytest.fixture
def earlier(first: tuple[Path, Result], tmp_path: Path) -> Path:
    """A copy of the first experiment's folder, to be changed by one test."""
    return Path(shutil.copytree(first[0], tmp_path / "study"))


def _files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted((folder / "runs").iterdir())}


def test_an_earlier_experiments_runs_without_its_store_are_refused_not_added_to(earlier: Path) -> None:
    runs = _files(earlier)
    (earlier / "spans.duckdb").unlink()
    result = _experiment(earlier)
    assert result.exit_code == 1 and "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    assert "--out" in line and "earlier experiment" in line and "runs/" in line and "--resume" in line
    assert _files(earlier) == runs and not (earlier / "spans.duckdb").exists()


def test_an_interrupted_experiments_runs_alone_are_refused(earlier: Path) -> None:
    for name in ("spans.duckdb", "summary.json", "summary.md", "experiment.json"):
        (earlier / name).unlink(missing_ok=True)
    result = _experiment(earlier)
    assert result.exit_code == 1 and "earlier experiment's files (runs/)" in result.output


def test_resume_keeps_whole_runs_plays_the_missing_and_doubles_nothing(first: tuple[Path, Result],
                                                                       earlier: Path) -> None:
    for name in ("spans.duckdb", "summary.json", "summary.md"):
        (earlier / name).unlink()
    kept = earlier / "runs" / "moflux-balanced-static-s1.jsonl"
    kept_before = kept.stat()
    (earlier / "runs" / "moflux-balanced-lend-s2.jsonl").unlink()
    # what a killed experiment leaves: a run's partial file, which must neither count nor be added to
    (earlier / "runs" / ".moflux-balanced-lend-s2.jsonl.partial").write_text('{"resourceSpans": [\n')
    result = _experiment(earlier, "--resume", "--workers", "2")
    assert result.exit_code == 0, result.output
    assert "resuming" in result.output and "3 of 4 runs already played" in result.output
    summary = json.loads((earlier / "summary.json").read_text())
    assert summary == json.loads((first[0] / "summary.json").read_text())
    assert _spans(result) == _spans(first[1])
    assert (kept.stat().st_ino, kept.stat().st_mtime_ns) == (kept_before.st_ino, kept_before.st_mtime_ns)
    assert not list(earlier.rglob("*.partial"))


def test_resume_of_a_whole_experiment_changes_no_figure(first: tuple[Path, Result], earlier: Path) -> None:
    result = _experiment(earlier, "--resume")
    assert result.exit_code == 0, result.output
    assert json.loads((earlier / "summary.json").read_text()) == json.loads((first[0] / "summary.json").read_text())
    assert _spans(result) == _spans(first[1])


def test_resume_under_other_settings_is_refused_naming_the_setting(earlier: Path) -> None:
    runs = _files(earlier)
    result = _experiment(earlier, "--resume", "--restore-budget-s", "2")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "--resume" in result.output and "restore_budget_s 1.0" in result.output
    assert _files(earlier) == runs


def test_resume_of_a_folder_without_its_settings_is_refused(earlier: Path) -> None:
    (earlier / "experiment.json").unlink(missing_ok=True)
    result = _experiment(earlier, "--resume")
    assert result.exit_code == 1 and "experiment.json" in result.output and "Traceback" not in result.output


def test_resume_into_a_new_folder_is_a_new_experiment(tmp_path: Path) -> None:
    result = _experiment(tmp_path / "new", "--resume", "--seeds", "1")
    assert result.exit_code == 0, result.output
    assert len(json.loads((tmp_path / "new" / "summary.json").read_text())["runs"]) == 2


HOLD = """
import fcntl, sys
lock = open(sys.argv[1], "a+")
fcntl.flock(lock, fcntl.LOCK_EX)
lock.seek(0); lock.truncate(); lock.write("%d" % __import__("os").getpid()); lock.flush()
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("resume", [False, True])
def test_a_folder_another_experiment_is_writing_is_refused_at_once(earlier: Path, resume: bool) -> None:
    for name in ("spans.duckdb", "summary.json", "summary.md"):
        (earlier / name).unlink()
    (earlier / "runs" / "moflux-balanced-lend-s2.jsonl").unlink()  # that experiment is still playing it
    runs, manifest = _files(earlier), (earlier / "experiment.json").read_bytes()
    with subprocess.Popen([sys.executable, "-c", HOLD, str(earlier / ".experiment.lock")],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as holder:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result = _experiment(earlier, *(["--resume"] if resume else []))
        holder.communicate("")
    assert result.exit_code == 1 and "Traceback" not in result.output
    [line] = result.output.strip().splitlines()
    assert "--out" in line and f"being written by another experiment (pid {holder.pid})" in line
    assert _files(earlier) == runs and (earlier / "experiment.json").read_bytes() == manifest
    assert not (earlier / "spans.duckdb").exists()


def test_two_experiments_given_one_folder_at_once_never_double_a_figure(first: tuple[Path, Result],
                                                                       tmp_path: Path) -> None:
    out = tmp_path / "study"
    argv = [sys.executable, "-m", "restorelens", *ARGS, "--out", str(out), "--resume"]
    both = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [(proc.communicate()[0], proc.returncode) for proc in both]
    # each finished the experiment (the other had let go) or was refused while the other held it
    for output, code in outputs:
        assert (code == 0 and f"4 runs, {_spans(first[1])} spans" in output) or (
            code != 0 and "being written by another experiment" in output and "Traceback" not in output), output
    assert any(code == 0 for _, code in outputs)
    assert json.loads((out / "summary.json").read_text()) == json.loads((first[0] / "summary.json").read_text())


def test_a_run_played_again_replaces_its_file_whole(tmp_path: Path) -> None:
    matrix = Matrix(("moflux-fixed-burst",), ("lend",), (1,))
    [path] = play(matrix, tmp_path, workers=1)
    once = path.read_text().count("\n")
    play(matrix, tmp_path, workers=1)
    assert path.read_text().count("\n") == once
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_run_that_fails_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from restorelens.experiments import runner

    real = runner.run_virtual

    def fails_after_its_spans(scenario, seed, providers, run_id):  # type: ignore[no-untyped-def]
        real(scenario, seed, providers, run_id)
        for provider in (providers.client, providers.gate, providers.engine):
            provider.force_flush()
        raise RuntimeError("the run broke")

    monkeypatch.setattr(runner, "run_virtual", fails_after_its_spans)
    with pytest.raises(RuntimeError, match="the run broke"):
        play(Matrix(("moflux-fixed-burst",), ("lend",), (1,)), tmp_path, workers=1)
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_the_store_is_built_leaves_no_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import restorelens.collector as collector

    real = collector.load_paths

    def interrupted_after_loading(files, db):  # type: ignore[no-untyped-def]
        real(files, db)
        raise KeyboardInterrupt

    monkeypatch.setattr(collector, "load_paths", interrupted_after_loading)
    out = tmp_path / "study"
    result = CliRunner().invoke(cli, ["experiment", "moflux-fixed-burst", "--arms", "lend", "--seeds", "1",
                                      "--workers", "1", "--out", str(out)])
    assert result.exit_code == 130, result.output
    assert {p.name for p in out.iterdir()} <= {"experiment.json", ".experiment.lock", "runs"}  # neither the store nor a part of it
    assert [p.name for p in (out / "runs").iterdir()] == ["moflux-fixed-burst-lend-s1.jsonl"]
    assert f"interrupted: {out} holds 1 of 1 runs" in result.output and "Traceback" not in result.output
