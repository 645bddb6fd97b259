"""``restorelens calibrate``: what a span store teaches a gate before the gate has seen a wake.

``--wakes FILE`` writes the gate's calibration file (``[modelclaim] calibration_path``) from the
store's wake episodes, so that the first wake after a gate starts is hinted (and, live, polled)
from the deployment's own history instead of the fixed table: per model and wake path, the seconds
from the engine call (``engine.wake_called``: the start of a cold start or a move, the wake of an
in-place wake) to the gate routing again (``ready.observed``) — the duration the gate's own
``WakeCalibration`` learns, the last ``HISTORY_WAKES`` of them, oldest first. A cold start's
duration holds the engine's startup phases (docs/analysis.md, "wake_phases"), whatever engine
made them.

Making room is not learnt here: its path begins at the neighbour's sleep, which the wake span does
not carry; the gate learns it from its own wakes, and the claims' ``expected`` table (sleep plus
wake) covers it before. The file is merged per model and path: what the store has replaces the
file's entry for that model and path (so running the command twice gives one history, not two),
every other entry stays, and the write is the gate's own (locked, whole, durable).
"""

from __future__ import annotations

from typing import Any

import click

from restorelens.analysis import note_if_empty, resolve_source, source_options, store_errors

__all__ = ["COMMANDS", "HISTORY_WAKES", "LEARNT_PATHS", "calibrate", "wake_history"]

#: Wake paths whose duration runs from the engine call the wake span records.
LEARNT_PATHS = ("cold-start", "move", "in-place")
#: As many as a gate keeps per model and path (``WakeCalibration``'s default window).
HISTORY_WAKES = 20


def wake_history(episodes: Any, window: int) -> dict[str, dict[str, list[float]]]:
    """model -> wake path -> the last ``window`` durations (seconds, oldest first) of the wake
    episodes (``Analysis.wake_episodes()``) that became ready on a learnt path."""
    import polars as pl

    usable = (
        episodes.filter(pl.col("wake_path").is_in(LEARNT_PATHS) & pl.col("observed_s").is_not_null()
                        & pl.col("process_started_s").is_not_null())
        .with_columns((pl.col("observed_s") - pl.col("process_started_s")).alias("duration_s"))
        # A negative duration is clock skew between two of the gate's own events: no observation.
        .filter(pl.col("duration_s") >= 0)
        .sort("t0", "trace_id", "span_id")
    )
    wakes: dict[str, dict[str, list[float]]] = {}
    for (model, path), group in usable.group_by(["model", "wake_path"], maintain_order=True):
        wakes.setdefault(str(model), {})[str(path)] = [round(d, 6) for d in group["duration_s"].tail(window)]
    return {model: dict(sorted(paths.items())) for model, paths in sorted(wakes.items())}


@click.command()
@source_options
@click.option("--wakes", "wakes_path", required=True, type=click.Path(dir_okay=False), metavar="FILE",
              help="The gate's calibration file to write ([modelclaim] calibration_path): created, or merged "
                   "into per model and wake path.")
def calibrate(db_path: str | None, source_text: str | None, since: str | None, until: str | None,
              runs: tuple[str, ...], wakes_path: str) -> None:
    """Teach a gate the wakes a span store holds, before it sees one itself.

    Writes the gate's calibration file from the store's wake episodes: per model and wake path (cold
    start, move, in place), how long each took from the engine call to the gate routing again, the
    last 20. A gate started with `calibration_path` set to that file hints a model's first wake from
    this history (`hint_source = calibrated`) instead of the fixed table, and polls readiness finely
    around it. Making room is learnt by the gate itself. Exit 1, the file untouched, when the window
    holds no wake that became ready.
    """
    from pathlib import Path

    from restorelens.analysis import open_analysis
    from restorelens.errors import InputError
    from restorelens.gate.modelclaim import read_wakes, seed_calibration

    source, window = resolve_source(db_path, source_text, since, until, runs)
    path = Path(wakes_path)
    if not path.parent.is_dir():
        raise InputError(f"--wakes {path}", f"its folder {path.parent} does not exist")
    read_wakes(path)  # a file a gate would refuse is refused before any work, and left as it is
    with store_errors(source.describe()), open_analysis(source, window=window) as analysis:
        note_if_empty(analysis, source, window)
        learnt = wake_history(analysis.wake_episodes(), HISTORY_WAKES)
    if not learnt:
        raise InputError(source.describe(), "holds no wake that became ready on a cold start, a move or an in-place "
                                            f"wake in this window: nothing to calibrate from; {path} is unchanged")
    gate = seed_calibration(path, learnt)
    for model, paths in learnt.items():
        for wake_path, durations in paths.items():
            click.echo(f"{model} {wake_path}: {len(durations)} wake(s); a gate predicts "
                       f"{gate.predict_s(model, wake_path):.3f} s (p{gate.quantile * 100:.0f}, nearest rank)")
    click.echo(f"wrote {path}")

COMMANDS = [calibrate]
