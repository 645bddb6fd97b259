"""The span contract module and docs/spans.md must say the same thing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from restorelens import spans

DOC = Path(__file__).resolve().parents[2] / "docs" / "spans.md"
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")


def doc_tables(text: str) -> dict[str, dict[str, list[str]]]:
    """Section heading -> first-column name -> the remaining cells of its row."""
    tables: dict[str, dict[str, list[str]]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.lstrip("#").strip().lower()
            continue
        match = ROW.match(line)
        if match:
            cells = [c.strip() for c in match.group(2).split("|")]
            tables.setdefault(section, {})[match.group(1)] = cells
    return tables


@pytest.fixture(scope="module")
def tables() -> dict[str, dict[str, list[str]]]:
    return doc_tables(DOC.read_text(encoding="utf-8"))


def test_every_span_name_is_documented_and_nothing_else(tables: dict[str, dict[str, list[str]]]) -> None:
    assert set(tables["spans"]) == set(spans.span_names().values())


def test_every_attribute_key_is_documented_and_nothing_else(tables: dict[str, dict[str, list[str]]]) -> None:
    assert set(tables["attributes"]) == set(spans.attribute_keys().values())


def test_every_event_name_is_documented_and_nothing_else(tables: dict[str, dict[str, list[str]]]) -> None:
    assert set(tables["events"]) == set(spans.event_names().values())


def test_documented_attribute_types_match_the_module(tables: dict[str, dict[str, list[str]]]) -> None:
    documented = {key: cells[0] for key, cells in tables["attributes"].items()}
    assert documented == spans.ATTRIBUTE_TYPES


def test_closed_value_sets_match(tables: dict[str, dict[str, list[str]]]) -> None:
    documented = {
        key: tuple(re.findall(r"`([^`]+)`", cells[0])) for key, cells in tables["closed value sets"].items()
    }
    assert documented == spans.ATTRIBUTE_VALUES


def test_span_kinds_are_otel_kinds(tables: dict[str, dict[str, list[str]]]) -> None:
    for name, cells in tables["spans"].items():
        assert cells[0] in {"INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"}, name


def test_every_row_says_who_emits_it_and_what_it_means(tables: dict[str, dict[str, list[str]]]) -> None:
    # Column that says who emits it (spans, attributes) or where it occurs (events).
    who = {"spans": 1, "attributes": 3, "events": 0}
    for section, column in who.items():
        for name, cells in tables[section].items():
            assert cells[-1], f"{section}: {name} has no meaning"
            assert cells[column], f"{section}: {name} does not say who emits it or where"


def test_vllm_attribute_list_is_vllms() -> None:
    # vLLM's vllm/tracing: the attributes V1 do_tracing sets on llm_request.
    assert set(spans.VLLM_LLM_REQUEST_ATTRIBUTES) == {
        "gen_ai.latency.time_to_first_token",
        "gen_ai.latency.e2e",
        "gen_ai.latency.time_in_queue",
        "gen_ai.usage.prompt_tokens",
        "gen_ai.usage.completion_tokens",
        "gen_ai.latency.time_in_model_prefill",
        "gen_ai.latency.time_in_model_decode",
        "gen_ai.latency.time_in_model_inference",
        "gen_ai.request.id",
        "gen_ai.response.finish_reasons",
    }


def test_doc_parser_catches_an_undocumented_constant() -> None:
    # The checks above compare sets; prove a constant missing from the page would show up.
    text = DOC.read_text(encoding="utf-8").replace("| `gate.wait_s` |", "| `gate.wait_seconds` |")
    documented = set(doc_tables(text)["attributes"])
    assert spans.ATTR_GATE_WAIT_S not in documented
    assert documented != set(spans.attribute_keys().values())
