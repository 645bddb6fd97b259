"""restorelens.dashboard: the Streamlit recovery dashboard (thin pages) and its Plotly figure builders.

``restorelens dashboard --db FILE`` starts it (docs/dashboard.md). Names are imported lazily
(PEP 562) so that the CLI does not pay for Streamlit and Plotly; ``from restorelens.dashboard
import X`` works for every name in ``__all__``.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "DEFAULT_LIMITS": "overview",
    "EngineSummary": "engine",
    "EpisodePressure": "pressure",
    "LENDING_EVENTS": "episodes",
    "LendingDetail": "episodes",
    "Overview": "overview",
    "PolicyPage": "frontier",
    "Selection": "selection",
    "Settings": "selection",
    "WakeDetail": "episodes",
    "distribution_curves": "engine",
    "engine_distributions": "figures",
    "engine_summary": "engine",
    "episode_pressure": "pressure",
    "explorer_link": "waterfall",
    "frontier_figure": "frontier",
    "gates_figure": "frontier",
    "hint_scatter": "timelines",
    "lending_detail": "episodes",
    "lending_timeline": "timelines",
    "lifecycle_swimlanes": "lifecycle",
    "linked": "waterfall",
    "memory_over_time": "lifecycle",
    "occupancy_steps": "episodes",
    "policy_page": "frontier",
    "pressure_timeline": "timelines",
    "runs_of": "selection",
    "select": "selection",
    "time_bars": "figures",
    "time_segments": "segments",
    "ttft_figure": "frontier",
    "wake_detail": "episodes",
    "wake_timeline": "timelines",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
