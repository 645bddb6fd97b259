"""The dashboard's data layer on the realistic store: events, occupancy, limits, overview."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from dashboard_stores import MOFLUX_RUNS, WAKES

from restorelens.analysis import Analysis
from restorelens.dashboard import data
from restorelens.errors import SettingError


@pytest.fixture(scope="module")
def analysis(store_path: Path) -> Analysis:
    opened = Analysis.open(store_path)
    yield opened
    opened.close()


def test_overview_counts_every_episode_and_request(analysis: Analysis) -> None:
    result = data.overview(analysis, include_requests=True)
    counts = {row["what"]: row["count"] for row in result.counts.iter_rows(named=True)}
    assert counts["wake episodes"] == len(WAKES)
    assert counts["lending episodes"] == analysis.lending_episodes().height > 0
    assert counts["requests"] == analysis.requests().height
    assert set(result.lending_stats["metric"]) == set(data.LENDING_METRICS)
    assert set(result.wake_stats["wake_path"]) == {path for _, path, *_ in WAKES}
    assert set(result.request_stats["traffic_class"]) == {"interactive", "batch"}


def test_overview_reads_requests_only_when_asked_or_limited(analysis: Analysis) -> None:
    assert "requests" not in set(data.overview(analysis).counts["what"])
    limited = data.overview(analysis, ["requests.ttft_s.max=0.001"])
    assert "requests" in set(limited.counts["what"])
    assert set(limited.breaches["view"]) == {"requests"} and limited.breaches.height > 0


def test_limits_list_the_violation_and_every_breaching_episode(analysis: Analysis) -> None:
    # overshoots are 6.0625, 7.75 and 0.5 s: a 1 s limit is broken by two episodes
    result = data.overview(analysis, ["wake.overshoot_s.p95=1"])
    assert len(result.violations) == 1 and result.violations[0].startswith("wake.overshoot_s.p95 =")
    assert sorted(result.breaches["value"].to_list()) == [6.0625, 7.75]
    assert set(result.breaches["view"]) == {"wake"}


def test_a_bad_limit_names_itself(analysis: Analysis) -> None:
    with pytest.raises(SettingError, match="nonsense"):
        data.overview(analysis, ["nonsense.p95=1"])


def test_lending_events_are_offsets_from_demand_return(analysis: Analysis) -> None:
    episode = analysis.lending_episodes().row(0, named=True)
    events = data.lending_events(episode)
    offsets = dict(events.select("event", "offset_s").rows())
    assert set(offsets) == set(data.LENDING_EVENTS)
    assert offsets["demand returned"] == 0.0
    assert offsets["borrowed drained"] == pytest.approx(episode["drain_s"])
    assert offsets["engine scheduled"] == pytest.approx(episode["grant_restore_s"] + episode["engine_schedule_s"])
    assert offsets["first token"] == pytest.approx(episode["ttft_s"])


def test_occupancy_steps_count_slots_held_between_grant_and_end() -> None:
    t0 = 1_000_000_000_000
    gates = pl.DataFrame({
        "grant_ns": [t0 - 2_000_000_000, t0 - 1_000_000_000, t0 + 500_000_000, None],
        "end_ns": [t0 + 1_000_000_000, t0 + 3_000_000_000, t0 + 2_000_000_000, t0],
        "slot": ["borrowed", "own", "own", None],
    })
    steps = data.occupancy_steps(gates, t0, -1.5, 4.0)
    assert steps.rows() == [(-1.5, 0, 1), (-1.0, 1, 1), (0.5, 2, 1), (1.0, 2, 0), (2.0, 1, 0), (3.0, 0, 0),
                            (4.0, 0, 0)]


def test_lending_detail_uses_the_episodes_own_run(analysis: Analysis) -> None:
    episode = analysis.lending_episodes().row(0, named=True)
    detail = data.lending_detail(episode, analysis.view("gate_requests"))
    assert detail.occupancy["offset_s"][0] == -5.0
    assert detail.occupancy["borrowed"].max() >= 1  # the episode starts with capacity lent


def test_wake_events_show_every_retry_with_its_status(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    cold = wakes.filter(pl.col("wake_path") == "cold-start").row(0, named=True)
    typed = analysis.view("typed_model_wakes").filter(pl.col("span_id") == cold["span_id"]).row(0, named=True)
    attempts = analysis.attempts().filter(pl.col("trace_id") == cold["request_trace_id"])
    detail = data.wake_detail(cold, typed, attempts)
    offsets = dict(detail.events.select("event", "offset_s").rows())
    assert offsets["first 503"] == 0.0
    assert offsets["Retry-After elapses"] == 10.0
    assert offsets["wake start"] == 0.0625
    assert offsets["engine ready"] == 31.25
    assert offsets["readiness observed"] == 31.5
    assert offsets["retry 1 → 503"] == 10.25
    assert offsets["retry 2 → 503"] == 20.5
    assert offsets["success 200"] == 31.75
    assert offsets["first token"] == cold["total_s"]
    assert detail.overshoot == (31.25, 31.75)


# --- the engine ---------------------------------------------------------------------------------


def test_a_limit_on_the_engine_view_lists_the_engine_requests_over_it(analysis: Analysis) -> None:
    requests = analysis.engine_requests()
    result = data.overview(analysis, ["engine.ttft_s.p50=0.001"])
    assert [v.split(" ")[0] for v in result.violations] == ["engine.ttft_s.p50"]
    over = requests.filter(pl.col("ttft_s") > 0.001)
    assert result.breaches.height == over.height > 0
    assert set(result.breaches["view"]) == {"engine"}
    assert set(result.breaches["id"]) == set(over["trace_id"])  # what the trace explorer opens


def test_a_null_policy_reads_no_gate_and_nothing_else_changes() -> None:
    frame = pl.DataFrame({"policy": ["lend", None], "baseline": [None, "static"], "model": [None, "tiny"]})
    shown = data.with_no_gate(frame)
    assert shown["policy"].to_list() == ["lend", data.NO_GATE]
    assert shown["baseline"].to_list() == [data.NO_GATE, "static"]
    assert shown["model"].to_list() == [None, "tiny"]
    assert data.NO_GATE == "no gate"


def test_the_engine_summary_is_the_reports_engine_section(analysis: Analysis) -> None:
    from restorelens.analysis.report import build_report

    summary = data.engine_summary(analysis.engine_requests())
    report = build_report(analysis)["engine"]
    assert summary.statistics.equals(report)
    assert summary.requests == analysis.engine_requests().height
    assert summary.points == {"upper": summary.requests, "lower": 0}  # the simulator's bounds coincide


def test_the_engine_summary_keeps_the_chosen_policies_and_can_split_by_them(analysis: Analysis) -> None:
    requests = analysis.engine_requests()
    only = data.engine_summary(requests, ["static"], by_policy=True)
    assert only.requests == requests.filter(pl.col("policy") == "static").height
    assert set(only.statistics["policy"]) == {"static"}
    assert all(group.endswith(" · static") for group in only.curves["group"])


def test_a_distribution_curve_has_every_value_or_a_bounded_number_by_rank() -> None:
    few = pl.DataFrame({"engine": ["e"] * 4, "traffic_class": ["c"] * 4, "queue_s": [0.5, None, 0.25, 1.0]})
    curve = data.distribution_curves(few, metrics=["queue_s"])
    assert curve["seconds"].to_list() == [0.25, 0.5, 1.0]
    assert curve["fraction"].to_list() == [1 / 3, 2 / 3, 1.0]
    assert set(curve["group"]) == {"e · c"} and set(curve["count"]) == {3}
    many = pl.DataFrame({"engine": ["e"] * 10_001, "traffic_class": ["c"] * 10_001,
                         "queue_s": [float(i) for i in reversed(range(10_001))]})
    curve = data.distribution_curves(many, metrics=["queue_s"], max_points=101)
    assert curve.height == 101
    assert curve.row(0) == ("e · c", "queue_s", 0.0, 1 / 10_001, 10_001)
    assert curve.row(-1) == ("e · c", "queue_s", 10_000.0, 1.0, 10_001)
    assert curve["seconds"].to_list() == [100.0 * k for k in range(101)]  # evenly by rank


def _scrapes(rows: list[tuple[float, str, str, str, float]], t0_ns: int) -> pl.DataFrame:
    """engine_pressure rows: (seconds from t0, target, model, engine index, running)."""
    return pl.DataFrame(
        [(t0_ns + round(at * 1e9), target, model, index, running, 0.0, 0.5, 0.0)
         for at, target, model, index, running in rows],
        schema={"at_ns": pl.Int64, "target": pl.String, "model_name": pl.String, "engine_index": pl.String,
                "running": pl.Float64, "waiting": pl.Float64, "kv_cache_usage_fraction": pl.Float64,
                "preemptions_total": pl.Float64},
        orient="row",
    )


def test_episode_pressure_keeps_the_scrapes_of_its_models_engines_in_its_window() -> None:
    t0_ns = 1_000_000_000_000
    pressure = _scrapes([(-6.0, "a", "tiny", "0", 9), (-1.0, "a", "tiny", "0", 1), (2.5, "a", "tiny", "0", 2),
                         (2.5, "a", "tiny", "1", 3), (3.0, "b", "tiny", "0", 4), (1.0, "c", "qwen", "0", 5),
                         (20.0, "a", "tiny", "0", 9)], t0_ns)
    window = data.episode_pressure(pressure, "tiny", t0_ns, -5.0, 10.0)
    assert window.scraped and window.models == ("qwen", "tiny")
    # target a reports two engines (vLLM's data-parallel engine index): each is its own line
    assert window.samples.rows() == [(-1.0, "a · engine 0", 1.0, 0.0, 0.5), (2.5, "a · engine 0", 2.0, 0.0, 0.5),
                                     (2.5, "a · engine 1", 3.0, 0.0, 0.5), (3.0, "b", 4.0, 0.0, 0.5)]
    other = data.episode_pressure(pressure, "small", t0_ns, -5.0, 10.0)
    assert other.scraped and other.samples.is_empty()
    none = data.episode_pressure(pressure.clear(), "tiny", t0_ns, -5.0, 10.0)
    assert not none.scraped and none.samples.is_empty()


def test_the_episode_window_runs_from_before_t0_to_after_the_last_event(analysis: Analysis) -> None:
    episode = analysis.lending_episodes().row(0, named=True)
    events = data.lending_events(episode)
    assert data.episode_window(events) == (-5.0, float(events["offset_s"].max()) + 5.0)


def test_a_lending_episodes_null_policy_is_a_gate_that_named_none_not_no_gate() -> None:
    episodes = pl.DataFrame({"policy": ["lend", None]}, schema={"policy": pl.String})
    assert data.with_unnamed_policy(episodes)["policy"].to_list() == ["lend", data.UNNAMED_POLICY]
    assert data.UNNAMED_POLICY != data.NO_GATE


def test_the_policy_pages_frames_name_the_no_gate_arm_and_a_missing_workload() -> None:
    frame = pl.DataFrame({"policy": [None, "lend"], "workload": [None, "balanced"], "seed": [None, 1]},
                         schema={"policy": pl.String, "workload": pl.String, "seed": pl.Int64})
    shown = data.with_arm_labels(frame)
    assert shown.rows() == [(data.NO_GATE, data.NO_WORKLOAD, None), ("lend", "balanced", 1)]
    assert data.NO_WORKLOAD == "no workload"


def test_the_overviews_requests_without_a_class_read_no_class(tmp_path: Path) -> None:
    from builders import Traces

    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 10.0, 12.0, first_chunk_s=10.5, traffic_class=None)
    traces.engine(trace, traces.attempt(trace, client, 10.0, 12.0, status=200), 10.0625, time_in_queue_s=0.125,
                  ttft_s=0.375, e2e_s=1.5)
    with Analysis(traces.store()) as analysis:
        result = data.overview(analysis, include_requests=True)
    assert set(result.request_stats.select("traffic_class", "policy").rows()) == {(data.NO_CLASS, data.NO_GATE)}


def test_time_segments_keep_the_longest_episodes_longest_first(analysis: Analysis) -> None:
    wakes = analysis.wake_episodes()
    every = data.time_segments(wakes, "wake")
    assert every["episode"].n_unique() == wakes.height
    totals = every.group_by("episode").agg(pl.col("total_s").first()).sort("total_s", descending=True)
    two = data.time_segments(wakes, "wake", limit=2)
    assert list(dict.fromkeys(two["episode"].to_list())) == totals["episode"].head(2).to_list()
    assert two.equals(every.filter(pl.col("episode").is_in(totals["episode"].head(2).to_list())))
