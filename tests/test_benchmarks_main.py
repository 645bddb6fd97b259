"""`python -m benchmarks`: the runner's command line (the benchmarks themselves have their own tests)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


def test_help_lists_every_benchmark_module() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for module in sorted(p.stem for p in (ROOT / "benchmarks").glob("bench_*.py")):
        assert module in result.stdout


def test_an_unknown_benchmark_is_a_one_line_error_naming_the_valid_ones() -> None:
    result = _run("bench_nope")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "unknown benchmark bench_nope; available: bench_analysis" in result.stderr


def test_bench_collector_prints_the_store_floor_beside_the_anchor() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_collector", "--spans", "3000", "--runs", "1", "--receiver-spans", "0",
         "--sides", "duckdb-anchor,restorelens,store-alone"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "restorelens vs anchor: " in result.stdout
    floor = [line for line in result.stdout.splitlines() if "the store's work alone (" in line]
    assert len(floor) == 1 and "the whole load takes" in floor[0]
    assert re.search(r"\d\.\d\dx (faster|slower) than the anchor wall", floor[0]), floor[0]
    assert "store-alone breakdown (its best run): insert" in result.stdout
    assert "receiver:" not in result.stdout  # --receiver-spans 0 leaves it out


def test_bench_collector_refuses_a_count_below_one_in_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "benchmarks.bench_collector", "--runs", "0"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--runs" in result.stderr.strip().splitlines()[-1]
