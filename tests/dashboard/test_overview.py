"""The overview's numbers on the realistic store: counts, statistics, limits and their breaches."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from dashboard_stores import WAKES

from restorelens.analysis import Analysis
from restorelens.analysis.report import NO_GATE
from restorelens.dashboard.labels import NO_CLASS
from restorelens.dashboard.overview import LENDING_METRICS, overview
from restorelens.errors import SettingError


def test_overview_counts_every_episode_and_request(analysis: Analysis) -> None:
    result = overview(analysis, include_requests=True)
    counts = {row["what"]: row["count"] for row in result.counts.iter_rows(named=True)}
    assert counts["wake episodes"] == len(WAKES)
    assert counts["lending episodes"] == analysis.lending_episodes().height > 0
    assert counts["requests"] == analysis.requests().height
    assert set(result.lending_stats["metric"]) == set(LENDING_METRICS)
    assert set(result.wake_stats["wake_path"]) == {path for _, path, *_ in WAKES}
    assert set(result.request_stats["traffic_class"]) == {"interactive", "batch"}


def test_overview_reads_requests_only_when_asked_or_limited(analysis: Analysis) -> None:
    assert "requests" not in set(overview(analysis).counts["what"])
    limited = overview(analysis, ["requests.ttft_s.max=0.001"])
    assert "requests" in set(limited.counts["what"])
    assert set(limited.breaches["view"]) == {"requests"} and limited.breaches.height > 0


def test_limits_list_the_violation_and_every_breaching_episode(analysis: Analysis) -> None:
    # overshoots are 6.0625, 7.75 and 0.5 s: a 1 s limit is broken by two episodes
    result = overview(analysis, ["wake.overshoot_s.p95=1"])
    assert len(result.violations) == 1 and result.violations[0].startswith("wake.overshoot_s.p95 =")
    assert sorted(result.breaches["value"].to_list()) == [6.0625, 7.75]
    assert set(result.breaches["view"]) == {"wake"}


def test_a_bad_limit_names_itself(analysis: Analysis) -> None:
    with pytest.raises(SettingError, match="nonsense"):
        overview(analysis, ["nonsense.p95=1"])


def test_a_limit_on_the_engine_view_lists_the_engine_requests_over_it(analysis: Analysis) -> None:
    requests = analysis.engine_requests()
    result = overview(analysis, ["engine.ttft_s.p50=0.001"])
    assert [v.split(" ")[0] for v in result.violations] == ["engine.ttft_s.p50"]
    over = requests.filter(pl.col("ttft_s") > 0.001)
    assert result.breaches.height == over.height > 0
    assert set(result.breaches["view"]) == {"engine"}
    assert set(result.breaches["id"]) == set(over["trace_id"])  # what the trace explorer opens


def test_the_overviews_requests_without_a_class_read_no_class(tmp_path: Path) -> None:
    from builders import Traces

    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 10.0, 12.0, first_chunk_s=10.5, traffic_class=None)
    traces.engine(trace, traces.attempt(trace, client, 10.0, 12.0, status=200), 10.0625, time_in_queue_s=0.125,
                  ttft_s=0.375, e2e_s=1.5)
    with Analysis(traces.store()) as analysis:
        result = overview(analysis, include_requests=True)
    assert set(result.request_stats.select("traffic_class", "policy").rows()) == {(NO_CLASS, NO_GATE)}
