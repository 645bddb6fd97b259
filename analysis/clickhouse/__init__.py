"""restorelens.analysis.clickhouse: the analysis read from ClickHouse or chDB.

``dialect`` transpiles the layers (written once, for DuckDB) into ClickHouse's SQL; ``macros``
inlines the shared ``rl_*`` macros; ``clients`` sends queries to chDB or a server; ``frames``
types the answers as DuckDB would; ``analysis`` holds ``ClickHouseAnalysis``, the ``Analysis``
whose every query is the layers it needs over ``otel_traces``.

Names are imported lazily (PEP 562): sqlglot, polars and the drivers load on first use.
"""

from __future__ import annotations

from restorelens.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "BASE_COLUMNS": "dialect",
    "ClickHouseAnalysis": "analysis",
    "KEPT_LAYERS": "analysis",
    "PARAMETER_TYPES": "dialect",
    "SETTINGS": "dialect",
    "chdb_parameters": "dialect",
    "connect": "clients",
    "layer_sql": "dialect",
    "macro_definitions": "dialect",
    "query_sql": "dialect",
    "to_clickhouse": "dialect",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
