"""Limits: parsing, resolving metric names, and checking them through the API."""

from __future__ import annotations

import pytest
from builders import Traces

from restorelens.analysis import Analysis, Limit, check, evaluate, parse_limit, valid_names
from restorelens.errors import SettingError


def test_parse_resolves_unique_names_and_qualified_ones() -> None:
    assert parse_limit("overshoot_s.p95=1.5") == Limit("wake", "overshoot_s", "p95", 1.5)
    assert parse_limit("lending.engine_schedule_s.max=4") == Limit("lending", "engine_schedule_s", "max", 4.0)
    assert parse_limit("wake.censored.count=0") == Limit("wake", "censored", "count", 0.0)
    assert "wake.overshoot_s.p95" in valid_names() and "lending.censored.count" in valid_names()


@pytest.mark.parametrize(("text", "message"), [
    ("ttft_s.p95=1", "in several views"),
    ("censored.count=0", "in several views"),
    ("wake.censored.p95=0", "not one of count"),
    ("drain_s.count=0", "not one of p50"),
    ("drain_s.p95=x", "is not a number"),
    ("drain_s.p95=nan", "not a finite number"),
    ("drain_s.p95=inf", "not a finite number"),
])
def test_parse_errors_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(SettingError, match=message):
        parse_limit(text)


def test_check_counts_flags_and_compares_statistics() -> None:
    traces = Traces()
    for end in (None, None, 3.0):
        traces.gate_restore(0.0, 5.0, link=None, borrowed_at_return=1, grant_restored_s=1.0, drained_s=end)
    analysis = Analysis(traces.store())

    violations = check(analysis, {"lending.censored.count": 1, "drain_s.max": 3, "grant_restore_s.p50": 0.5})

    assert [(v.limit.name, v.value, v.count) for v in violations] == [
        ("lending.censored.count", 2.0, 3),
        ("lending.grant_restore_s.p50", 1.0, 3),
    ]
    [drain] = [e for e in evaluate(analysis, {"drain_s.max": 3}) if e.limit.column == "drain_s"]
    assert (drain.value, drain.count, drain.violated) == (3.0, 1, False)


def test_evaluate_marks_limits_with_nothing_to_check() -> None:
    traces = Traces()
    traces.gate_restore(0.0, 5.0, link=None, borrowed_at_return=1, grant_restored_s=None, drained_s=None)
    analysis = Analysis(traces.store())

    grant, censored, overshoot = evaluate(analysis, {"grant_restore_s.max": 1, "lending.censored.count": 1,
                                                     "wake.overshoot_s.max": 1})

    assert (grant.value, grant.count, grant.rows, grant.unchecked) == (None, 0, 1, True)
    assert grant.describe_unchecked() == "no values in 1 lending episode"
    assert (censored.value, censored.count, censored.unchecked) == (1.0, 1, False)
    assert (overshoot.rows, overshoot.unchecked) == (0, True)
    assert overshoot.describe_unchecked() == "no values in 0 wake episodes"
    assert check(analysis, {"grant_restore_s.max": 1, "wake.overshoot_s.max": 1}) == []
