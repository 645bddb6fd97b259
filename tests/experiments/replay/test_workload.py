"""A replay's workload from recorded rows (``experiments.replay.workload``): sans-I/O."""

from __future__ import annotations

from typing import Any

import pytest

from restorelens.errors import SettingError
from restorelens.experiments.replay.store import DEFAULT_REPLAY_ENGINE
from restorelens.experiments.replay.workload import RecordedRequest, parse_class_map, prompt_chars_for, replay_workload
from restorelens.sim.config import PRESETS
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN

ENGINE = PRESETS[DEFAULT_REPLAY_ENGINE]
T0_NS = 1_767_225_600_000_000_000


def _request(i: int, at_s: float, traffic_class: str | None = "interactive", **fields: Any) -> RecordedRequest:
    return RecordedRequest(**{"run_id": "r", "request_id": f"q{i}", "source": "client",
                              "arrival_ns": T0_NS + round(at_s * 1e9), "traffic_class": traffic_class,
                              "prompt_tokens": 118, "completion_tokens": 16, **fields})


# --- the workload, from rows ---------------------------------------------------------------------


def test_every_prompt_length_an_engine_can_count_is_hit_exactly() -> None:
    for engine in PRESETS.values():
        floor = engine.estimate_prompt_tokens(0)
        for tokens in range(1, 5_000):
            chars = prompt_chars_for(tokens, engine)
            if tokens <= floor:
                assert chars == 0
                continue
            assert engine.estimate_prompt_tokens(chars) == tokens
            assert engine.estimate_prompt_tokens(chars - 1) < tokens  # the fewest characters


def test_arrivals_keep_their_offsets_from_the_first_to_the_microsecond() -> None:
    rows = [_request(2, 10.0000004), _request(0, 3.25), _request(1, 3.25), _request(3, 3.2500006)]
    replay = replay_workload(rows, ENGINE, name="replay-r", engine_preset=DEFAULT_REPLAY_ENGINE)
    assert [(a.at_s, a.request_id) for a in replay.workload.arrivals] == [
        (0.0, "q0"), (0.0, "q1"), (0.000001, "q3"), (6.75, "q2")]
    assert replay.workload.name == "replay-r" and replay.run_id == "r"


def test_classes_come_from_the_recording_then_the_class_map_then_the_gates_default() -> None:
    rows = [_request(0, 0, "batch"), _request(1, 1, "gold"), _request(2, 2, "bronze"), _request(3, 3, None)]
    replay = replay_workload(rows, ENGINE, name="x", engine_preset="p", class_map=parse_class_map(["gold=batch"]))
    assert [a.traffic_class for a in replay.workload.arrivals] == ["batch", "batch", "interactive", "interactive"]
    assert replay.defaulted_classes == {"bronze": 1, None: 1}
    assert "2 played as interactive" in replay.describe()
    with pytest.raises(SettingError, match="--replay-class"):
        parse_class_map(["gold=vip"])


def test_tokens_are_the_engines_and_a_request_never_served_takes_its_classs_median() -> None:
    rows = [
        _request(0, 0, prompt_tokens=100, completion_tokens=24, max_tokens=32),  # stopped early: 24 is its length
        _request(1, 1, prompt_tokens=300, completion_tokens=40),
        _request(2, 2, prompt_tokens=200, completion_tokens=8),
        _request(3, 3, prompt_tokens=None, completion_tokens=None),  # rejected at the gate: no engine span
        _request(4, 4, "batch", prompt_tokens=1_607, completion_tokens=None, max_tokens=64),
    ]
    replay = replay_workload(rows, ENGINE, name="x", engine_preset="p")
    counted = [(ENGINE.estimate_prompt_tokens(a.prompt_chars), a.max_tokens) for a in replay.workload.arrivals]
    # the median of 100, 300, 200 by nearest rank is 200; of 24, 40, 8 it is 24
    assert counted == [(100, 24), (300, 40), (200, 8), (200, 24), (1_607, 64)]
    assert (replay.prompt_from_median, replay.output_from_median, replay.cut_to_fit) == (1, 1, 0)


def test_a_request_longer_than_the_engine_takes_is_cut_to_fit() -> None:
    rows = [_request(0, 0, prompt_tokens=4_000, completion_tokens=500), _request(1, 1, prompt_tokens=9_000)]
    replay = replay_workload(rows, ENGINE, name="x", engine_preset="p")
    for arrival in replay.workload.arrivals:
        assert ENGINE.estimate_prompt_tokens(arrival.prompt_chars) + arrival.max_tokens <= ENGINE.max_model_len
    assert [a.max_tokens for a in replay.workload.arrivals] == [96, 1] and replay.cut_to_fit == 2


def test_a_run_without_phases_is_one_window_contention_for_interactive_and_borrow_for_batch() -> None:
    replay = replay_workload([_request(0, 5), _request(1, 7, "batch"), _request(2, 25)], ENGINE, name="x",
                             engine_preset="p")
    workload = replay.workload
    assert [a.phase for a in workload.arrivals] == [ARRIVAL_PHASE_RETURN, ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN]
    assert {(p.name, p.start_s, p.end_s) for p in workload.phases} == {
        (ARRIVAL_PHASE_RETURN, 0.0, 20.0), (ARRIVAL_PHASE_BORROW, 0.0, 20.0)}
    assert replay.windows == "whole replay"


def test_a_labelled_run_keeps_its_recorded_phases_and_windows() -> None:
    rows = [_request(0, 3, arrival_phase="interactive-alone", arrival_phase_start_s=0.0, arrival_phase_window_s=25.0),
            _request(1, 61, arrival_phase="return", arrival_phase_start_s=60.0, arrival_phase_window_s=25.0),
            _request(2, 70)]  # no phase in a labelled run: played, not scored
    workload = replay_workload(rows, ENGINE, name="x", engine_preset="p").workload
    assert [a.phase for a in workload.arrivals] == ["interactive-alone", "return", ""]
    assert [(p.name, p.start_s, p.end_s) for p in workload.phases] == [
        ("interactive-alone", 0.0, 25.0), ("return", 60.0, 85.0)]


def test_a_run_with_no_token_counts_at_all_is_one_line_naming_replay() -> None:
    with pytest.raises(SettingError, match="--replay.*no request of the run reached an engine"):
        replay_workload([_request(0, 0, prompt_tokens=None, completion_tokens=None)], ENGINE, name="x",
                        engine_preset="p")
