"""Run every benchmark module in this folder (``make bench``), or the ones named on the command line.

Each ``benchmarks/bench_*.py`` defines ``main() -> None`` that measures a target side by side with its
anchor in the same run and prints the figures and their ratio. A module's own options (``--10m``,
``--spans N``) are given by running it alone: ``python -m benchmarks.bench_analysis --help``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    available = sorted(p.stem for p in here.glob("bench_*.py"))
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run the restorelens benchmarks (all of them, or the ones named).",
        epilog="available: " + ", ".join(available),
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmark module, e.g. bench_analysis")
    args = parser.parse_args(argv)
    unknown = [name for name in args.names if name not in available]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; available: {', '.join(available)}")
    names = args.names or available
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
