"""Engine startup phases of a wake: the engine's own spans in the wake's trace (wake_phases) and the
split of process start -> engine ready they give the wake episode, from real SDK spans stored by
the collector, on DuckDB and on chDB alike."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from engine_startup import VLLM_READY_S, VLLM_SPANS, VLLM_TREE, Startups

from restorelens import spans as sc
from restorelens.analysis import Analysis
from restorelens.analysis.sources import open_analysis
from restorelens.cli import cli as main
from restorelens.sources import parse_source


def decomposed(startups: Startups, tmp_path: Path) -> tuple[pl.DataFrame, dict]:
    """The store's phases and its one wake episode."""
    with Analysis.open(startups.store(tmp_path / "spans.duckdb")) as analysis:
        phases, episodes = analysis.wake_phases(), analysis.wake_episodes()
    assert episodes.height == 1, episodes
    return phases, episodes.row(0, named=True)


def assert_adds_up(episode: dict) -> None:
    """The engine's stretches add up to process start -> engine ready, exactly."""
    ready_after_start_s = episode["ready_s"] - episode["process_started_s"]
    assert episode["engine_spans_s"] + episode["outside_engine_spans_s"] == ready_after_start_s
    assert episode["engine_spans_share"] == episode["engine_spans_s"] / ready_after_start_s


def test_vllm_s_nested_startup_spans_are_the_phases(tmp_path: Path) -> None:
    startups = Startups()
    with startups.wake(0.0, 67.0, wake_called_s=0.5, ready_s=0.5 + VLLM_READY_S, observed_s=67.0) as wake:
        startups.spans(wake, VLLM_TREE, offset_s=0.5)
    phases, episode = decomposed(startups, tmp_path)

    assert phases.height == VLLM_SPANS
    by_name = {row["name"]: row for row in phases.iter_rows(named=True)}
    top = by_name[sc.SPAN_VLLM_OVERALL_LOADING]
    assert (top["depth"], top["parent_span_id"], top["orphan"], top["start_s"], top["duration_s"]) == (
        0, None, False, 6.0, 52.125)
    assert (top["clipped_s"], top["adds_s"], top["service_name"], top["engine_instance"]) == (
        52.125, 52.125, "vllm", "engine-1")
    warmup = by_name[sc.SPAN_VLLM_WARMUP_CPU]
    assert warmup["depth"] == 4 and warmup["parent_span_id"] == by_name[sc.SPAN_VLLM_PREPARE_MODEL]["span_id"]
    assert by_name[sc.SPAN_VLLM_LOAD_WEIGHTS]["depth"] == 6
    assert warmup["clipped_s"] is None and warmup["adds_s"] is None  # nested: no share of the union
    assert set(phases["wake_span_id"]) == {episode["span_id"]}

    assert (episode["process_started_s"], episode["ready_s"]) == (0.5, 66.75)
    assert (episode["engine_spans"], episode["engine_starts"]) == (VLLM_SPANS, 1)
    assert (episode["engine_spans_s"], episode["outside_engine_spans_s"]) == (52.125, 14.125)
    assert_adds_up(episode)
    assert (episode["engine_skew_s"], episode["clock_skew"], episode["negative_gaps"]) == (0.0, False, [])


def test_flat_overlapping_spans_count_their_union_once(tmp_path: Path) -> None:
    startups = Startups()
    flat = (("imports", 1.0, 4.0, ()), ("load", 3.0, 9.0, ()), ("compile", 5.0, 7.0, ()), ("warm", 12.0, 14.0, ()))
    with startups.wake(0.0, 20.0, wake_called_s=0.0, ready_s=16.0) as wake:
        startups.spans(wake, flat)
    phases, episode = decomposed(startups, tmp_path)

    assert phases["depth"].to_list() == [0, 0, 0, 0]
    assert phases["adds_s"].to_list() == [3.0, 5.0, 0.0, 2.0]  # compile lies inside load
    assert (episode["engine_spans_s"], episode["outside_engine_spans_s"], episode["engine_spans_share"]) == (
        10.0, 6.0, 0.625)
    assert_adds_up(episode)


def test_a_span_never_exported_leaves_its_children_top_level_orphans(tmp_path: Path) -> None:
    startups = Startups()
    with startups.wake(0.0, 70.0, wake_called_s=0.0, ready_s=VLLM_READY_S) as wake:
        startups.spans(wake, VLLM_TREE, missing=(sc.SPAN_VLLM_OVERALL_LOADING, sc.SPAN_VLLM_ENGINE_CORE_PROC_INIT))
    phases, episode = decomposed(startups, tmp_path)

    assert phases.height == VLLM_SPANS - 2
    top = phases.filter(pl.col("depth") == 0)
    assert top["name"].to_list() == [sc.SPAN_VLLM_ASYNC_MP_CLIENT_INIT, sc.SPAN_VLLM_EXECUTOR_INIT,
                                      sc.SPAN_VLLM_PREPARE_MODEL, sc.SPAN_VLLM_ALLOCATE_KV_CACHE]
    assert top["orphan"].to_list() == [True] * 4
    # AsyncMPClient init (8 .. 56) covers the orphans of the lost EngineCoreProc init
    assert (episode["engine_spans_s"], episode["outside_engine_spans_s"]) == (48.0, VLLM_READY_S - 48.0)
    assert_adds_up(episode)


def test_two_starts_in_one_wake_are_told_apart_by_their_process(tmp_path: Path) -> None:
    """The first engine process failed 3 s after it began loading; the lifecycle started a second
    under the same wake (same TRACEPARENT): both processes' spans are phases, numbered by start."""
    startups = Startups()
    failed = ((sc.SPAN_VLLM_OVERALL_LOADING, 1.0, 4.0, ((sc.SPAN_VLLM_ENGINE_CORE_PROC_INIT, 2.0, 4.0, ()),)),)
    with startups.wake(0.0, 80.0, wake_called_s=0.0, ready_s=5.0 + VLLM_READY_S) as wake:
        startups.spans(wake, failed, instance="engine-a")
        startups.spans(wake, VLLM_TREE, instance="engine-b", offset_s=5.0)
    phases, episode = decomposed(startups, tmp_path)

    starts = phases.group_by("start_index", "engine_instance").len().sort("start_index")
    assert starts.rows() == [(1, "engine-a", 2), (2, "engine-b", VLLM_SPANS)]
    assert (episode["engine_starts"], episode["engine_spans"]) == (2, VLLM_SPANS + 2)
    assert episode["engine_spans_s"] == 3.0 + 52.125
    assert_adds_up(episode)


def test_an_inference_request_without_a_traceparent_is_no_phase(tmp_path: Path) -> None:
    """vLLM parents a request that arrived without a traceparent to its environment's trace: the
    wake's. Neither it (SERVER, llm_request) nor anything under it is startup work, even one that
    began before engine ready; nor is a top-level span that begins after engine ready."""
    startups = Startups()
    with startups.wake(0.0, 70.0, wake_called_s=0.0, ready_s=VLLM_READY_S) as wake:
        startups.spans(wake, VLLM_TREE)
        startups.inference(wake, 60.0, 61.0)
        startups.inference(wake, 68.0, 69.0)
        startups.spans(wake, (("after ready", 67.0, 67.5, ()),))
    phases, episode = decomposed(startups, tmp_path)

    assert phases.height == VLLM_SPANS
    assert sc.SPAN_LLM_REQUEST not in phases["name"].to_list() and "after ready" not in phases["name"].to_list()
    assert phases["name"].to_list().count(sc.SPAN_VLLM_WARMUP_CPU) == 1
    assert (episode["engine_spans_s"], episode["outside_engine_spans_s"]) == (52.125, 14.125)


def test_engine_clock_behind_the_lifecycle_is_named_not_hidden(tmp_path: Path) -> None:
    """The engine's clock is 8 s behind: its first span starts 2 s before the process did and its
    last ends before ready as usual. The overhang is clipped from the decomposition, measured in
    engine_skew_s, listed in negative_gaps and flags the episode."""
    startups = Startups()
    with startups.wake(0.0, 70.0, wake_called_s=0.0, ready_s=VLLM_READY_S) as wake:
        startups.spans(wake, VLLM_TREE, offset_s=-8.0)
    phases, episode = decomposed(startups, tmp_path)

    top = phases.filter(pl.col("depth") == 0).row(0, named=True)
    assert (top["start_s"], top["before_start_s"], top["clipped_s"]) == (-2.0, 2.0, 50.125)
    assert (episode["engine_skew_s"], episode["clock_skew"], episode["negative_gaps"]) == (2.0, True, ["engine_skew_s"])
    assert episode["engine_spans_s"] == 50.125
    assert_adds_up(episode)


def test_engine_clock_ahead_shows_spans_past_ready(tmp_path: Path) -> None:
    startups = Startups()
    with startups.wake(0.0, 70.0, wake_called_s=0.0, ready_s=56.0) as wake:
        startups.spans(wake, VLLM_TREE)
    phases, episode = decomposed(startups, tmp_path)

    assert phases.filter(pl.col("depth") == 0)["after_ready_s"].to_list() == [2.125]
    assert (episode["engine_skew_s"], episode["clock_skew"]) == (2.125, True)
    assert (episode["engine_spans_s"], episode["outside_engine_spans_s"]) == (50.0, 6.0)
    assert_adds_up(episode)


def test_a_wake_without_engine_spans_is_unchanged(tmp_path: Path) -> None:
    startups = Startups()
    with startups.wake(0.0, 10.0, wake_called_s=1.0, ready_s=9.0):
        pass
    phases, episode = decomposed(startups, tmp_path)

    assert phases.is_empty()
    assert episode["ready_s"] == 9.0 and episode["process_started_s"] == 1.0
    for column in ("engine_spans", "engine_starts", "engine_spans_s", "outside_engine_spans_s", "engine_spans_share",
                   "engine_skew_s"):
        assert episode[column] is None, column
    assert (episode["clock_skew"], episode["negative_gaps"]) == (False, [])


def test_a_wake_that_never_became_ready_keeps_its_phases_without_an_outside_stretch(tmp_path: Path) -> None:
    startups = Startups()
    with startups.wake(0.0, 30.0, wake_called_s=0.0, ready_s=None) as wake:
        startups.spans(wake, ((sc.SPAN_VLLM_OVERALL_LOADING, 2.0, 20.0, ()),))
    phases, episode = decomposed(startups, tmp_path)

    assert phases["adds_s"].to_list() == [18.0]
    assert (episode["censored"], episode["engine_spans_s"], episode["outside_engine_spans_s"]) == (True, 18.0, None)


@pytest.fixture(scope="module")
def both_engines(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """Every case above in one DuckDB store, and that store exported to chDB."""
    folder = tmp_path_factory.mktemp("phases")
    startups = Startups()
    with startups.wake(0.0, 67.0, wake_called_s=0.5, ready_s=0.5 + VLLM_READY_S) as wake:
        startups.spans(wake, VLLM_TREE, offset_s=0.5, instance="engine-b")
        startups.spans(wake, ((sc.SPAN_VLLM_OVERALL_LOADING, 0.25, 3.0, ()),), instance="engine-a")
        startups.inference(wake, 60.0, 61.0, instance="engine-b")
    with startups.wake(100.0, 170.0, wake_called_s=100.0, ready_s=100.0 + VLLM_READY_S) as wake:
        startups.spans(wake, VLLM_TREE, offset_s=92.0, missing=(sc.SPAN_VLLM_EXECUTOR_INIT,))
    with startups.wake(200.0, 210.0, wake_called_s=200.0, ready_s=209.0):
        pass
    duck = startups.store(folder / "spans.duckdb")
    chdb = f"chdb:{folder / 'chdb'}"
    result = CliRunner().invoke(main, ["export", "--db", str(duck), "--to", chdb])
    assert result.exit_code == 0, result.output
    return str(duck), chdb


def test_duckdb_and_chdb_agree(both_engines: tuple[str, str]) -> None:
    frames = []
    for text in both_engines:
        with open_analysis(parse_source(text)) as analysis:
            frames.append((analysis.wake_phases(), analysis.wake_episodes()))
    (duck_phases, duck_episodes), (ch_phases, ch_episodes) = frames
    assert duck_phases.height == VLLM_SPANS + 1 + VLLM_SPANS - 1
    assert duck_phases.equals(ch_phases)
    assert duck_episodes.equals(ch_episodes)
    assert duck_episodes["engine_skew_s"].to_list() == [0.25, 2.0, None]  # engine-a began 0.25 s before process start
