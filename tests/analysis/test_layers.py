"""The layer catalog agrees with the SQL files, and its macros are defined once and usable everywhere."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from restorelens.analysis import layers
from restorelens.analysis.layers import (
    DERIVED_LAYERS,
    DRIVING_SPANS,
    MACROS,
    PARAMETERISED,
    SPAN_LAYERS,
    TRACE_LAYERS,
    VIEW_LAYERS,
    macros_of,
    register_macros,
    sql_text,
)

#: What only the macros named may spell out: the id-key conversion and the Retry-After parse.
SHARED_EXPRESSIONS = {
    "'0x' ||": ("rl_trace_key", "rl_span_key"),
    "json_extract_string(": ("rl_retry_after_raw",),
    "try_strptime(": ("rl_retry_after_s",),
}


def test_the_stored_typed_layers_are_exactly_the_typed_layers() -> None:
    assert set(SPAN_LAYERS) == {name for name in VIEW_LAYERS if name.startswith("typed_")}


@pytest.mark.parametrize("name", SPAN_LAYERS)
def test_a_typed_layer_reads_the_spans_it_is_said_to(name: str) -> None:
    assert re.findall(r"\"SpanName\" = '([^']+)'", sql_text(name)) == [SPAN_LAYERS[name]]


def test_each_trace_layer_lists_exactly_the_layers_its_sql_reads() -> None:
    for name, inputs in TRACE_LAYERS.items():
        read = {layer for layer in VIEW_LAYERS if re.search(rf"\bfrom {layer}\b", sql_text(name))}
        assert read == set(inputs), name
        assert all(DERIVED_LAYERS.index(source) < DERIVED_LAYERS.index(name) for source in inputs), name


def test_every_driving_span_belongs_to_a_layer() -> None:
    assert set(DRIVING_SPANS) <= set(VIEW_LAYERS)


@pytest.mark.parametrize("name", MACROS)
def test_a_macro_file_defines_its_own_macro_as_one_temporary_statement(name: str) -> None:
    code = "\n".join(line for line in sql_text(name).splitlines() if not line.lstrip().startswith("--"))
    assert re.findall(r"create or replace (temp )?macro (\w+)\(", code) == [("temp ", name)]
    assert ";" not in code  # register_macros joins the files into one script


@pytest.mark.parametrize("name", [*VIEW_LAYERS, *PARAMETERISED, *MACROS])
def test_only_its_macro_spells_out_a_shared_expression(name: str) -> None:
    for expression, macros in SHARED_EXPRESSIONS.items():
        if name not in macros:
            assert expression not in sql_text(name), f"{name}.sql copies {' or '.join(macros)}: call it instead"


def test_a_layer_lists_the_macros_it_calls() -> None:
    assert macros_of("typed_http_attempts") == MACROS
    assert macros_of("typed_model_wakes") == ("rl_trace_key", "rl_span_key")
    assert macros_of("typed_model_states") == ("rl_trace_key", "rl_span_key")
    assert macros_of("gate_requests") == ()  # it reads the typed layers, not spans


def test_a_macro_that_another_macro_calls_counts_for_the_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    texts = {
        "layer": "select rl_retry_after_s(a, b, c) from t",
        "rl_retry_after_s": "create or replace temp macro rl_retry_after_s(a, b, c) as rl_span_key(a)",
        "rl_span_key": "create or replace temp macro rl_span_key(span_id) as span_id",
    }
    monkeypatch.setattr(layers, "sql_text", texts.__getitem__)
    layers.macros_of.cache_clear()
    try:
        assert layers.macros_of("layer") == ("rl_span_key", "rl_retry_after_s")
    finally:
        layers.macros_of.cache_clear()  # computed from the real files again


def test_macros_register_on_a_read_only_store_and_leave_nothing_in_the_file(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    duckdb.connect(str(db)).close()
    with duckdb.connect(str(db), read_only=True) as con:
        register_macros(con)
        register_macros(con)  # again, as every Analysis and every derivation does
        keys = con.execute("select rl_trace_key('00000000000000000000000000000100'), rl_span_key(''),"
                           " rl_retry_after_raw('[\"7\", \"9\"]')").fetchall()
        assert keys == [(256, None, "7")]
        found = con.execute("select distinct database_name from duckdb_functions() where function_name in $names",
                            {"names": list(MACROS)}).fetchall()
        assert found == [("temp",)]
    with duckdb.connect(str(db)) as con:  # a plain DuckDB finds no trace of them in the file
        assert con.execute("select count(*) from duckdb_functions() where function_name in $names",
                           {"names": list(MACROS)}).fetchall() == [(0,)]


_CTE = re.compile(r"^(\w+) as (?:not materialized )?\(\n(.*?)\n\),?$", re.MULTILINE | re.DOTALL)


def _copied_ctes(texts: dict[str, str], min_lines: int = 5) -> list[list[tuple[str, str]]]:
    """CTEs of at least ``min_lines`` lines (comments and blank lines aside) whose text is in more
    than one file: (file, CTE) for each copy."""
    copies: dict[str, list[tuple[str, str]]] = {}
    for name, text in texts.items():
        for cte, body in _CTE.findall(text):
            lines = [line.strip() for line in body.splitlines() if line.strip() and not line.strip().startswith("--")]
            if len(lines) >= min_lines:
                copies.setdefault(" ".join(lines), []).append((name, cte))
    return [places for places in copies.values() if len(places) > 1]


def test_a_step_two_layers_need_is_a_layer_not_a_copied_cte() -> None:
    assert _copied_ctes({name: sql_text(name) for name in (*VIEW_LAYERS, *PARAMETERISED)}) == []


def test_a_copied_cte_is_found() -> None:
    step = "joined as (\n\n    select\n        a.*,\n        b.x,\n        b.y\n\n    from a\n    left join b on a.k = b.k\n\n),\n"
    texts = {"one": f"with\n\n{step}\nfinal as (\n\n    select 1\n\n)\n", "two": f"with\n\n{step}"}
    assert _copied_ctes(texts) == [[("one", "joined"), ("two", "joined")]]
