"""The Analysis API: percentiles, trace lookup, opening stores, materialised layers."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from builders import Traces

from restorelens import spans as sc
from restorelens.analysis import PUBLIC_VIEWS, Analysis
from restorelens.errors import RestorelensError, SettingError


def wakes(traces: Traces, overshoots: dict[str, list[float]]) -> None:
    """Wake episodes whose successful retry starts `overshoot` after readiness at 4.0 s."""
    for path, values in overshoots.items():
        for overshoot in values:
            trace = traces.new_trace()
            retry_at = 4.0 + overshoot
            client = traces.client_request(trace, 0.0, retry_at + 1.0, request_id=f"{path}-{overshoot}")
            first = traces.attempt(trace, client, 0.0, 0.125, status=503, retry_after_s=10.0)
            gate = traces.gate_request(trace, first, 0.0, 0.125, status=503, decision="not_ready")
            retry = traces.attempt(trace, client, retry_at, retry_at + 1.0, status=200, resend_count=1)
            traces.served_via_gate(trace, retry, retry_at, retry_at + 1.0, upstream_s=retry_at,
                                   engine_arrival_s=retry_at, time_in_queue_s=0.0, ttft_s=0.5, e2e_s=1.0)
            traces.model_wake(0.0, 4.0, link=(trace, gate), wake_path=path, ready_s=4.0, observed_s=4.0)


def test_percentiles_by_wake_path_interpolate_linearly() -> None:
    traces = Traces()
    wakes(traces, {"in-place": [0.0, 1.0, 2.0, 3.0, 4.0], "move": [6.0]})
    stats = Analysis(traces.store()).percentiles("wake_episodes", ["overshoot_s"], by=["wake path"])

    assert stats.columns == ["wake_path", "metric", "count", "p50", "p90", "p95", "p99", "max"]
    in_place, move = stats.rows(named=True)
    assert (in_place["wake_path"], in_place["count"]) == ("in-place", 5)
    assert (in_place["p50"], in_place["p90"], in_place["p95"], in_place["max"]) == (2.0, 3.6, 3.8, 4.0)
    assert in_place["p99"] == pytest.approx(3.96, abs=1e-12)
    assert (move["p50"], move["max"]) == (6.0, 6.0)


def test_nearest_rank_percentiles_take_the_value_at_rank_ceil_q_n() -> None:
    traces = Traces()
    wakes(traces, {"in-place": [0.0, 1.0, 2.0, 3.0], "move": [6.0]})
    analysis = Analysis(traces.store())
    linear = analysis.percentiles("wake_episodes", ["overshoot_s"], by=["wake path"]).row(0, named=True)
    nearest = analysis.percentiles("wake_episodes", ["overshoot_s"], by=["wake path"], method="nearest-rank")
    in_place, move = nearest.rows(named=True)
    assert linear["p50"] == 1.5  # interpolated between the 2nd and 3rd of 4
    assert (in_place["p50"], in_place["p90"], in_place["max"]) == (1.0, 3.0, 3.0)  # ranks 2 and 4 of 4
    assert (move["p50"], move["p99"]) == (6.0, 6.0)
    with pytest.raises(SettingError, match="setting percentile: unknown method 'median'"):
        analysis.percentiles("wake_episodes", ["overshoot_s"], method="median")


def test_percentiles_reject_unknown_views_and_columns() -> None:
    analysis = Analysis(Traces().store())
    with pytest.raises(SettingError, match="valid: requests"):
        analysis.percentiles("episodes", ["x"])
    with pytest.raises(SettingError, match="unknown column 'nope'"):
        analysis.percentiles("wake_episodes", ["overshoot_s"], by=["nope"])


def test_every_public_view_is_empty_not_an_error_on_an_empty_store() -> None:
    analysis = Analysis(Traces().store())
    for name in PUBLIC_VIEWS:
        assert getattr(analysis, name)().height == 0
    assert analysis.policy_summary().height == 0
    assert analysis.paired_differences().height == 0


def test_trace_lookup_by_request_id_gives_a_waterfall() -> None:
    traces = Traces()
    wakes(traces, {"in-place": [1.0]})
    analysis = Analysis(traces.store())

    [trace_id] = analysis.traces_for_request("in-place-1.0")
    waterfall = analysis.trace(trace_id)

    assert waterfall["name"].to_list() == [sc.SPAN_CLIENT_REQUEST, sc.SPAN_HTTP_POST, sc.SPAN_GATE_REQUEST,
                                           sc.SPAN_HTTP_POST, sc.SPAN_GATE_REQUEST, sc.SPAN_HTTP_POST,
                                           sc.SPAN_LLM_REQUEST]
    assert waterfall["offset_s"].to_list() == [0.0, 0.0, 0.0, 5.0, 5.0, 5.0, 5.0]
    assert waterfall["depth"].to_list() == [0, 1, 2, 1, 2, 3, 4]
    assert waterfall["duration_s"].to_list()[:2] == [6.0, 0.125]
    assert analysis.traces_for_request("unknown") == []


def test_materialised_layers_give_the_same_frames_as_views() -> None:
    traces = Traces()
    wakes(traces, {"in-place": [0.5, 1.5], "make-room": [3.0]})
    con = traces.store()
    as_views = Analysis(con).wake_episodes()
    as_tables = Analysis(con, materialize=True).wake_episodes()
    assert as_tables.equals(as_views)
    assert Analysis(con).attempts().height == 6


def test_a_view_read_by_columns_is_those_columns_of_the_whole_view() -> None:
    traces = Traces()
    wakes(traces, {"in-place": [0.5, 1.5], "make-room": [3.0]})
    analysis = Analysis(traces.store())
    columns = ["e2e_s", "traffic_class", "attempts"]
    chosen = analysis.view("requests", columns)
    assert chosen.columns == columns
    assert chosen.sort("e2e_s").equals(analysis.view("requests").select(columns).sort("e2e_s"))
    # a view without its driving spans: still those columns, typed as computed
    empty = Analysis(Traces().store()).view("wake_episodes", ["overshoot_s", "wake_path"])
    assert empty.height == 0 and empty.schema == analysis.view("wake_episodes").select("overshoot_s", "wake_path").schema
    with pytest.raises(SettingError, match="setting column: unknown column 'e2e' in requests; valid: "):
        analysis.view("requests", ["e2e_s", "e2e"])
    with pytest.raises(SettingError, match="unknown column 'x\" from otel_traces --'"):
        analysis.view("requests", ['x" from otel_traces --'])
    for bad in ([], ["e2e_s", "e2e_s"], "e2e_s"):
        with pytest.raises(SettingError, match="setting column: give requests's columns as a list of distinct names"):
            analysis.view("requests", bad)


def test_a_view_without_its_driving_spans_is_empty_with_the_computed_columns() -> None:
    # requests but no wake, restore or state spans: those views are answered without running them
    without = Traces()
    trace = without.new_trace()
    client = without.client_request(trace, 0.0, 1.0, request_id="plain")
    without.attempt(trace, client, 0.0, 1.0, status=200)
    with_wakes = Traces()
    wakes(with_wakes, {"in-place": [1.0]})
    with_wakes.gate_restore(0.0, 1.0, link=None)
    with_wakes.model_state(0.0, 1.0, phase="Sleeping", reason="EngineSleeping")

    short, computed = Analysis(without.store()), Analysis(with_wakes.store())
    assert short.requests().height == 1
    for name in ("wake_episodes", "lending_episodes", "lifecycle_intervals", "typed_model_wakes"):
        assert short.view(name).height == 0
        assert computed.view(name).height == 1
        assert short.view(name).schema == computed.view(name).schema


def test_open_is_read_only_and_leaves_the_store_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "spans.duckdb"
    traces = Traces()
    wakes(traces, {"in-place": [1.0]})
    con = duckdb.connect(str(path))
    traces.store(con)
    con.close()

    with Analysis.open(path, materialize=True) as analysis:
        assert analysis.wake_episodes()["overshoot_s"].to_list() == [1.0]
        with pytest.raises(duckdb.Error, match="read-only"):
            analysis.con.execute("delete from otel_traces")

    check = duckdb.connect(str(path), read_only=True)
    # exactly the tables the schema made: the spans and the (empty) engine metrics
    tables = {row[0] for row in check.execute("select table_name from duckdb_tables()").fetchall()}
    assert tables == {"otel_traces", "engine_metrics"}
    assert check.execute("select count(*) from engine_metrics").fetchone() == (0,)
    check.close()


def test_open_errors_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(RestorelensError, match="no such span store"):
        Analysis.open(tmp_path / "missing.duckdb")
    junk = tmp_path / "junk.duckdb"
    junk.write_bytes(b"\0" * 4096)
    with pytest.raises(RestorelensError) as caught:
        Analysis.open(junk)
    assert "\n" not in str(caught.value)


def test_the_stores_derived_tables_give_the_same_frames_as_computing_every_layer(tmp_path: Path) -> None:
    from restorelens.analysis.layers import DERIVED_LAYERS
    from restorelens.collector import load_paths
    from restorelens.store import TABLE, create_schema

    samples = sorted((Path(__file__).resolve().parents[2] / "sample_traces").glob("*.jsonl"))
    load_paths(samples, tmp_path / "samples.duckdb")  # the collector writes the derived tables
    with Analysis.open(tmp_path / "samples.duckdb") as stored:
        assert stored.stored_layers == frozenset(DERIVED_LAYERS)
        expected = {name: getattr(stored, name)() for name in PUBLIC_VIEWS}
        expected["policy_summary"] = stored.policy_summary()
        spans = stored.con.sql(f"select * from {TABLE}").to_arrow_table()
    bare = duckdb.connect(":memory:")  # the same spans, no derived tables: every layer computed
    create_schema(bare)
    bare.from_arrow(spans).insert_into(TABLE)
    computed = Analysis(bare)
    assert computed.stored_layers == frozenset()
    for name, frame in expected.items():
        # no sample engine exports its startup spans (test_wake_phases.py stores some)
        assert frame.height > 0 or name == "wake_phases", name
        assert (computed.policy_summary() if name == "policy_summary" else getattr(computed, name)()).equals(frame), name
