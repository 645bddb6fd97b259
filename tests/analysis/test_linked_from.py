"""linked_from.sql: from a request's trace back to the restoration and the wake that link to it."""

from __future__ import annotations

import duckdb
import pytest
from builders import Traces

from restorelens import spans as sc
from restorelens.analysis import load_query


def linked_from(con: duckdb.DuckDBPyConnection, trace_id: str) -> list[dict]:
    result = con.sql(load_query("linked_from").sql, params={"trace_id": trace_id})
    return [dict(zip(result.columns, row, strict=True)) for row in result.fetchall()]


@pytest.fixture(scope="module")
def store() -> tuple[duckdb.DuckDBPyConnection, dict[str, str]]:
    traces = Traces()
    request = traces.new_trace()
    client = traces.client_request(request, 0.0, 12.0, request_id="woken")
    first = traces.attempt(request, client, 0.0, 0.125, status=503, retry_after_header="10", retry_after_s=10.0)
    gate = traces.gate_request(request, first, 0.03125, 0.09375, status=503, decision="not_ready")
    traces.attempt(request, client, 10.0, 12.0, status=200, resend_count=1)
    wake = traces.model_wake(0.0625, 4.5, link=(request, gate))
    restore = traces.gate_restore(11.0, 11.5, link=(request, client))
    other = traces.new_trace()
    other_client = traces.client_request(other, 20.0, 21.0)
    traces.gate_restore(20.5, 21.0, link=(other, other_client))
    # a span of another name linking to the request is not a restoration or a wake
    traces.span(traces.new_trace(), "user.batch", 1.0, 2.0, links=[(request, client)])
    ids = {"request": request, "gate": gate, "client": client, "wake": wake, "restore": restore, "other": other}
    return traces.store(), ids


def test_a_request_trace_finds_the_wake_and_the_restoration_that_link_to_it(
        store: tuple[duckdb.DuckDBPyConnection, dict[str, str]]) -> None:
    con, ids = store
    rows = linked_from(con, ids["request"])
    assert [(row["name"], row["span_id"], row["linked_span_id"]) for row in rows] == [
        (sc.SPAN_MODELCLAIM_WAKE, ids["wake"], ids["gate"]),
        (sc.SPAN_GATE_RESTORE, ids["restore"], ids["client"]),
    ]
    (wake_trace,) = con.execute('select "TraceId" from otel_traces where "SpanId" = ?', [ids["wake"]]).fetchall()[0]
    assert rows[0]["trace_id"] == wake_trace != ids["request"]
    assert rows[0]["start"] < rows[1]["start"]  # oldest first


def test_each_trace_finds_only_the_spans_linking_to_it(store: tuple[duckdb.DuckDBPyConnection, dict[str, str]]) -> None:
    con, ids = store
    assert [row["name"] for row in linked_from(con, ids["other"])] == [sc.SPAN_GATE_RESTORE]
    assert linked_from(con, "0" * 32) == []
    assert load_query("linked_from").parameters == ("trace_id",)
