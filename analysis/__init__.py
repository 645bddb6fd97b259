"""restorelens.analysis: SQL that decomposes every restoration into its separate events.

``Analysis`` opens a span store and returns each layer as a polars DataFrame; ``check`` compares
the episodes' statistics with limits (``restorelens check``). docs/analysis.md explains each view.

Names are imported lazily (PEP 562) so that the collector, which asks ``derived`` to keep the
derived tables up to date, does not pay for polars; ``from restorelens.analysis import X`` works for every name
in ``__all__``.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "DRIVING_SPANS": "layers",
    "FRONTIER_AXES": "study",
    "GATES": "study",
    "GROUP_ALIASES": "views",
    "LABELS": "views",
    "PARAMETERISED": "layers",
    "PERCENTILE_METHODS": "views",
    "PUBLIC_VIEWS": "layers",
    "RUN_COLUMNS": "study",
    "SHARED_LAYERS": "layers",
    "STATISTICS": "views",
    "STUDY_ARMS": "study",
    "VIEW_LAYERS": "layers",
    "build_report": "report",
    "check": "limits",
    "checked_labels": "views",
    "checked_seconds": "views",
    "checked_window": "window",
    "evaluate": "limits",
    "fresh_layers": "derived",
    "label_mapping": "settings",
    "load_query": "queries",
    "nearest_rank": "views",
    "open_analysis": "sources",
    "parse_label": "settings",
    "parse_limit": "limits",
    "parse_window": "window",
    "percentiles_of": "views",
    "render": "report",
    "score": "study",
    "score_frames": "study",
    "valid_names": "limits",
    "window_filter": "window",
    "Analysis": "views",
    "Evaluation": "limits",
    "Gate": "study",
    "Limit": "limits",
    "Query": "queries",
    "Slo": "views",
    "StudyTable": "study",
    "Violation": "limits",
    "Window": "window",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
