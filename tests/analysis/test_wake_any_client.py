"""Wake episodes from the gate's own spans, whoever the client is: no restorelens client span, each
chain linked by trace, request key or the client's identity (gate_retry_links), written as OTLP/JSON
and loaded by the collector's loader into a DuckDB file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from builders import Traces
from click.testing import CliRunner

from restorelens import spans as sc
from restorelens.analysis import Analysis
from restorelens.analysis.sources import open_analysis
from restorelens.cli import cli as main
from restorelens.collector import load_paths
from restorelens.sources import parse_source

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def client(identity: str | None = None, *, key: str | None = None, traced: bool | None = False,
           retry_count: int | None = None) -> dict:
    return {sc.ATTR_GATE_CLIENT_IDENTITY: identity, sc.ATTR_GATE_CLIENT_REQUEST_KEY: key,
            sc.ATTR_GATE_CLIENT_TRACED: traced, sc.ATTR_GATE_CLIENT_RETRY_COUNT: retry_count}


def refused(traces: Traces, trace: str, start: float, *, status: int = 503, retry_after_s: float = 10.0,
            model: str = "tiny", **who: object) -> str:
    """The gate answers 503 (model asleep) or 429 (lending gate full) 0.0625 s after the request."""
    lifecycle = {"phase": "Sleeping", "reason": "EngineSleeping"} if status == 503 else {}
    return traces.gate_request(trace, "", start, start + 0.0625, status=status,
                               decision="not_ready" if status == 503 else "rejected", retry_after_s=retry_after_s,
                               model=model, extra=client(**who), **lifecycle)  # type: ignore[arg-type]


def served(traces: Traces, trace: str, start: float, *, model: str = "tiny", hold_s: float | None = None,
           released_s: float | None = None, **who: object) -> str:
    """The gate forwards it at once (or on ``released_s``, held), the engine takes it 1/32 s later."""
    through = released_s if released_s is not None else start
    extra = {**client(**who), sc.ATTR_GATE_HOLD_S: hold_s}  # type: ignore[arg-type]
    return traces.served_via_gate(trace, "", start, through + 1.0, upstream_s=through + 0.015625,
                                  engine_arrival_s=through + 0.03125, time_in_queue_s=0.0, ttft_s=0.25, e2e_s=0.5,
                                  model=model, extra=extra, hold_released_s=released_s)


def wake(traces: Traces, trace: str, first: str, *, ready_s: float | None, model: str = "tiny") -> str:
    return traces.model_wake(0.03125, ready_s if ready_s is not None else 30.0, link=(trace, first), model=model,
                             wake_path="in-place", wake_called_s=0.03125, ready_s=ready_s, observed_s=ready_s)


# --- the chains, each under its own identities, keys and traces (so one store can hold them all) --


def trace_chain(traces: Traces, tag: str) -> None:
    """503, 503, then 200 in one trace (a traced client); between them the same client's unrelated
    request in another trace, which the identity would have taken for the retry."""
    trace, who = traces.new_trace(), {"identity": f"key:{tag}", "traced": True}
    first = refused(traces, trace, 0.0, retry_after_s=2.0, **who)
    served(traces, traces.new_trace(), 1.0, **who)
    refused(traces, trace, 2.0, retry_after_s=2.0, **who)
    served(traces, trace, 4.5, **who)
    wake(traces, trace, first, ready_s=4.25)


def request_key_chain(traces: Traces, tag: str) -> None:
    """Untraced, the same x-request-id on both attempts; the same peer's other request between."""
    peer = f"peer:{tag}"
    trace = traces.new_trace()
    first = refused(traces, trace, 0.0, identity=peer, key=f"x-request-id:{tag}-1")
    served(traces, traces.new_trace(), 1.0, identity=peer, key=f"x-request-id:{tag}-2")
    served(traces, traces.new_trace(), 4.5, identity=peer, key=f"x-request-id:{tag}-1")
    wake(traces, trace, first, ready_s=4.25)


def interleaved_clients(traces: Traces, tag: str) -> None:
    """Clients a and b, untraced, each refused then served; b's answer comes between a's."""
    trace = traces.new_trace()
    first = refused(traces, trace, 0.0, identity=f"key:{tag}-a")
    refused(traces, traces.new_trace(), 0.125, identity=f"key:{tag}-b")
    served(traces, traces.new_trace(), 2.0, identity=f"key:{tag}-b")
    served(traces, traces.new_trace(), 4.5, identity=f"key:{tag}-a")
    wake(traces, trace, first, ready_s=1.75)


def late_retry(traces: Traces, tag: str) -> None:
    """Hint 2 s: the window is 2 + max(2, 10) s after the answer (0.0625 s); the retry comes at 20 s."""
    trace = traces.new_trace()
    first = refused(traces, trace, 0.0, retry_after_s=2.0, identity=f"key:{tag}")
    served(traces, traces.new_trace(), 20.0, identity=f"key:{tag}")
    wake(traces, trace, first, ready_s=1.0)


def held(traces: Traces, tag: str) -> None:
    """One request the gate held 4.5 s while the model woke, then forwarded (curl, no retry)."""
    trace = traces.new_trace()
    first = served(traces, trace, 0.0, hold_s=4.5, released_s=4.5, identity=f"peer:{tag}")
    wake(traces, trace, first, ready_s=4.25)


def two_models(traces: Traces, tag: str) -> None:
    """One client refused for two models; the other model's retry comes first."""
    trace, who = traces.new_trace(), {"identity": f"key:{tag}"}
    first = refused(traces, trace, 0.0, **who)
    refused(traces, traces.new_trace(), 0.125, model="big", **who)
    served(traces, traces.new_trace(), 2.0, model="big", **who)
    served(traces, traces.new_trace(), 4.5, **who)
    wake(traces, trace, first, ready_s=1.75)


def lending_429(traces: Traces, tag: str) -> None:
    """The OpenAI SDK's way: 503, then 429 (the lending gate full), then 200, retry counts 0, 1, 2;
    the same client's new request (retry count 0) between is no retry."""
    trace, who = traces.new_trace(), {"identity": f"key:{tag}"}
    first = refused(traces, trace, 0.0, retry_after_s=1.0, retry_count=0, **who)
    served(traces, traces.new_trace(), 1.0, retry_count=0, **who)
    refused(traces, traces.new_trace(), 2.0, status=429, retry_after_s=1.0, retry_count=1, **who)
    served(traces, traces.new_trace(), 3.5, retry_count=2, **who)
    wake(traces, trace, first, ready_s=1.75)


CHAINS: dict[str, Callable[[Traces, str], None]] = {
    "trace": trace_chain, "request_key": request_key_chain, "interleaved": interleaved_clients,
    "late": late_retry, "held": held, "two_models": two_models, "lending_429": lending_429,
}


def stored(traces: Traces, folder: Path) -> Path:
    """The spans as an OTLP/JSON file, loaded by the collector's loader into a DuckDB store."""
    spans = folder / "spans.jsonl"
    spans.write_text(traces.otlp_json() + "\n", encoding="utf-8")
    db = folder / "spans.duckdb"
    load_paths([spans], db)
    return db


def episode(name: str, folder: Path) -> dict:
    traces = Traces()
    CHAINS[name](traces, name)
    with Analysis.open(stored(traces, folder)) as analysis:
        frame = analysis.wake_episodes()
    assert frame.height == 1, frame
    return frame.row(0, named=True)


def served_by(row: dict, *, attempts: int, link: str, overshoot_s: float) -> None:
    assert (row["served"], row["censored"], row["censored_reason"]) == (True, False, None)
    assert (row["attempts"], row["attempt_link"], row["overshoot_s"]) == (attempts, link, overshoot_s)
    # the engine takes the successful attempt 1/32 s after it is let through, first token 1/4 s later
    assert row["engine_schedule_s"] == 0.03125
    assert row["total_s"] == overshoot_s + row["ready_s"] + 0.03125 + 0.25
    assert (row["clock_skew"], row["negative_gaps"]) == (False, [])


def test_a_traced_client_s_chain_is_its_trace(tmp_path: Path) -> None:
    row = episode("trace", tmp_path)
    served_by(row, attempts=3, link="trace", overshoot_s=0.25)
    assert (row["hint_s"], row["hint_error_s"], row["ready_s"]) == (2.0, 2.0 - 4.25, 4.25)


def test_a_request_key_links_past_the_same_client_s_other_requests(tmp_path: Path) -> None:
    served_by(episode("request_key", tmp_path), attempts=2, link="request_key", overshoot_s=0.25)


def test_two_clients_interleaved_each_retry_goes_to_its_own_503(tmp_path: Path) -> None:
    traces = Traces()
    interleaved_clients(traces, "x")
    with Analysis.open(stored(traces, tmp_path)) as analysis:
        row = analysis.wake_episodes().row(0, named=True)
        links = analysis.view("gate_retry_links")
    # a's retry at 4.5, not b's at 2.0 (which time order alone would give)
    served_by(row, attempts=2, link="client", overshoot_s=4.5 - 1.75)
    assert links.sort("wait_s")["wait_s"].to_list() == [2.0 - 0.1875, 4.5 - 0.0625]
    assert links["attempt_link"].to_list() == ["client", "client"]


def test_a_retry_outside_the_window_is_no_later_attempt(tmp_path: Path) -> None:
    row = episode("late", tmp_path)
    assert (row["censored"], row["censored_reason"], row["attempt_link"], row["attempts"]) == (
        True, "no_later_attempt", "none", 1)
    assert (row["ready_s"], row["hint_error_s"], row["overshoot_s"]) == (1.0, 1.0, None)


def test_a_held_request_is_a_served_episode(tmp_path: Path) -> None:
    row = episode("held", tmp_path)
    served_by(row, attempts=1, link="none", overshoot_s=0.25)
    assert (row["first_status"], row["hold_s"]) == (200, 4.5)


def test_one_client_s_two_models_are_two_chains(tmp_path: Path) -> None:
    served_by(episode("two_models", tmp_path), attempts=2, link="client", overshoot_s=4.5 - 1.75)


def test_a_429_from_the_lending_gate_is_one_more_attempt_and_a_fresh_request_none(tmp_path: Path) -> None:
    served_by(episode("lending_429", tmp_path), attempts=3, link="client", overshoot_s=3.5 - 1.75)


def test_the_gate_s_chain_gives_the_client_s_figures_on_the_sample_traces(tmp_path: Path) -> None:
    """The sample wakes' figures from restorelens's client spans, and again from the gate's spans
    alone once those are deleted (virtual time: the gate and the client share one clock)."""
    db = tmp_path / "samples.duckdb"
    load_paths(sorted(SAMPLES.glob("modelclaim-*.jsonl")), db)
    figures = ["span_id", "attempts", "ready_s", "hint_s", "hint_error_s", "overshoot_s", "engine_schedule_s",
               "total_s", "served", "censored", "attempt_link"]
    with Analysis.open(db) as analysis:
        expected = analysis.wake_episodes().select(figures)
    con = duckdb.connect(str(db))
    con.execute('delete from otel_traces where "SpanName" = $client or ("SpanName" = $post and "ServiceName" = $loadgen)',
                {"client": sc.SPAN_CLIENT_REQUEST, "post": sc.SPAN_HTTP_POST, "loadgen": "restorelens-loadgen"})
    con.close()
    with Analysis.open(db) as analysis:
        assert analysis.view("requests").is_empty()
        got = analysis.wake_episodes().select(figures)
    assert expected.height == 4 and set(expected["attempt_link"]) == {"trace"}
    assert got.equals(expected)


#: What each view is compared on: the links' integer keys are each engine's own 128-bit type.
KEYS = {"wake_episodes": ["span_id"], "gate_retry_links": ["status_code", "hint_s", "attempt_link", "wait_s"]}


@pytest.mark.parametrize("view", list(KEYS))
def test_chdb_links_and_episodes_are_duckdb_s(tmp_path: Path, view: str) -> None:
    traces = Traces()
    for name, chain in CHAINS.items():
        chain(traces, name)
    db = stored(traces, tmp_path)
    chdb = f"chdb:{tmp_path / 'chdb'}"
    assert CliRunner().invoke(main, ["export", "--db", str(db), "--to", chdb]).exit_code == 0
    frames = []
    for source in (str(db), chdb):
        with open_analysis(parse_source(source)) as analysis:
            frame = analysis.view(view)
            if view == "gate_retry_links":
                frame = frame.select("status_code", "hint_s", "attempt_link", "link_rank", "wait_s")
            frames.append(frame.sort(KEYS[view], nulls_last=True))
    assert frames[0].height == {"wake_episodes": 7, "gate_retry_links": 10}[view]
    assert frames[1].equals(frames[0])
