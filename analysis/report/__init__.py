"""The report: the numbers a user acts on, as named sections of polars DataFrames, and renderers.

Sections (``SECTIONS``, in order): episode counts (how many, how many censored or clock-skewed),
lending and wake episode statistics, the engine's startup phases of the wakes (only when some
engine exported startup spans), request latencies, the engine's view of every request it
served (per engine x traffic class, gate or not), the policy summary and the paired differences
(median over seeds). ``build.py`` computes them; ``formats.py`` writes them in one of ``FORMATS``.
A null policy (a request that passed no gate and carries no arm label) reads "no gate" in the text
formats; JSON and CSV keep it null (empty).

``FORMATS`` and ``SECTIONS`` are defined here, light, for ``restorelens report``'s options; the
other names are imported lazily (PEP 562): they need polars.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

#: The report's sections, in the order ``build_report`` returns them.
SECTIONS = (
    "episode_counts",
    "lending_episodes",
    "wake_episodes",
    "wake_phases",
    "requests",
    "engine",
    "policy_summary",
    "paired_differences",
)
#: The formats ``render`` writes (``table`` is rich's terminal rendering).
FORMATS = ("table", "json", "markdown", "csv")

_EXPORTS: dict[str, str] = {
    "ENGINE_METRICS": "build",
    "LENDING_METRICS": "build",
    "NO_GATE": "formats",
    "REQUEST_METRICS": "build",
    "WAKE_METRICS": "build",
    "OUTSIDE_ENGINE_SPANS": "build",
    "phase_statistics": "build",
    "build_report": "build",
    "render": "formats",
    "with_no_gate": "formats",
}

_lazy_all, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_lazy_all, "FORMATS", "SECTIONS"])
