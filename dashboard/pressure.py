"""The engines' pressure around one episode: the scrapes ``restorelens collect --scrape`` stored
(``engine_pressure``) of the engines serving its model, as offsets from its t0."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from restorelens.dashboard.episodes import epoch_ns

__all__ = ["EpisodePressure", "episode_pressure"]


@dataclass(frozen=True)
class EpisodePressure:
    """The engines' scrapes around one episode, for its pressure chart.

    ``samples``: offset_s (from t0), engine (the scraped target, with vLLM's engine index when a
    target reports several), running, waiting, kv_cache_usage_fraction. ``scraped``: the store
    holds any scrape at all; ``models``: the models its scrapes are of (to say why none matched).
    """

    model: str | None
    start_s: float
    end_s: float
    samples: pl.DataFrame
    scraped: bool
    models: tuple[str, ...]


def episode_pressure(pressure: pl.DataFrame, model: str | None, t0: Any, start_s: float,
                     end_s: float) -> EpisodePressure:
    """The scrapes (``engine_pressure``) of the engines serving ``model`` from ``start_s`` to
    ``end_s`` seconds around ``t0`` (an episode's, datetime or ns): the engines the analysis reads
    the episode's pressure at t0 from (the same model name)."""
    t0_ns = epoch_ns(t0)
    assert t0_ns is not None
    schema = {"offset_s": pl.Float64, "engine": pl.String, "running": pl.Float64, "waiting": pl.Float64,
              "kv_cache_usage_fraction": pl.Float64}
    models = tuple(sorted({str(name) for name in pressure["model_name"].drop_nulls().to_list()}))
    low, high = t0_ns + round(start_s * 1e9), t0_ns + round(end_s * 1e9)
    mine = pressure.filter((pl.col("model_name") == model) & pl.col("at_ns").is_between(low, high)) \
        if model is not None else pressure.clear()
    several = mine.group_by("target").agg(pl.col("engine_index").n_unique().alias("engines"))
    indexed = set(several.filter(pl.col("engines") > 1)["target"].to_list())
    samples = mine.sort("at_ns", "target", "engine_index").select(
        ((pl.col("at_ns") - t0_ns) / 1e9).alias("offset_s"),
        pl.when(pl.col("target").is_in(list(indexed)) & pl.col("engine_index").is_not_null())
        .then(pl.col("target") + " · engine " + pl.col("engine_index"))
        .otherwise(pl.col("target")).alias("engine"),
        "running", "waiting", "kv_cache_usage_fraction",
    ).cast(schema)  # type: ignore[arg-type]
    return EpisodePressure(model=model, start_s=start_s, end_s=end_s, samples=samples,
                           scraped=pressure.height > 0, models=models)
