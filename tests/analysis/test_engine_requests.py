"""The engine view: every request an engine served, with or without a gate or a restorelens client,
its schedule as an interval where vLLM's spans allow no more, and labels under the user's names."""

from __future__ import annotations

import pytest
from builders import VLLM_SERVICE, Traces

from restorelens.analysis import Analysis
from restorelens.errors import SettingError


def one(frame):
    assert frame.height == 1, frame
    return frame.row(0, named=True)


def user_call(traces: Traces, *, arrival_s: float = 10.25, queue_s: float = 0.5, ttft_s: float = 1.0,
              prefill_s: float | None = None, tier: str | None = "interactive", env: str | None = None) -> str:
    """A user's own span ("chat", not client.request) > its httpx POST at 10.0 > vLLM at ``arrival_s``."""
    trace = traces.new_trace()
    chat = traces.span(trace, "chat", 10.0, 13.0, service="app",
                       attributes={"app.tier": tier} if tier else {},
                       resource={"deployment.environment": env} if env else {})
    post = traces.attempt(trace, chat, 10.0, 13.0, status=200, service="app")
    traces.engine(trace, post, arrival_s, time_in_queue_s=queue_s, ttft_s=ttft_s, e2e_s=2.5, prefill_s=prefill_s)
    return trace


def test_a_direct_call_from_any_client_is_an_engine_request_timed_from_its_attempt() -> None:
    traces = Traces()
    user_call(traces)
    row = one(Analysis(traces.store()).engine_requests())
    assert (row["attempt_source"], row["via_gate"]) == ("client", False)
    assert row["queue_s"] == 0.5
    # attempt at 10.0, arrival 10.25, queued on arrival for 0.5 s: scheduled at 10.75
    assert row["schedule_delay_s"] == 0.75
    assert (row["schedule_delay_lower_s"], row["schedule_delay_upper_s"], row["schedule_point"]) == (0.75, 0.75, "upper")
    assert (row["ttft_s"], row["prefill_s"], row["decode_s"]) == (1.0, 0.5, 1.5)
    # vLLM names no service and no model; no gate, no client.request, no mapping: nothing to guess from
    assert row["engine"] == VLLM_SERVICE
    assert row["policy"] is None and row["traffic_class"] is None


def test_an_engine_core_that_took_the_request_late_gives_an_interval_whose_upper_bound_is_the_point() -> None:
    traces = Traces()
    # queued 0.5 s, first token 1.0 s after arrival, but only 0.25 s of prefill: the engine core
    # scheduled it between arrival + 0.5 and arrival + 1.0 - 0.25
    user_call(traces, queue_s=0.5, ttft_s=1.0, prefill_s=0.25)
    row = one(Analysis(traces.store()).engine_requests())
    assert row["schedule_delay_lower_s"] == 0.75
    assert row["schedule_delay_upper_s"] == 1.0
    assert (row["schedule_delay_s"], row["schedule_point"]) == (1.0, "upper")


def test_without_a_prefill_time_the_lower_bound_is_the_point() -> None:
    traces = Traces()
    user_call(traces)
    traces.spans[-1].attributes.pop(next(k for k in traces.spans[-1].attributes if k.endswith("time_in_model_prefill")))
    row = one(Analysis(traces.store()).engine_requests())
    assert row["schedule_delay_upper_s"] is None
    assert (row["schedule_delay_s"], row["schedule_point"]) == (0.75, "lower")


def test_latencies_that_contradict_each_other_keep_the_lower_bound() -> None:
    traces = Traces()
    # prefill longer than TTFT minus queue: first token - prefill falls before arrival + queue
    user_call(traces, queue_s=0.5, ttft_s=1.0, prefill_s=0.75)
    row = one(Analysis(traces.store()).engine_requests())
    assert row["schedule_delay_upper_s"] == 0.5
    assert (row["schedule_delay_s"], row["schedule_point"]) == (0.75, "lower")


def test_an_engine_span_without_a_recorded_caller_is_timed_from_its_arrival() -> None:
    traces = Traces()
    traces.engine(traces.new_trace(), "", 5.0, time_in_queue_s=0.25, ttft_s=0.5, e2e_s=1.0)
    row = one(Analysis(traces.store()).engine_requests())
    assert row["attempt_source"] == "engine arrival"
    assert (row["schedule_delay_s"], row["attempt_span_id"], row["clock_skew"]) == (0.25, None, False)


def test_through_a_gate_the_attempt_is_the_clients_call_to_the_gate() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 60.0, 64.0, traffic_class="batch", model="qwen", policy=None)
    attempt = traces.attempt(trace, client, 60.0, 64.0, status=200)
    traces.served_via_gate(trace, attempt, 60.125, 64.0, upstream_s=60.5, engine_arrival_s=60.625,
                           time_in_queue_s=0.25, ttft_s=1.0, e2e_s=3.0, policy="lend")
    row = one(Analysis(traces.store()).engine_requests())
    assert (row["attempt_source"], row["via_gate"], row["attempt_span_id"]) == ("client via gate", True, attempt)
    # scheduled at 60.625 + 0.25, the client's attempt started at 60.0
    assert row["schedule_delay_s"] == 0.875
    assert (row["traffic_class"], row["policy"], row["model"]) == ("batch", "lend", "qwen")
    # vLLM's unknown_service name is no engine name: the model the client asked for is
    assert row["engine"] == "qwen"


def test_an_engine_that_names_its_service_is_known_by_it() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 2.0, model="qwen")
    attempt = traces.attempt(trace, client, 0.0, 2.0, status=200)
    traces.engine(trace, attempt, 0.125, time_in_queue_s=0.0, ttft_s=0.5, e2e_s=1.0, service="sim-a")
    row = one(Analysis(traces.store()).engine_requests())
    assert (row["engine"], row["engine_service_name"], row["model"]) == ("sim-a", "sim-a", "qwen")


def test_an_engine_span_before_its_attempt_is_flagged_not_corrected() -> None:
    traces = Traces()
    user_call(traces, arrival_s=9.5)
    row = one(Analysis(traces.store()).engine_requests())
    assert row["clock_skew"] is True
    assert row["schedule_delay_s"] == 0.0  # 9.5 + 0.5 - 10.0: reported as measured


def test_labels_come_from_the_users_own_span_and_resource_attributes() -> None:
    traces = Traces()
    user_call(traces, tier="batch", env="prod")
    user_call(traces, tier=None, env="staging")
    labels = {"traffic_class": "app.tier", "workload": "deployment.environment", "run": "deployment.environment"}
    rows = Analysis(traces.store(), labels=labels).engine_requests().sort("traffic_class", nulls_last=True)
    assert rows["traffic_class"].to_list() == ["batch", None]
    assert rows["workload"].to_list() == ["prod", "staging"]  # a resource attribute of the client span
    assert rows["run_id"].to_list() == ["prod", "staging"]  # "run" is run_id
    assert rows["policy"].to_list() == [None, None]  # no gate, no arm label: null, never 'none'


def test_a_mapped_attribute_wins_over_restorelens_own_label_in_the_requests_view_too() -> None:
    traces = Traces()
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 2.0, traffic_class="interactive")
    traces.spans[-1].attributes["app.tier"] = "premium"
    attempt = traces.attempt(trace, client, 0.0, 2.0, status=200)
    traces.engine(trace, attempt, 0.125, time_in_queue_s=0.0, ttft_s=0.5, e2e_s=1.0)
    store = traces.store()
    assert Analysis(store).requests()["traffic_class"].to_list() == ["interactive"]
    mapped = Analysis(store, labels={"traffic_class": "app.tier"})
    assert mapped.requests()["traffic_class"].to_list() == ["premium"]
    assert mapped.engine_requests()["traffic_class"].to_list() == ["premium"]
    # a second Analysis on the same connection starts from its own mapping, not the last one's
    assert Analysis(store).engine_requests()["traffic_class"].to_list() == ["interactive"]


def test_a_seed_label_is_read_as_a_number_and_a_non_number_is_null() -> None:
    traces = Traces()
    for seed in ("7", "seven"):
        trace = traces.new_trace()
        chat = traces.span(trace, "chat", 0.0, 2.0, service="app", attributes={"app.seed": seed})
        post = traces.attempt(trace, chat, 0.0, 2.0, status=200, service="app")
        traces.engine(trace, post, 0.125, time_in_queue_s=0.0, ttft_s=0.5, e2e_s=1.0)
    rows = Analysis(traces.store(), labels={"seed": "app.seed"}).engine_requests()
    assert sorted(rows["seed"].to_list(), key=lambda s: s is None) == [7, None]


@pytest.mark.parametrize(("labels", "problem"), [
    ({"tier": "app.tier"}, "unknown label 'tier'"),
    ({"traffic_class": " "}, "must name an attribute"),
    ({"traffic_class": "a" * 257}, "longer than 256"),
])
def test_a_bad_mapping_is_a_setting_error_naming_the_label(labels: dict[str, str], problem: str) -> None:
    with pytest.raises(SettingError, match=problem):
        Analysis(Traces().store(), labels=labels)


def test_every_request_keeps_its_engine_row_whatever_the_mapping_finds() -> None:
    traces = Traces()
    for _ in range(3):
        user_call(traces)
    store = traces.store()
    plain = Analysis(store).engine_requests()
    mapped = Analysis(store, labels={"traffic_class": "app.tier", "policy": "no.such.attribute"}).engine_requests()
    assert mapped.height == plain.height == 3
    assert mapped.drop("traffic_class").equals(plain.drop("traffic_class"))


def test_without_a_queue_time_the_upper_bound_is_the_point() -> None:
    traces = Traces()
    user_call(traces, queue_s=0.5, ttft_s=1.0, prefill_s=0.25)
    traces.spans[-1].attributes.pop(next(k for k in traces.spans[-1].attributes if k.endswith("time_in_queue")))
    row = one(Analysis(traces.store()).engine_requests())
    assert row["schedule_delay_lower_s"] is None
    assert (row["schedule_delay_s"], row["schedule_point"]) == (1.0, "upper")
