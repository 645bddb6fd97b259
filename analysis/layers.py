"""The layer catalog: which SQL files there are, in what order they run, which spans drive them,
which of them the store keeps, and the macros they share.

``derived.py`` (which writes the kept layers as tables beside the spans, when the collector's
writer asks it to) and ``Analysis`` (which registers the others as views) both read the SQL
through this module. It imports neither polars nor anything that does: the collector's receiver
and loader import it through ``derived``.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources
from typing import Any

from restorelens.spans import (
    SPAN_CLIENT_REQUEST,
    SPAN_GATE_REQUEST,
    SPAN_GATE_RESTORE,
    SPAN_HTTP_POST,
    SPAN_LLM_REQUEST,
    SPAN_MODELCLAIM_STATE,
    SPAN_MODELCLAIM_WAKE,
)

__all__ = [
    "DERIVED_LAYERS",
    "DRIVING_SPANS",
    "MACROS",
    "PARAMETERISED",
    "PUBLIC_VIEWS",
    "SHARED_LAYERS",
    "SPAN_LAYERS",
    "TRACE_LAYERS",
    "VIEW_LAYERS",
    "macros_of",
    "register_macros",
    "sql_text",
]

#: Typed layer (kept by the store as a table of that name) -> the span name each of its rows
#: comes from: a pure function of one span row, one row per span of that name.
SPAN_LAYERS = {
    "typed_client_requests": SPAN_CLIENT_REQUEST,
    "typed_http_attempts": SPAN_HTTP_POST,
    "typed_gate_requests": SPAN_GATE_REQUEST,
    "typed_engine_requests": SPAN_LLM_REQUEST,
    "typed_gate_restores": SPAN_GATE_RESTORE,
    "typed_model_wakes": SPAN_MODELCLAIM_WAKE,
    "typed_model_states": SPAN_MODELCLAIM_STATE,
}

#: Trace layer (kept by the store; joins spans of one trace only) -> the kept layers its SQL reads.
TRACE_LAYERS = {
    "gate_requests": ("typed_gate_requests", "typed_http_attempts", "typed_engine_requests"),
    "request_attempts": ("typed_client_requests", "typed_http_attempts", "typed_engine_requests", "gate_requests"),
}

#: Every layer the store keeps, each after the ones it reads.
DERIVED_LAYERS = (*SPAN_LAYERS, *TRACE_LAYERS)

#: Parameter-free layers in dependency order (each reads only earlier ones and ``otel_traces``).
VIEW_LAYERS = (*DERIVED_LAYERS, "span_labels", "labelled_client_requests", "runs", "engine_pressure", "model_pressure",
               "episode_pressure", "attempts", "requests", "engine_requests", "lending_episodes", "wake_phases",
               "gate_retry_links", "wake_episodes",
               "lifecycle_intervals")

#: Layers read by more than one later layer: the ones worth computing once (``materialize=True``).
#: Not ``labelled_client_requests``: as large as the client requests, and each layer reading it
#: computes only the columns it needs. ``gate_retry_links`` has one reader, ``wake_episodes``, but
#: it reads it once per step of its recursion.
SHARED_LAYERS = ("typed_client_requests", "typed_http_attempts", "typed_engine_requests", "gate_requests",
                 "request_attempts", "span_labels", "requests", "gate_retry_links")

#: Layer -> the span name each of its rows comes from: a store without such spans gives an empty
#: layer, so it can be answered without computing the layers under it (e.g. no wake spans, no
#: wake episodes, whatever the requests cost). Exact: every row of the layer is one span of that
#: name (or, for ``request_attempts`` / ``attempts`` / ``requests``, joined under one).
DRIVING_SPANS = {
    **SPAN_LAYERS,
    "gate_requests": SPAN_GATE_REQUEST,
    "request_attempts": SPAN_CLIENT_REQUEST,
    "labelled_client_requests": SPAN_CLIENT_REQUEST,
    "runs": SPAN_CLIENT_REQUEST,
    "attempts": SPAN_CLIENT_REQUEST,
    "requests": SPAN_CLIENT_REQUEST,
    "engine_requests": SPAN_LLM_REQUEST,
    "lending_episodes": SPAN_GATE_RESTORE,
    "wake_phases": SPAN_MODELCLAIM_WAKE,
    "gate_retry_links": SPAN_GATE_REQUEST,
    "wake_episodes": SPAN_MODELCLAIM_WAKE,
    "lifecycle_intervals": SPAN_MODELCLAIM_STATE,
}

#: Layers meant for users (the rest are internal building blocks).
PUBLIC_VIEWS = ("requests", "attempts", "engine_requests", "lending_episodes", "wake_episodes", "wake_phases",
                "lifecycle_intervals")

#: Queries with ``$name`` parameters, run when asked for.
PARAMETERISED = ("policy_summary", "paired_differences", "trace_spans", "traces_for_request", "linked_from")

#: SQL macros the layers share, each defined in the file of its name and registered on every
#: connection that runs a layer. Temporary on purpose: a read-only connection can create them,
#: and the store file never holds a definition that another restorelens version would then use.
MACROS = ("rl_trace_key", "rl_span_key", "rl_retry_after_raw", "rl_retry_after_s")

_CALL = re.compile(rf"\b({'|'.join(MACROS)})\s*\(")


@cache
def sql_text(name: str) -> str:
    """The text of ``analysis/sql/<name>.sql``. Raises ``FileNotFoundError`` for an unknown name."""
    return resources.files(__package__).joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")


@cache
def macros_of(name: str) -> tuple[str, ...]:
    """The macros the SQL file ``name`` calls, directly or through another macro, in ``MACROS`` order."""
    called = set(_CALL.findall(sql_text(name))) - {name}
    for macro in tuple(called):
        called.update(macros_of(macro))
    return tuple(macro for macro in MACROS if macro in called)


def register_macros(con: Any) -> None:
    """Define every macro on ``con`` (a DuckDB connection), replacing any earlier definition.

    A macro created inside a transaction that then rolls back is gone again, so the collector
    calls this at the start of every derivation rather than once per connection.
    """
    con.execute(";\n".join(sql_text(macro) for macro in MACROS))
