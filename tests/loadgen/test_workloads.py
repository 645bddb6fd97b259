from __future__ import annotations

import dataclasses

import pytest

from restorelens.errors import SettingError
from restorelens.loadgen.prompts import approx_tokens, filler_prompt
from restorelens.loadgen.request import RunLabels
from restorelens.loadgen.workloads import moflux_workload
from restorelens.spans import ARRIVAL_PHASE_BORROW

SEEDS = range(300)


def test_same_seed_same_offered_load_and_other_seed_differs() -> None:
    assert moflux_workload("balanced", 7) == moflux_workload("balanced", 7)
    assert moflux_workload("balanced", 7).arrivals != moflux_workload("balanced", 8).arrivals


def test_workload_is_immutable() -> None:
    workload = moflux_workload("balanced", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        workload.arrivals = ()  # type: ignore[misc]
    assert isinstance(workload.arrivals, tuple)


def test_phases_and_who_arrives_when() -> None:
    for seed in range(50):
        w = moflux_workload("balanced", seed)
        assert w.duration_s == 105.0
        for a in w.arrivals:
            assert a.phase == w.phase_at(a.at_s)
            if a.traffic_class == "interactive":
                assert a.at_s < 25.0 or 60.0 <= a.at_s < 85.0
            else:
                assert 25.0 <= a.at_s < 85.0
        assert [a.at_s for a in w.arrivals] == sorted(a.at_s for a in w.arrivals)
        assert len({a.request_id for a in w.arrivals}) == len(w.arrivals)


@pytest.mark.parametrize(
    ("profile", "traffic_class", "phase", "rate", "span_s"),
    [
        ("balanced", "interactive", "interactive-alone", 0.25, 25.0),
        ("balanced", "batch", ARRIVAL_PHASE_BORROW, 0.75, 35.0),
        ("balanced", "interactive", "return", 0.5, 25.0),
        ("balanced", "batch", "return", 0.75, 25.0),
        ("long-context", "batch", ARRIVAL_PHASE_BORROW, 0.15, 35.0),
        ("long-context", "interactive", "return", 0.5, 25.0),
    ],
)
def test_mean_rates_over_many_seeds(profile: str, traffic_class: str, phase: str, rate: float, span_s: float) -> None:
    counts = [moflux_workload(profile, s).count(traffic_class, phase) for s in SEEDS]
    expected = rate * span_s
    mean = sum(counts) / len(counts)
    # Poisson: the mean of 300 draws has a standard error of sqrt(expected / 300); allow 4 of them.
    assert abs(mean - expected) < 4 * (expected / len(counts)) ** 0.5
    assert len(set(counts)) > 1  # random, not a fixed grid


def test_no_arrivals_while_draining_or_of_the_idle_class() -> None:
    for s in range(50):
        w = moflux_workload("long-context", s)
        assert w.count("interactive", "drain") == w.count("batch", "drain") == 0
        assert w.count("interactive", ARRIVAL_PHASE_BORROW) == 0 and w.count("batch", "interactive-alone") == 0


def test_request_shapes_and_engine() -> None:
    balanced = moflux_workload("balanced", 0)
    shapes = {(a.traffic_class, a.prompt_chars, a.max_tokens) for a in balanced.arrivals}
    assert shapes == {("interactive", 400, 16), ("batch", 800, 32)}
    long_context = moflux_workload("long-context", 0)
    assert {(a.prompt_chars, a.max_tokens) for a in long_context.arrivals if a.traffic_class == "batch"} == {(7_100, 64)}
    assert long_context.engine.kv_tokens == 320 * 16 and balanced.engine.kv_tokens is None
    assert balanced.slo.ttft_s == 5.0 and balanced.slo.e2e_s == 30.0
    assert approx_tokens(7_100) == 1_607


def test_client_requests_carry_filler_of_the_right_length() -> None:
    w = moflux_workload("long-context", 3)
    labels = RunLabels("moflux-long-context", w.name, 3, "r1")
    at_s, request = next(iter(w.requests(labels)))
    arrival = w.arrivals[0]
    assert at_s == arrival.at_s and len(request.prompt) == arrival.prompt_chars
    assert request.prompt == filler_prompt(arrival.prompt_chars, 3, arrival.request_id)
    assert request.arrival_phase == arrival.phase and request.labels.workload == "long-context" and request.stream


def test_client_requests_carry_their_phase_window() -> None:
    w = moflux_workload("balanced", 2)
    requests = [request for _, request in w.requests(RunLabels(policy="lend"))]
    windows = {(r.arrival_phase, r.arrival_phase_start_s, r.arrival_phase_window_s) for r in requests}
    assert windows == {("interactive-alone", 0.0, 25.0), (ARRIVAL_PHASE_BORROW, 25.0, 35.0), ("return", 60.0, 25.0)}
    assert {r.labels.policy for r in requests} == {"lend"}


@pytest.mark.parametrize("seed", range(1, 6))
def test_the_fixed_burst_protocol_replaces_the_borrow_phase_with_a_prime_and_three_pressure_requests(seed: int) -> None:
    burst, long_context = moflux_workload("fixed-burst", seed), moflux_workload("long-context", seed)
    batch_before_return = [(a.at_s, a.prompt_chars, a.max_tokens, a.phase) for a in burst.arrivals
                           if a.traffic_class == "batch" and a.at_s < 60]
    assert batch_before_return == [(25.0, 7_100, 64, ARRIVAL_PHASE_BORROW)] + [
        (at_s, 7_100, 64, ARRIVAL_PHASE_BORROW) for at_s in (48.0, 48.1, 48.2)]
    # the first interactive arrival of the return window comes at exactly 60 s, 2,000 characters
    returning = [a for a in burst.arrivals if a.traffic_class == "interactive" and a.phase == "return"]
    assert (returning[0].at_s, returning[0].prompt_chars, returning[0].max_tokens) == (60.0, 2_000, 16)
    # everything else is the Long-context load of the same seed
    def rest(w, first_return_id):
        return [(a.at_s, a.traffic_class, a.phase, a.prompt_chars) for a in w.arrivals
                if not (a.traffic_class == "batch" and a.at_s < 60) and not a.request_id.endswith(first_return_id)]
    first_id = returning[0].request_id.split("-s", 1)[1]
    assert rest(burst, first_id) == rest(long_context, first_id)
    assert burst.name == "fixed-burst" and burst.engine == long_context.engine
    assert len({a.request_id for a in burst.arrivals}) == len(burst.arrivals)


def test_filler_prompt_exact_lengths() -> None:
    for chars in (0, 1, 17, 400, 800, 7_100):
        assert len(filler_prompt(chars, 1, "x")) == chars
    assert filler_prompt(400, 1, "a") != filler_prompt(400, 1, "b")


def test_unknown_profile_is_a_setting_error() -> None:
    with pytest.raises(SettingError, match="workload"):
        moflux_workload("huge")


def test_modelclaim_scenarios_cover_the_four_wake_paths_with_their_hints() -> None:
    from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_SCENARIOS, get_modelclaim_scenario
    from restorelens.spans import WAKE_PATHS

    assert sorted(s.wake_path for s in MODELCLAIM_SCENARIOS.values()) == sorted(WAKE_PATHS)
    hints = {s.wake_path: s.expected_retry_after_s for s in MODELCLAIM_SCENARIOS.values()}
    assert hints == {"in-place": 10, "make-room": 20, "move": 30, "cold-start": 10}
    reserved = get_modelclaim_scenario("modelclaim-in-place")
    assert reserved.arrivals[0].at_s == 0.0 and reserved.setup.wake_reserve
    assert not get_modelclaim_scenario("modelclaim-make-room").setup.wake_reserve
    with pytest.raises(SettingError, match="SCENARIO"):
        get_modelclaim_scenario("modelclaim-teleport")


def test_a_slice_starts_at_zero_and_keeps_phases_and_ids() -> None:
    whole = moflux_workload("balanced", 16)
    part = whole.between(20.0, 32.0)
    inside = [a for a in whole.arrivals if 20.0 <= a.at_s < 32.0]
    assert part.duration_s == 12.0 and len(part.arrivals) == len(inside) > 0
    assert [(a.request_id, a.phase) for a in part.arrivals] == [(a.request_id, a.phase) for a in inside]
    assert [a.at_s for a in part.arrivals] == pytest.approx([a.at_s - 20.0 for a in inside])
    assert whole.until(30.0) == whole.between(0.0, 30.0)
    assert whole.until(30.0).arrivals == tuple(a for a in whole.arrivals if a.at_s < 30.0)


def test_a_client_that_sets_vllms_priority_puts_it_in_the_body() -> None:
    w = moflux_workload("balanced", 1)
    arrival = w.arrivals[0]
    assert "priority" not in w.client_request(arrival, RunLabels()).body()
    assert w.client_request(arrival, RunLabels(), priority=10).body()["priority"] == 10
    priorities = {r.traffic_class: r.body().get("priority")
                  for _, r in w.requests(RunLabels(), priority=lambda c: 0 if c == "interactive" else 10)}
    assert priorities == {"interactive": 0, "batch": 10}
