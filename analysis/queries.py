"""The SQL files in ``analysis/sql/`` as queries: each with its leading comment and parameters.

Which files there are and how they are layered is the catalog's (``layers.py``): ``VIEW_LAYERS``
have no parameters and are registered, in that order, as temporary views (or tables) named after
their file, so each layer reads the ones before it by name; ``PARAMETERISED`` queries take named
``$parameters`` and run on demand.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from restorelens.analysis.layers import sql_text

__all__ = ["Query", "load_query"]

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
    sql = sql_text(name)
    doc_lines = []
    for line in sql.splitlines():
        if not line.startswith("--"):
            break
        doc_lines.append(line[2:].strip())
    parameters = tuple(dict.fromkeys(_PARAMETER.findall(sql)))
    return Query(name=name, sql=sql, doc="\n".join(doc_lines), parameters=parameters)
