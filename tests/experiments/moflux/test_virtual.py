from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import ReadableSpan

from restorelens.cli import cli
from restorelens.clock import DEFAULT_VIRTUAL_EPOCH_S, to_ns
from restorelens.experiments.catalog import get_scenario
from restorelens.experiments.run_telemetry import RunTelemetry
from restorelens.experiments.runner import run_virtual
from restorelens.spans import (
    ATTR_ATTEMPTS,
    ATTR_HTTP_RESEND_COUNT,
    ATTR_HTTP_RETRY_AFTER,
    ATTR_HTTP_STATUS_CODE,
    ATTR_OUTCOME,
    ATTR_REQUEST_ID,
    ATTR_RETRY_AFTER_S,
    ATTR_RUN_ID,
    ATTR_WORKLOAD,
    EVENT_RESPONSE_FIRST_CHUNK,
    EVENT_RETRY_WAIT,
    SPAN_CLIENT_REQUEST,
    SPAN_GATE_LEND,
    SPAN_GATE_REQUEST,
    SPAN_GATE_RESTORE,
    SPAN_HTTP_POST,
    SPAN_LLM_REQUEST,
)


def _run(name: str = "moflux-balanced", arm: str = "lend", seed: int = 1, scenario=None):
    telemetry = RunTelemetry("memory", batch=False)
    report = run_virtual(scenario or get_scenario(name, arm), seed, telemetry.providers, run_id="r1")
    spans = telemetry.exporter.get_finished_spans()
    telemetry.shutdown()
    return report, spans


def _shape(spans: tuple[ReadableSpan, ...]) -> list[tuple]:
    """Everything but the random ids: names, kinds, times, attributes, events, parent names."""
    by_id = {s.context.span_id: s for s in spans}
    return sorted(
        (s.start_time, s.end_time, s.name, s.kind.name, by_id[s.parent.span_id].name if s.parent else None,
         tuple(sorted((k, str(v)) for k, v in s.attributes.items())),
         tuple((e.name, e.timestamp) for e in s.events))
        for s in spans
    )


def test_every_request_is_one_trace_client_to_engine() -> None:
    report, spans = _run()
    by_id = {s.context.span_id: s for s in spans}
    requests = [s for s in spans if s.name == SPAN_CLIENT_REQUEST]
    assert len(requests) == len(report.results) == len(get_scenario("moflux-balanced").workload(1).arrivals)
    for engine_span in (s for s in spans if s.name == SPAN_LLM_REQUEST):
        chain = [engine_span]
        while chain[-1].parent is not None:
            chain.append(by_id[chain[-1].parent.span_id])
        assert [s.name for s in chain] == [SPAN_LLM_REQUEST, SPAN_HTTP_POST, SPAN_GATE_REQUEST, SPAN_HTTP_POST, SPAN_CLIENT_REQUEST]
        assert len({s.context.trace_id for s in chain}) == 1
        assert chain[2].attributes[ATTR_REQUEST_ID] == chain[4].attributes[ATTR_REQUEST_ID]


def test_virtual_timestamps_follow_the_workload() -> None:
    report, spans = _run()
    workload = get_scenario("moflux-balanced").workload(1)
    starts = {s.attributes[ATTR_REQUEST_ID]: s.start_time for s in spans if s.name == SPAN_CLIENT_REQUEST}
    for arrival in workload.arrivals:
        assert starts[arrival.request_id] == to_ns(DEFAULT_VIRTUAL_EPOCH_S + arrival.at_s)
    for span in (s for s in spans if s.name == SPAN_CLIENT_REQUEST):
        assert span.attributes[ATTR_RUN_ID] == "r1" and span.attributes[ATTR_WORKLOAD] == "balanced"
        first_chunks = [e for e in span.events if e.name == EVENT_RESPONSE_FIRST_CHUNK]
        if span.attributes[ATTR_OUTCOME] != "ok":  # over its class's limit: a 429, no body
            assert first_chunks == []
            continue
        assert len(first_chunks) == 1 and span.start_time < first_chunks[0].timestamp <= span.end_time


def test_same_seed_same_spans_and_same_offered_load_across_arms() -> None:
    _, first = _run(seed=4)
    _, again = _run(seed=4)
    assert _shape(first) == _shape(again)
    loads = []
    for arm in ("fcfs", "priority", "static", "lend"):
        report, _ = _run(arm=arm, seed=4)
        loads.append(sorted((r.request_id, r.start_s) for r in report.results))
    assert all(load == loads[0] for load in loads)


def test_lending_arm_records_lending_and_restoration_and_static_does_not() -> None:
    _, lend = _run("moflux-long-context", "lend", seed=1)
    _, static = _run("moflux-long-context", "static", seed=1)
    names = Counter(s.name for s in lend)
    assert names[SPAN_GATE_LEND] >= 1 and names[SPAN_GATE_RESTORE] >= 1
    assert Counter(s.name for s in static)[SPAN_GATE_LEND] == 0


def test_gate_rejections_are_retried_exactly_after_their_retry_after() -> None:
    # No queueing at the gate: a full class is rejected at once (429 + the gate's Retry-After).
    base = get_scenario("moflux-long-context", "static")

    class NoQueue(type(base)):
        def gate_settings(self, upstream_url, model):
            return dataclasses.replace(super().gate_settings(upstream_url, model), wait_timeout_s=0.0)

    scenario = NoQueue(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)} | {"max_attempts": 6})
    report, spans = _run(scenario=scenario, seed=2)
    retried = [r for r in report.results if len(r.attempts) > 1]
    assert retried, "the static floors must turn some batch requests away"
    for result in retried:
        for before, after, wait_s in zip(result.attempts, result.attempts[1:], result.waits_s, strict=False):
            assert before.status == 429
            assert after.start_s == before.end_s + wait_s
            if before.retry_after.seconds is not None:
                assert wait_s == before.retry_after.seconds
    by_id = {s.context.span_id: s for s in spans}
    rejected = [s for s in spans if s.name == SPAN_HTTP_POST and s.attributes.get(ATTR_HTTP_STATUS_CODE) == 429]
    assert rejected and all(by_id[s.parent.span_id].name == SPAN_CLIENT_REQUEST for s in rejected)
    # the hint the gate sent is on the attempt span, raw and parsed, once the gate has an estimate
    hinted = [s for s in rejected if ATTR_HTTP_RETRY_AFTER in s.attributes]
    assert hinted and all(float(s.attributes[ATTR_HTTP_RETRY_AFTER][0]) == s.attributes[ATTR_RETRY_AFTER_S] for s in hinted)
    resends = sorted(s.attributes.get(ATTR_HTTP_RESEND_COUNT, 0) for s in spans if s.name == SPAN_HTTP_POST
                     and by_id[s.parent.span_id].name == SPAN_CLIENT_REQUEST)
    assert resends[-1] >= 1
    logical = {s.attributes[ATTR_REQUEST_ID]: s for s in spans if s.name == SPAN_CLIENT_REQUEST}
    for result in retried:
        span = logical[result.request_id]
        assert span.attributes[ATTR_ATTEMPTS] == len(result.attempts)
        assert len([e for e in span.events if e.name == EVENT_RETRY_WAIT]) == len(result.waits_s)


def test_run_cli_virtual_writes_spans_and_a_summary(tmp_path) -> None:
    out = tmp_path / "run.jsonl"
    result = CliRunner().invoke(cli, ["run", "moflux-balanced", "--virtual", "--seed", "3", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert summary["mode"] == "virtual" and summary["arm"] == "lend" and summary["seed"] == 3
    assert summary["requests"] == len(get_scenario("moflux-balanced").workload(3).arrivals)
    services = {a["value"]["stringValue"] for line in out.read_text().splitlines()
                for rs in json.loads(line)["resourceSpans"] for a in rs["resource"]["attributes"] if a["key"] == "service.name"}
    assert {"restorelens-loadgen", "restorelens-gate", "restorelens-sim"} <= services


@pytest.mark.parametrize("args", [["run", "nope", "--virtual", "--out", "x"], ["run", "moflux-balanced", "--virtual"],
                                  ["run", "moflux-balanced", "--virtual", "--arm", "greedy", "--out", "x"]])
def test_run_cli_errors_are_one_line(args) -> None:
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and result.output.startswith("Error: ") and "Traceback" not in result.output


def _play_one_restoration(admission, first_byte_after_s: float) -> list[tuple]:
    """A loan out when interactive returns; the returning request's first byte ``first_byte_after_s``
    after t0. Returns each episode as (budget, over budget, first byte after t0)."""
    from restorelens.gate import RequestSize

    size = RequestSize(10, 10)  # 0.52 s at the lenders' priors: lent within a 1 s budget
    own = admission.request("b1", "batch", 0.0, size=size)
    loan = admission.request("b2", "batch", 0.0, size=size)
    returning = admission.request("i1", "interactive", 5.0, size=size)
    assert (own.slot, loan.slot, returning.slot) == ("own", "borrowed", "own")
    admission.first_byte(returning, 5.0 + first_byte_after_s)
    for grant in (loan, returning, own):
        admission.release(grant, 5.0 + first_byte_after_s + 1.0)
    return [(e.budget_s, e.over_budget, e.first_byte_seen_s - e.t0_s) for e in admission.episodes]


@pytest.mark.parametrize(("first_byte_after_s", "over_budget"), [(0.5, False), (2.0, True)])
def test_a_virtual_run_judges_an_episode_over_budget_as_the_live_gate_does(
        first_byte_after_s: float, over_budget: bool) -> None:
    # The live app's gate and the virtual runner's, both built from the scenario's settings; before
    # the gate had one assembly only the live app's metrics gave the tracker its budget.
    from restorelens.experiments.moflux.virtual import VIRTUAL_UPSTREAM_URL, VirtualMofluxRun
    from restorelens.gate import create_gate_app

    scenario = get_scenario("moflux-balanced", "lend-budget")
    virtual = VirtualMofluxRun(scenario, seed=1).admission
    settings = scenario.gate_settings(VIRTUAL_UPSTREAM_URL, scenario.workload(1).model)
    live = create_gate_app(dataclasses.replace(settings, tracing=False)).state.admission
    judged = _play_one_restoration(live, first_byte_after_s)
    assert judged == [(scenario.restore_budget_s, over_budget, first_byte_after_s)]
    assert _play_one_restoration(virtual, first_byte_after_s) == judged
