"""restorelens.analysis: SQL that decomposes every restoration into its separate events.

``Analysis`` opens a span store and returns each layer as a polars DataFrame; ``check`` compares
the episodes' statistics with limits (``restorelens check``). docs/analysis.md explains each view.
"""

from restorelens.analysis.limits import Evaluation, Limit, Violation, check, evaluate, parse_limit, valid_names
from restorelens.analysis.queries import (
    DRIVING_SPANS,
    PARAMETERISED,
    PUBLIC_VIEWS,
    SHARED_LAYERS,
    VIEW_LAYERS,
    Query,
    load_query,
)
from restorelens.analysis.report import build_report, render
from restorelens.analysis.views import GROUP_ALIASES, STATISTICS, Analysis, Slo, checked_seconds, percentiles_of

__all__ = [
    "Analysis",
    "DRIVING_SPANS",
    "Evaluation",
    "GROUP_ALIASES",
    "Limit",
    "PARAMETERISED",
    "PUBLIC_VIEWS",
    "Query",
    "SHARED_LAYERS",
    "STATISTICS",
    "Slo",
    "VIEW_LAYERS",
    "Violation",
    "build_report",
    "check",
    "checked_seconds",
    "evaluate",
    "load_query",
    "parse_limit",
    "percentiles_of",
    "render",
    "valid_names",
]
