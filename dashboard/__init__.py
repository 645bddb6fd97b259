"""restorelens.dashboard: the Streamlit recovery dashboard (thin pages) and its Plotly figure builders.

``restorelens dashboard --db FILE`` starts it (docs/dashboard.md). Names are imported lazily
(PEP 562) so that the CLI does not pay for Streamlit and Plotly; ``from restorelens.dashboard
import X`` works for every name in ``__all__``.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "DEFAULT_LIMITS": "data",
    "EngineSummary": "data",
    "EpisodePressure": "data",
    "LENDING_EVENTS": "data",
    "LendingDetail": "data",
    "NO_GATE": "data",
    "Overview": "data",
    "PolicyPage": "frontier",
    "Selection": "data",
    "Settings": "data",
    "WakeDetail": "data",
    "distribution_curves": "data",
    "engine_distributions": "figures",
    "engine_summary": "data",
    "episode_pressure": "data",
    "explorer_link": "waterfall",
    "frontier_figure": "frontier",
    "gates_figure": "frontier",
    "hint_scatter": "timelines",
    "lending_detail": "data",
    "lending_timeline": "timelines",
    "lifecycle_swimlanes": "lifecycle",
    "linked": "waterfall",
    "memory_over_time": "lifecycle",
    "occupancy_steps": "data",
    "overview": "data",
    "policy_page": "frontier",
    "pressure_timeline": "timelines",
    "runs_of": "data",
    "select": "data",
    "time_bars": "figures",
    "time_segments": "data",
    "ttft_figure": "frontier",
    "wake_detail": "data",
    "wake_timeline": "timelines",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
