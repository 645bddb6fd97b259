"""One palette for every page: the same event, phase, policy or wake path has the same colour
wherever it is drawn.

Keys are the values as the spans spell them (ModelClaim phases, gate policies, wake paths) and the
events of the episode pages. A value this module does not know (a user's own
policy, a phase a newer lifecycle emits) still gets a stable colour: ``colour`` picks one from
``EXTRA`` by the value's own hash, so it is the same on every page and every run.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping

__all__ = [
    "BAD",
    "EVENTS",
    "EXTRA",
    "GOOD",
    "NEUTRAL",
    "PHASES",
    "POLICIES",
    "SERVICES",
    "STATUS",
    "TEMPLATE",
    "WAKE_PATHS",
    "colour",
    "colours",
]

#: The Plotly template every figure uses.
TEMPLATE = "plotly_white"
NEUTRAL = "#7f7f7f"
GOOD = "#2ca02c"
BAD = "#d62728"

#: ModelClaim phases (``modelclaim.phase``), as the lifecycle driver emits them: ready is green,
#: the way there blues, asleep purple, failed red.
PHASES: Mapping[str, str] = {
    "Pending": "#c7c7c7",
    "Scheduling": "#bcbd22",
    "Loading": "#17becf",
    "Activating": "#1f77b4",
    "Active": GOOD,
    "Sleeping": "#9467bd",
    "Failed": BAD,
}

#: The instants and stretches of a restoration (lending and wake episodes) and their segments.
EVENTS: Mapping[str, str] = {
    "demand returned": "#636363",
    "grant restored": "#1f77b4",
    "borrowed drained": "#ff7f0e",
    "engine scheduled": "#9467bd",
    "first token": GOOD,
    "first 503": BAD,
    "wake start": "#8c564b",
    "process started": "#c7c7c7",
    "outside the engine's spans": "#7f7f7f",
    "engine ready": "#17becf",
    "readiness observed": "#aec7e8",
    "retry": "#e377c2",
    "Retry-After elapses": "#bcbd22",
    "success": GOOD,
}

#: Gate policies (``gate.policy`` / ``restore.policy``) and the requests that passed no gate.
POLICIES: Mapping[str, str] = {
    "fcfs": "#8c564b",
    "priority": "#1f77b4",
    "static": "#7f7f7f",
    "lend": "#ff7f0e",
    "lend-budget": "#2ca02c",
    "lend-preempt": "#d62728",
    "lend-priority": "#9467bd",
    "no gate": "#17becf",
}

#: ModelClaim wake paths (``modelclaim.wake_path``).
WAKE_PATHS: Mapping[str, str] = {
    "in-place": "#2ca02c",
    "make-room": "#ff7f0e",
    "move": "#1f77b4",
    "cold-start": "#d62728",
}

#: The services of a trace (``service.name``) as restorelens's own components name them.
SERVICES: Mapping[str, str] = {
    "restorelens-loadgen": "#1f77b4",
    "restorelens-gate": "#ff7f0e",
    "restorelens-sim": "#2ca02c",
    "vllm": "#9467bd",
}

#: HTTP answers a trace explorer highlights: unavailable (a sleeping model) and too many requests.
STATUS: Mapping[int, str] = {503: BAD, 429: "#ff7f0e"}

#: Colours for values none of the maps above knows, picked by the value's hash.
EXTRA = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354", "#756bb1",
         "#636363", "#6baed6", "#fd8d3c")


def colour(value: object, known: Mapping[str, str] | None = None) -> str:
    """``value``'s colour in ``known``, else a stable one from ``EXTRA`` (the same on every page)."""
    text = str(value)
    if known is not None and text in known:
        return known[text]
    return EXTRA[zlib.crc32(text.encode()) % len(EXTRA)]


def colours(values: Iterable[object], known: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each distinct value's colour (``colour``), keyed by the value as text."""
    return {str(value): colour(value, known) for value in dict.fromkeys(values)}
