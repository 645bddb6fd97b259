"""The analysis tests name spans, attributes and events only through ``restorelens.spans``, so
renaming one in the contract breaks these tests, not only production."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from restorelens import spans

HERE = Path(__file__).resolve().parent
CONTRACT = {*spans.span_names().values(), *spans.attribute_keys().values(), *spans.event_names().values()}


@pytest.mark.parametrize("path", sorted(HERE.glob("*.py")), ids=lambda path: path.name)
def test_no_contract_name_is_a_string_literal(path: Path) -> None:
    literals = [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in CONTRACT]
    assert literals == [], f"{path.name}: use the restorelens.spans constants"
