"""`benchmarks/memory.py`: a child's peak memory is its own, not its parent's."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = "from benchmarks.memory import peak_rss_bytes; print(peak_rss_bytes())"


def _child(code: str) -> int:
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                            check=True)
    return int(result.stdout)


def test_a_child_of_a_large_parent_reports_its_own_peak() -> None:
    held = bytearray(512 * 2**20)  # calloc'd: untouched pages would not count, hence the writes
    for i in range(0, len(held), 4096):
        held[i] = 1
    parent_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert parent_peak > 512 * 2**20
    own = _child(_CHILD)
    del held
    # an interpreter importing one module; ru_maxrss, which the benchmarks read before, gives the
    # parent's 512 MiB here (Linux carries it across exec)
    assert own < 256 * 2**20
