"""The SQL files in ``analysis/sql/``: one query per file, loaded with its leading comment.

Queries are layered. ``VIEW_LAYERS`` have no parameters and are registered, in this order, as
temporary views (or tables) named after their file, so each layer reads the ones before it by
name. ``PARAMETERISED`` queries take named ``$parameters`` and run on demand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from restorelens.collector.derived import SPAN_LAYERS
from restorelens.spans import (
    SPAN_CLIENT_REQUEST,
    SPAN_GATE_REQUEST,
    SPAN_GATE_RESTORE,
    SPAN_MODELCLAIM_STATE,
    SPAN_MODELCLAIM_WAKE,
)

__all__ = [
    "DRIVING_SPANS",
    "PARAMETERISED",
    "PUBLIC_VIEWS",
    "SHARED_LAYERS",
    "VIEW_LAYERS",
    "Query",
    "load_query",
]

#: Parameter-free layers in dependency order (each reads only earlier ones and ``otel_traces``).
VIEW_LAYERS = (
    "typed_client_requests",
    "typed_http_attempts",
    "typed_gate_requests",
    "typed_engine_requests",
    "typed_gate_restores",
    "typed_model_wakes",
    "typed_model_states",
    "gate_requests",
    "request_attempts",
    "attempts",
    "requests",
    "lending_episodes",
    "wake_episodes",
    "lifecycle_intervals",
)

#: Layers read by more than one later layer: the ones worth computing once (``materialize=True``).
SHARED_LAYERS = ("typed_client_requests", "typed_http_attempts", "typed_engine_requests", "gate_requests",
                 "request_attempts", "requests")

#: Layer -> the span name each of its rows comes from: a store without such spans gives an empty
#: layer, so it can be answered without computing the layers under it (e.g. no wake spans, no
#: wake episodes, whatever the requests cost). Exact: every row of the layer is one span of that
#: name (or, for ``request_attempts`` / ``attempts`` / ``requests``, joined under one).
DRIVING_SPANS = {
    **SPAN_LAYERS,  # the typed layers, one row per span of their kind (kept by the store)
    "gate_requests": SPAN_GATE_REQUEST,
    "request_attempts": SPAN_CLIENT_REQUEST,
    "attempts": SPAN_CLIENT_REQUEST,
    "requests": SPAN_CLIENT_REQUEST,
    "lending_episodes": SPAN_GATE_RESTORE,
    "wake_episodes": SPAN_MODELCLAIM_WAKE,
    "lifecycle_intervals": SPAN_MODELCLAIM_STATE,
}

#: Layers meant for users (the rest are internal building blocks).
PUBLIC_VIEWS = ("requests", "attempts", "lending_episodes", "wake_episodes", "lifecycle_intervals")

#: Queries with ``$name`` parameters, run when asked for.
PARAMETERISED = ("policy_summary", "paired_differences", "trace_spans", "traces_for_request")

# `$name` but not JSON paths such as '$[0]'.
_PARAMETER = re.compile(r"\$([a-z_][a-z0-9_]*)")


@dataclass(frozen=True)
class Query:
    """One ``.sql`` file: its name (the file stem), text, leading comment and parameter names."""

    name: str
    sql: str
    doc: str
    parameters: tuple[str, ...]


@cache
def load_query(name: str) -> Query:
    """Load ``analysis/sql/<name>.sql``. Raises ``FileNotFoundError`` for an unknown name."""
    sql = resources.files(__package__).joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")
    doc_lines = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        doc_lines.append(line[2:].strip())
    parameters = tuple(dict.fromkeys(_PARAMETER.findall(sql)))
    return Query(name=name, sql=sql, doc="\n".join(doc_lines), parameters=parameters)

