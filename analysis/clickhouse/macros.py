"""The shared macros (``rl_*``) on ClickHouse: inlined into each query rather than created on the
server (the analysis creates nothing there but its session's temporary tables)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache

from restorelens.analysis.clickhouse import dialect
from restorelens.analysis.layers import MACROS
from restorelens.errors import InputError

__all__ = ["inline_macros", "layer_text", "macro_bodies"]

_MACRO = re.compile(r"create function if not exists (\w+) as \(([^)]*)\) ->(.*)", re.DOTALL)


@cache
def layer_text(name: str) -> str:
    """A layer's ClickHouse text with its macros inlined, made once per process: transpiling and
    inlining cost more than a small query itself."""
    text = dialect.layer_sql(name)
    return inline_macros(text, macro_bodies()) if any(m in text for m in MACROS) else text


@cache
def macro_bodies() -> dict[str, tuple[tuple[str, ...], str]]:
    """Each macro's parameters and ClickHouse body, from ``sql/clickhouse/<macro>.sql``."""
    bodies = {}
    for definition in dialect.macro_definitions():
        code = "\n".join(line for line in definition.splitlines() if not line.lstrip().startswith("--"))
        match = _MACRO.search(code)
        if match is None:
            raise InputError("analysis/sql/clickhouse", f"not a `create function NAME as (args) -> body`: {code[:60]}")
        name, parameters, body = match.groups()
        bodies[name] = (tuple(p.strip() for p in parameters.split(",")), body.strip())
    return bodies


def inline_macros(sql: str, bodies: Mapping[str, tuple[tuple[str, ...], str]]) -> str:
    """Every call of a macro in ``sql`` replaced by its body with the arguments put in."""
    import sqlglot
    from sqlglot import exp

    parsed = {name: (parameters, sqlglot.parse_one(body, read="clickhouse")) for name, (parameters, body) in bodies.items()}
    tree = sqlglot.parse_one(sql, read="clickhouse")
    for node in reversed(list(tree.walk())):
        if isinstance(node, exp.Anonymous) and str(node.this) in parsed:
            parameters, body = parsed[str(node.this)]
            arguments = dict(zip(parameters, node.expressions, strict=True))
            expanded = body.copy()
            for column in list(expanded.find_all(exp.Column)):
                if not column.table and column.name in arguments:
                    column.replace(exp.Paren(this=arguments[column.name].copy()))
            node.replace(exp.Paren(this=expanded))
    return tree.sql(dialect="clickhouse")
