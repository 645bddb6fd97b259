"""Record the sample traces: every demo scenario in virtual time, as OTLP JSON lines.

``python -m restorelens.experiments.record sample_traces/`` writes one file per scenario: the Balanced
and Long-context MoFlux protocols under the lending arm and under the static arm (the study's
comparison, same seed, so the policy summary has a pair), and the four ModelClaim wake paths. Runs
are virtual (timestamps from the fixed virtual epoch), ids come from a seeded generator and spans
are exported one at a time in emission order, so the files are byte-identical on every machine
and every regeneration.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from restorelens.errors import RestorelensError

__all__ = ["SAMPLE_SCENARIOS", "record_samples", "sample_file_name", "sample_run_name", "sample_scenario"]

#: (scenario, arm) pairs the demo plays and the sample traces hold. Each Poisson MoFlux workload
#: runs under the lending arm and its baseline, static floors without lending (MoFlux's
#: comparison); the fixed-burst protocol's lending arm shows a grant back at once and an engine
#: that serves the request seconds later.
SAMPLE_SCENARIOS: tuple[tuple[str, str | None], ...] = (
    ("moflux-balanced", "lend"),
    ("moflux-balanced", "static"),
    ("moflux-long-context", "lend"),
    ("moflux-long-context", "static"),
    ("moflux-fixed-burst", "lend"),
    ("modelclaim-in-place", None),
    ("modelclaim-make-room", None),
    ("modelclaim-move", None),
    ("modelclaim-cold-start", None),
)


def sample_scenario(name: str, arm: str | None) -> Any:
    """The scenario as the demo and the samples play it: a wake scenario with one sleep -> wake
    cycle (each path once; ``restorelens experiment`` repeats it for a calibration's history)."""
    from restorelens.experiments.catalog import get_scenario

    scenario = get_scenario(name, arm)
    return replace(scenario, cycles=1) if scenario.kind == "modelclaim" else scenario


def sample_run_name(scenario: str, arm: str | None) -> str:
    """The scenario with its arm, if it has one: a file's stem and a run id's tail."""
    return f"{scenario}-{arm}" if arm else scenario


def sample_file_name(scenario: str, arm: str | None) -> str:
    return f"{sample_run_name(scenario, arm)}.jsonl"


def record_samples(folder: Path, *, seed: int = 0) -> list[Path]:
    """Write every sample scenario's spans into ``folder``; returns the files written."""
    from restorelens.experiments.run_telemetry import RunTelemetry
    from restorelens.experiments.runner import run_virtual

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for index, (name, arm) in enumerate(SAMPLE_SCENARIOS):
        path = folder / sample_file_name(name, arm)
        path.unlink(missing_ok=True)
        scenario, run_id = sample_scenario(name, arm), f"sample-{sample_run_name(name, arm)}"
        with RunTelemetry("file", path=path, batch=False, id_seed=seed * 1000 + index, run_id=run_id,
                          scenario=scenario.name) as telemetry:
            run_virtual(scenario, seed, telemetry.providers, run_id=run_id)
        telemetry.raise_if_spans_dropped()
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m restorelens.experiments.record FOLDER", file=sys.stderr)
        return 2
    try:
        for path in record_samples(Path(args[0])):
            print(f"{path}  {path.stat().st_size:,} bytes")
    except (RestorelensError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
