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
    "PolicyData": "data",
    "Selection": "data",
    "Settings": "data",
    "WakeDetail": "data",
    "distribution_curves": "data",
    "engine_distributions": "figures",
    "engine_summary": "data",
    "episode_pressure": "data",
    "goodput_strip": "figures",
    "hint_scatter": "timelines",
    "lending_detail": "data",
    "lending_timeline": "timelines",
    "lifecycle_swimlanes": "figures",
    "occupancy_steps": "data",
    "overview": "data",
    "paired_strip": "figures",
    "policy_data": "data",
    "runs_of": "data",
    "select": "data",
    "pressure_timeline": "timelines",
    "time_bars": "figures",
    "time_segments": "data",
    "wake_detail": "data",
    "wake_timeline": "timelines",
    "waterfall": "figures",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
