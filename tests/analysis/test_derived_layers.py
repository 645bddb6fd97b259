"""The store's derived typed tables on awkward spans: stored by the collector, equal to the layers."""

from __future__ import annotations

import math
from pathlib import Path

from builders import Traces

from restorelens import spans as sc
from restorelens.analysis import Analysis
from restorelens.analysis.layers import DERIVED_LAYERS
from restorelens.collector import SpanStore
from restorelens.analysis.derived import fresh_layers


def awkward_traces() -> Traces:
    """Values another emitter may send: latencies that are no number or do not fit a timestamp,
    an engine span without vLLM's latency attributes, Retry-After as a plain string."""
    traces = Traces()
    for time_in_queue in (math.nan, math.inf, 1e20):
        trace = traces.new_trace()
        client = traces.client_request(trace, 0.0, 2.0)
        attempt = traces.attempt(trace, client, 0.0, 2.0, status=200)
        traces.engine(trace, attempt, 0.5, time_in_queue_s=time_in_queue, ttft_s=0.25, e2e_s=1.0)
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 2.0)
    attempt = traces.attempt(trace, client, 0.0, 2.0, status=200)
    traces.span(trace, sc.SPAN_LLM_REQUEST, 0.5, 1.5, parent=attempt, kind="Server")  # no latencies
    for header in ("Wed, 21 Oct 2015 07:28:00 GMT", "10", "[not json", FAR_FUTURE):
        trace = traces.new_trace()
        client = traces.client_request(trace, 0.0, 12.0)
        traces.span(trace, sc.SPAN_HTTP_POST, 0.0, 0.125, parent=client, kind="Client",
                    attributes={sc.ATTR_HTTP_STATUS_CODE: 503, sc.ATTR_HTTP_RETRY_AFTER: header})
    # the gate's answer carrying the same date
    trace = traces.new_trace()
    client = traces.client_request(trace, 0.0, 1.0)
    attempt = traces.attempt(trace, client, 0.0, 1.0, status=503)
    traces.span(trace, sc.SPAN_GATE_REQUEST, 0.0625, 0.125, parent=attempt, kind="Server", service="gate",
                attributes={sc.ATTR_HTTP_STATUS_CODE: 503, sc.ATTR_HTTP_RETRY_AFTER: FAR_FUTURE})
    return traces


#: An HTTP-date past what nanoseconds since 1970 can hold in 64 bits (year 2262).
FAR_FUTURE = "Fri, 01 Jan 3000 00:00:00 GMT"


def test_awkward_spans_are_stored_with_their_derived_rows(tmp_path: Path) -> None:
    traces = awkward_traces()
    with SpanStore(tmp_path / "s.duckdb") as store:
        assert store.insert_tables([traces.arrow()]) == [len(traces.spans)]
        assert fresh_layers(store.connection()) == frozenset(DERIVED_LAYERS)
    with Analysis.open(tmp_path / "s.duckdb") as analysis:
        attempts = analysis.attempts()
        requests = analysis.requests()
        gate = analysis.view("gate_requests")
    # the unusable latencies give no instant; the spans and their requests are all there
    assert requests.height == 9
    assert requests.filter(requests["engine_schedule_s"].is_not_null()).height == 0
    # a plain-string Retry-After is read as it is; a broken JSON list gives no value, not an error;
    # a date too far ahead for nanoseconds gives no seconds
    raw = attempts.filter(attempts["status_code"] == 503).sort("retry_after_raw", nulls_last=True)
    assert raw["retry_after_raw"].to_list() == ["10", FAR_FUTURE, "Wed, 21 Oct 2015 07:28:00 GMT", None, None]
    assert raw["retry_after_s"][0] == 10.0 and raw["retry_after_s"][1] is None
    assert raw["retry_after_s"][2] < 0  # a date in the past
    assert gate.height == 1 and gate["retry_after_raw"][0] == FAR_FUTURE and gate["retry_after_s"][0] is None


def test_an_analysis_on_the_writers_own_connection_does_not_catch_its_inserts() -> None:
    traces = awkward_traces()
    store = SpanStore(":memory:")
    con = store.connection()
    Analysis(con, use_derived=False)  # temporary views named like the derived tables
    assert store.insert_tables([traces.arrow()]) == [len(traces.spans)]
    assert fresh_layers(con) == frozenset(DERIVED_LAYERS)
    stored = Analysis(con).requests()
    computed = Analysis(con, use_derived=False).requests()
    assert stored.equals(computed) and stored.height == 9
