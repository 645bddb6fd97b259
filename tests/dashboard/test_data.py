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


def test_time_segments_keep_the_censored_then_the_longest_episodes() -> None:
    from datetime import datetime

    t0 = datetime(2026, 1, 1)
    # four wake episodes: done in 10 s, 30 s and 20 s, and one censored after 5 s (never served)
    episodes = pl.DataFrame({
        "t0": [t0] * 4, "span_id": ["a" * 16, "b" * 16, "c" * 16, "d" * 16], "model": ["m"] * 4,
        "wake_path": ["in-place"] * 4, "run_id": ["r"] * 4, "ready_s": [4.0, 20.0, 12.0, 5.0],
        "observed_s": [4.0, 20.0, 12.0, None], "overshoot_s": [5.0, 9.0, 7.0, None],
        "engine_schedule_s": [0.5, 0.5, 0.5, None], "total_s": [10.0, 30.0, 20.0, None],
        "censored": [False, False, False, True], "clock_skew": [False] * 4,
    })
    every = data.time_segments(episodes, "wake")
    order = list(dict.fromkeys(every["span_id"].to_list()))
    assert order == ["d" * 16, "b" * 16, "c" * 16, "a" * 16]
    assert every.filter(pl.col("span_id") == "b" * 16)["total_s"][0] == 30.0
    # the last instant of each, stretches back to back from t0
    for span_id, part in every.group_by("span_id"):
        assert part["from_s"][0] == 0.0 and part["to_s"].to_list() == sorted(part["to_s"].to_list())
        assert (part["from_s"].slice(1) == part["to_s"].slice(0, part.height - 1)).all()
    two = data.time_segments(episodes, "wake", limit=2)
    assert list(dict.fromkeys(two["span_id"].to_list())) == order[:2]
    assert two.equals(every.filter(pl.col("span_id").is_in(order[:2])))


def test_episodes_alike_to_the_millisecond_keep_a_bar_each() -> None:
    from datetime import datetime

    episodes = pl.DataFrame({"t0": [datetime(2026, 1, 1)] * 2, "span_id": ["abcdef0000000001", "abcdef0000000002"],
                             "policy": ["lend"] * 2, "run_id": ["r"] * 2, "grant_restore_s": [1.0, 2.0],
                             "drain_s": [1.5, 2.5], "engine_schedule_s": [0.1, 0.1], "ttft_s": [2.0, 3.0],
                             "censored": [False] * 2, "clock_skew": [False] * 2})
    assert data.time_segments(episodes, "lending")["episode"].n_unique() == 2


# --- the sidebar's run filter -------------------------------------------------------------------


def _runs() -> pl.DataFrame:
    return data.runs_of(pl.DataFrame({
        "run_id": ["a", "b", "c", None], "scenario": ["s1", "s1", "s2", None], "workload": ["w", "w", "v", None],
        "policy": ["lend", "static", None, "lend"], "seed": [1, 2, 1, None], "requests": [10, 20, 5, 7],
    }))


def test_runs_offer_only_run_ids_and_spell_a_gateless_run_no_gate() -> None:
    runs = _runs()
    assert runs["run_id"].to_list() == ["a", "b", "c"] and runs["requests"].to_list() == [10, 20, 5]
    assert runs.filter(pl.col("run_id") == "c")["policy"].to_list() == [data.NO_GATE]


def test_a_selection_keeps_the_runs_matching_every_field() -> None:
    runs = _runs()
    assert data.selected_runs(runs, data.Selection()) is None
    assert data.selected_runs(runs, data.Selection(scenarios=("s1",))) == {"a", "b"}
    assert data.selected_runs(runs, data.Selection(scenarios=("s1",), seeds=(2,))) == {"b"}
    assert data.selected_runs(runs, data.Selection(policies=(data.NO_GATE,))) == {"c"}
    assert data.selected_runs(runs, data.Selection(run_ids=("a",), policies=("static",))) == frozenset()


def test_select_filters_by_run_id_else_by_the_arm_labels() -> None:
    runs = _runs()
    episodes = pl.DataFrame({"run_id": ["a", "b", None], "x": [1, 2, 3]})
    # nothing chosen: every row, those without a run id too; anything chosen: only the chosen runs'
    assert data.select(episodes, runs, data.Selection()).height == 3
    assert data.select(episodes, runs, data.Selection(scenarios=("s1",)))["x"].to_list() == [1, 2]
    summary = pl.DataFrame({"policy": ["lend", "static", None], "workload": ["w", "w", "v"], "seed": [1, 2, 1]},
                           schema_overrides={"policy": pl.String})
    assert data.select(summary, runs, data.Selection(policies=(data.NO_GATE,)))["workload"].to_list() == ["v"]
    assert data.select(summary, runs, data.Selection(seeds=(2,)))["policy"].to_list() == ["static"]
    unlabelled = pl.DataFrame({"y": [1]})
    assert data.select(unlabelled, runs, data.Selection(seeds=(2,))).height == 1


def test_a_mapped_run_label_reaches_the_episodes_the_filter_offers(store_path: Path) -> None:
    import duckdb

    con = duckdb.connect(str(store_path), read_only=True)
    try:
        own = set(data.runs_of(Analysis(con).runs())["run_id"])
        analysis = Analysis(con, labels={"run_id": "restore.scenario"})
        offered = set(data.runs_of(analysis.runs())["run_id"])
        assert offered and not offered & own  # the mapped attribute, not restorelens's own run id
        for episodes in (analysis.lending_episodes(), analysis.wake_episodes()):
            assert episodes.height and set(episodes["run_id"]) <= offered
        runs = data.runs_of(analysis.runs())
        chosen = data.Selection(run_ids=(sorted(offered)[0],))
        kept = data.select(analysis.wake_episodes(), runs, chosen).height + \
            data.select(analysis.lending_episodes(), runs, chosen).height
        assert kept > 0
    finally:
        con.close()
