"""Run every benchmark module in this folder (``make bench``), or the ones named on the command line.

Each ``benchmarks/bench_*.py`` defines ``main() -> None`` that measures a target side by side with its
anchor in the same run and prints the figures and their ratio.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    names = argv or sorted(p.stem for p in here.glob("bench_*.py"))
    if not names:
        print("no benchmarks found in benchmarks/", file=sys.stderr)
        return 1
    sys.path.insert(0, str(here.parent))
    for name in names:
        print(f"== {name}", flush=True)
        importlib.import_module(f"benchmarks.{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
