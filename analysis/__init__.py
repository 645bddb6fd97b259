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
    "Analysis": "views",
    "DRIVING_SPANS": "layers",
    "Evaluation": "limits",
    "FRONTIER_AXES": "study",
    "GATES": "study",
    "GROUP_ALIASES": "views",
    "Gate": "study",
    "LABELS": "views",
    "Limit": "limits",
    "PARAMETERISED": "layers",
    "PERCENTILE_METHODS": "views",
    "PHASE_VIEW": "limits",
    "PUBLIC_VIEWS": "layers",
    "Query": "queries",
    "RUN_COLUMNS": "study",
    "SHARED_LAYERS": "layers",
    "STATISTICS": "views",
    "STUDY_ARMS": "study",
    "Slo": "views",
    "StudyTable": "study",
    "VIEW_LAYERS": "layers",
    "Violation": "limits",
    "Window": "window",
    "build_report": "report",
    "check": "limits",
    "checked_labels": "views",
    "checked_seconds": "views",
    "checked_window": "window",
    "empty_note": "sources",
    "evaluate": "limits",
    "fresh_layers": "derived",
    "label_mapping": "settings",
    "load_query": "queries",
    "nearest_rank": "views",
    "note_if_empty": "cli",
    "open_analysis": "sources",
    "parse_label": "settings",
    "parse_limit": "limits",
    "parse_window": "window",
    "percentiles_of": "views",
    "render": "report",
    "resolve_source": "cli",
    "score": "study",
    "source_options": "cli",
    "score_frames": "study",
    "store_errors": "cli",
    "table_cell": "study",
    "valid_names": "limits",
    "window_filter": "window",
    "window_options": "cli",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
