"""``restorelens experiment``: the study's whole matrix in one process, beside one process per run.

Target (the experiment issue): the 4 study arms x 3 MoFlux scenarios x 5 seeds, played in virtual
time, loaded into a store and scored, in <= 60 s on a 2-core machine. Measured side by side, the
same work from the same start (a fresh interpreter, no store):

- target: ``python -m restorelens experiment moflux-balanced moflux-long-context
  moflux-fixed-burst --out DIR``;
- anchor: the loop a user would write without it, one ``python -m restorelens run SCENARIO
  --virtual --arm ARM --seed N --out FILE`` process per run, two at a time (one per core, as the
  target's pool), then ``python -m restorelens load`` and ``python -m restorelens report
  --section policy_summary`` on the files.

Each is run ``REPEATS`` times, alternating; the best wall time of each is compared.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks.ratios import versus

SCENARIOS = ("moflux-balanced", "moflux-long-context", "moflux-fixed-burst")
ARMS = ("fcfs", "priority", "static", "lend")
SEEDS = (1, 2, 3, 4, 5)
REPEATS = int(os.environ.get("BENCH_EXPERIMENT_REPEATS", "2"))
TARGET_S = 60.0
CLI = [sys.executable, "-m", "restorelens"]


def _target(folder: Path) -> float:
    started = time.perf_counter()
    subprocess.run([*CLI, "experiment", *SCENARIOS, "--out", str(folder / "study")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def _anchor(folder: Path) -> float:
    runs = [(s, a, n) for s in SCENARIOS for a in ARMS for n in SEEDS]
    started = time.perf_counter()

    def one(run: tuple[str, str, int]) -> None:
        scenario, arm, seed = run
        out = folder / f"{scenario}-{arm}-{seed}.jsonl"
        subprocess.run([*CLI, "run", scenario, "--virtual", "--arm", arm, "--seed", str(seed), "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(one, runs))
    db = folder / "spans.duckdb"
    subprocess.run([*CLI, "load", *sorted(str(p) for p in folder.glob("*.jsonl")), "--db", str(db)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([*CLI, "report", "--db", str(db), "--section", "policy_summary"], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    runs = len(SCENARIOS) * len(ARMS) * len(SEEDS)
    print(f"{runs} virtual runs ({len(SCENARIOS)} scenarios x {len(ARMS)} arms x {len(SEEDS)} seeds), "
          f"best of {REPEATS}, wall seconds, {os.cpu_count()} cores")
    target_s, anchor_s = [], []
    for _ in range(REPEATS):
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            target_s.append(_target(Path(a)))
            anchor_s.append(_anchor(Path(b)))
    best_target, best_anchor = min(target_s), min(anchor_s)
    verdict = "meets the goal" if best_target <= TARGET_S else "misses the goal"
    print(f"target: restorelens experiment (one command)     {best_target:7.2f} s  (goal <= {TARGET_S:g} s): {verdict}")
    print(f"anchor: one restorelens run per run, then load   {best_anchor:7.2f} s")
    print(f"restorelens vs anchor: {versus(best_anchor, best_target)} wall")


if __name__ == "__main__":
    main()
