"""The engines' pressure around an episode: the scrapes of its model's engines in its window."""

from __future__ import annotations

import polars as pl

from restorelens.dashboard.pressure import episode_pressure


def _scrapes(rows: list[tuple[float, str, str, str, float]], t0_ns: int) -> pl.DataFrame:
    """engine_pressure rows: (seconds from t0, target, model, engine index, running)."""
    return pl.DataFrame(
        [(t0_ns + round(at * 1e9), target, model, index, running, 0.0, 0.5, 0.0)
         for at, target, model, index, running in rows],
        schema={"at_ns": pl.Int64, "target": pl.String, "model_name": pl.String, "engine_index": pl.String,
                "running": pl.Float64, "waiting": pl.Float64, "kv_cache_usage_fraction": pl.Float64,
                "preemptions_total": pl.Float64},
        orient="row",
    )


def test_episode_pressure_keeps_the_scrapes_of_its_models_engines_in_its_window() -> None:
    t0_ns = 1_000_000_000_000
    pressure = _scrapes([(-6.0, "a", "tiny", "0", 9), (-1.0, "a", "tiny", "0", 1), (2.5, "a", "tiny", "0", 2),
                         (2.5, "a", "tiny", "1", 3), (3.0, "b", "tiny", "0", 4), (1.0, "c", "qwen", "0", 5),
                         (20.0, "a", "tiny", "0", 9)], t0_ns)
    window = episode_pressure(pressure, "tiny", t0_ns, -5.0, 10.0)
    assert window.scraped and window.models == ("qwen", "tiny")
    # target a reports two engines (vLLM's data-parallel engine index): each is its own line
    assert window.samples.rows() == [(-1.0, "a · engine 0", 1.0, 0.0, 0.5), (2.5, "a · engine 0", 2.0, 0.0, 0.5),
                                     (2.5, "a · engine 1", 3.0, 0.0, 0.5), (3.0, "b", 4.0, 0.0, 0.5)]
    other = episode_pressure(pressure, "small", t0_ns, -5.0, 10.0)
    assert other.scraped and other.samples.is_empty()
    none = episode_pressure(pressure.clear(), "tiny", t0_ns, -5.0, 10.0)
    assert not none.scraped and none.samples.is_empty()
