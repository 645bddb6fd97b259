"""The SQL files follow the house style and use only names from the span contract, cast by type."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from restorelens import spans
from restorelens.analysis import PARAMETERISED, VIEW_LAYERS, load_query
from restorelens.analysis.layers import MACROS

SQL_FILES = sorted(p.name[:-4] for p in resources.files("restorelens.analysis").joinpath("sql").iterdir()
                   if p.name.endswith(".sql"))
QUERY_FILES = [*VIEW_LAYERS, *PARAMETERISED]
CAST = {spans.INT: "bigint", spans.DOUBLE: "double", spans.BOOL: "boolean"}


def test_every_file_is_registered_exactly_once() -> None:
    assert sorted(QUERY_FILES + list(MACROS)) == SQL_FILES


@pytest.mark.parametrize("name", SQL_FILES)
def test_every_file_starts_with_a_comment(name: str) -> None:
    assert load_query(name).doc, f"{name}.sql needs a leading comment"


@pytest.mark.parametrize("name", QUERY_FILES)
def test_file_style(name: str) -> None:
    query = load_query(name)
    assert re.search(r"^final as \($", query.sql, re.M), f"{name}.sql must end its CTEs with `final`"
    assert re.search(r"^select \* from final$", query.sql, re.M)
    assert not re.search(r"\{\w*\}", query.sql), "values are bound as $parameters, never formatted in"


def test_parameters_are_named() -> None:
    policy_summary = ("contention_phase", "slo_ttft_s", "slo_e2e_s", "borrow_phase", "excluded_phases")
    assert load_query("policy_summary").parameters == policy_summary
    assert load_query("trace_spans").parameters == ("trace_id",)
    assert all(not load_query(name).parameters for name in VIEW_LAYERS)


@pytest.mark.parametrize("name", SQL_FILES)
def test_names_come_from_the_span_contract_and_casts_follow_its_types(name: str) -> None:
    sql = load_query(name).sql
    span_names = set(spans.span_names().values())
    for found in re.findall(r'"SpanName" (?:=|in) \(?([^)\n]+)', sql):
        for literal in re.findall(r"'([^']+)'", found):
            assert literal in span_names, f"{name}.sql: span name {literal!r} not in restorelens.spans"
    for literal in re.findall(r"list_position\(\"Events\.Name\", '([^']+)'\)", sql):
        assert literal in spans.event_names().values(), f"{name}.sql: event {literal!r} not in restorelens.spans"
    for key in re.findall(r"\"SpanAttributes\"(?:\['|, ')([^']+)'", sql):
        assert key in spans.ATTRIBUTE_TYPES, f"{name}.sql: attribute {key!r} not in restorelens.spans"
    for key, sql_type in re.findall(r"try_cast\(\"SpanAttributes\"\['([^']+)'\] as (\w+)\)", sql):
        assert CAST.get(spans.ATTRIBUTE_TYPES[key]) == sql_type, f"{name}.sql casts {key} as {sql_type}"
    for key in re.findall(r"(?<!try_cast\()\"SpanAttributes\"\['([^']+)'\](?! as)", sql):
        declared = spans.ATTRIBUTE_TYPES[key]
        assert declared in (spans.STRING, spans.STRING_ARRAY), f"{name}.sql reads {declared} {key} uncast"


_CONVERSION_COMMENT = re.compile(r"--.*(seconds|ns -> s)")


@pytest.mark.parametrize("name", SQL_FILES)
def test_every_unit_conversion_is_commented(name: str) -> None:
    """A `1e9` follows a comment naming the conversion (at most two lines up), or an "all
    durations" comment earlier in the same CTE."""
    lines = load_query(name).sql.splitlines()
    all_durations = False
    for number, line in enumerate(lines):
        code = line.split("--")[0]
        if line.startswith(")"):
            all_durations = False
        if re.search(r"--.*all durations", line):
            all_durations = True
        if "1e9" in code and not all_durations:
            above = lines[max(0, number - 2):number]
            assert any(_CONVERSION_COMMENT.search(text) for text in above), f"{name}.sql:{number + 1}: {line.strip()}"
