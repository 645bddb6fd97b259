"""The sidebar's choice of runs and settings, and the rows of a frame it keeps."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from restorelens.analysis import Slo
from restorelens.analysis.report import NO_GATE, with_no_gate

__all__ = ["RUN_COLUMNS", "Selection", "Settings", "runs_of", "select", "selected_runs"]

#: The labels a run is known by, in the order the sidebar offers them.
RUN_COLUMNS = ("run_id", "scenario", "workload", "policy", "seed")


@dataclass(frozen=True)
class Selection:
    """The runs the pages show: each field the values chosen (empty: any). A run matches when it
    matches every field; ``policies`` spell a run without a gate ``NO_GATE``."""

    run_ids: tuple[str, ...] = ()
    scenarios: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    seeds: tuple[int, ...] = ()

    @property
    def active(self) -> bool:
        return bool(self.run_ids or self.scenarios or self.policies or self.seeds)


@dataclass(frozen=True)
class Settings:
    """What the sidebar sets for every page: the runs shown, the SLO and the percentile method."""

    selection: Selection = field(default_factory=Selection)
    slo: Slo = field(default_factory=Slo)
    method: str = "linear"


def runs_of(runs: pl.DataFrame) -> pl.DataFrame:
    """``Analysis.runs()`` as the sidebar offers it: one row per run id × its labels (``RUN_COLUMNS``)
    with its request count, a run without a gate's policy spelt ``NO_GATE``. Requests without a run
    id are no run: a deployment's own traffic is never filtered away by a run that does not exist."""
    schema = {"run_id": pl.String, "scenario": pl.String, "workload": pl.String, "policy": pl.String,
              "seed": pl.Int64}
    counts = pl.col("requests") if "requests" in runs.columns else pl.lit(1)
    return (runs.filter(pl.col("run_id").is_not_null())
            .select(*(pl.col(name).cast(dtype) for name, dtype in schema.items()), counts.cast(pl.Int64).alias("requests"))
            .with_columns(pl.col("policy").fill_null(NO_GATE))
            .group_by(list(schema)).agg(pl.col("requests").sum())
            .sort("run_id", "scenario", "workload", "policy", "seed", nulls_last=True))


def selected_runs(runs: pl.DataFrame, selection: Selection) -> frozenset[str] | None:
    """The run ids ``selection`` keeps (None: it filters nothing)."""
    if not selection.active:
        return None
    chosen = runs
    for column, values in (("run_id", selection.run_ids), ("scenario", selection.scenarios),
                           ("policy", selection.policies), ("seed", selection.seeds)):
        if values:
            chosen = chosen.filter(pl.col(column).is_in(list(values)))
    return frozenset(chosen["run_id"].to_list())


def select(frame: pl.DataFrame, runs: pl.DataFrame, selection: Selection) -> pl.DataFrame:
    """``frame``'s rows of the selected runs: by ``run_id`` when it has one, else by the arm labels
    it has (``policy``, ``workload``, ``seed``: the policy summary); a frame with neither as it is."""
    kept = selected_runs(runs, selection)
    if kept is None:
        return frame
    if "run_id" in frame.columns:
        return frame.filter(pl.col("run_id").is_in(sorted(kept)))
    keys = [c for c in ("policy", "workload", "seed") if c in frame.columns]
    if not keys:
        return frame
    arms = runs.filter(pl.col("run_id").is_in(sorted(kept))).select(keys).unique()
    shown = with_no_gate(frame) if "policy" in keys else frame
    return frame.filter(_matches(shown, arms, keys))


def _matches(frame: pl.DataFrame, arms: pl.DataFrame, keys: list[str]) -> pl.Series:
    """Per row of ``frame``: does its (keys) tuple appear in ``arms``?"""
    wanted = set(arms.select(keys).rows())
    return pl.Series([row in wanted for row in frame.select(keys).rows()], dtype=pl.Boolean)
