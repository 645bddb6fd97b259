"""The preemption event the gate writes is the one the client reads, and nothing else is."""

from __future__ import annotations

import json

import pytest

from restorelens.protocol import PREEMPTED, RETRY_AFTER_MS_HEADER, parse_preempted_event, preempted_event


def test_the_event_round_trips_as_the_headers_a_503_would_carry() -> None:
    line = preempted_event("taken back", 2_500, "3").decode().rstrip("\n")
    assert line.startswith("data: ") and json.loads(line[6:])["error"]["type"] == PREEMPTED
    assert parse_preempted_event(line) == ((RETRY_AFTER_MS_HEADER, "2500"), ("retry-after-ms", "2500"), ("retry-after", "3"))


@pytest.mark.parametrize("line", [
    'data: {"choices": [{"text": "a"}]}',
    "data: [DONE]",
    'data: {"error": {"message": "engine exploded", "type": "server_error", "code": 500}}',
    'data: {"error": "preempted"}',
    'data: {"error": {"type": "preempted"',  # cut short
    'data: {"error": {"type": "preempted", "pad": "' + "x" * 2_000 + '"}}',  # longer than any real event
    "",
])
def test_other_lines_are_not_a_preemption(line: str) -> None:
    assert parse_preempted_event(line) is None
