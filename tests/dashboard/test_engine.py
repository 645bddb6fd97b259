"""The engine page's numbers: the report's engine section, the chosen policies, distribution curves."""

from __future__ import annotations

import polars as pl

from restorelens.analysis import Analysis
from restorelens.dashboard.engine import distribution_curves, engine_summary


def test_the_engine_summary_is_the_reports_engine_section(analysis: Analysis) -> None:
    from restorelens.analysis.report import build_report

    summary = engine_summary(analysis.engine_requests())
    report = build_report(analysis)["engine"]
    assert summary.statistics.equals(report)
    assert summary.requests == analysis.engine_requests().height
    assert summary.points == {"upper": summary.requests, "lower": 0}  # the simulator's bounds coincide


def test_the_engine_summary_keeps_the_chosen_policies_and_can_split_by_them(analysis: Analysis) -> None:
    requests = analysis.engine_requests()
    only = engine_summary(requests, ["static"], by_policy=True)
    assert only.requests == requests.filter(pl.col("policy") == "static").height
    assert set(only.statistics["policy"]) == {"static"}
    assert all(group.endswith(" · static") for group in only.curves["group"])


def test_a_distribution_curve_has_every_value_or_a_bounded_number_by_rank() -> None:
    few = pl.DataFrame({"engine": ["e"] * 4, "traffic_class": ["c"] * 4, "queue_s": [0.5, None, 0.25, 1.0]})
    curve = distribution_curves(few, metrics=["queue_s"])
    assert curve["seconds"].to_list() == [0.25, 0.5, 1.0]
    assert curve["fraction"].to_list() == [1 / 3, 2 / 3, 1.0]
    assert set(curve["group"]) == {"e · c"} and set(curve["count"]) == {3}
    many = pl.DataFrame({"engine": ["e"] * 10_001, "traffic_class": ["c"] * 10_001,
                         "queue_s": [float(i) for i in reversed(range(10_001))]})
    curve = distribution_curves(many, metrics=["queue_s"], max_points=101)
    assert curve.height == 101
    assert curve.row(0) == ("e · c", "queue_s", 0.0, 1 / 10_001, 10_001)
    assert curve.row(-1) == ("e · c", "queue_s", 10_000.0, 1.0, 10_001)
    assert curve["seconds"].to_list() == [100.0 * k for k in range(101)]  # evenly by rank
