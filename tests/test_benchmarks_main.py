"""`python -m benchmarks`: the runner's command line (the benchmarks themselves have their own tests)."""

from __future__ import annotations

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
