"""Trace explorer: find a request or trace, see its waterfall across client, gate and engine (one
row per span), and follow the span links between a request and the restoration or wake it started."""

import streamlit as st

from restorelens.analysis.report import with_no_gate
from restorelens.dashboard import queries, ui
from restorelens.dashboard.waterfall import (LINKING_SPANS, MAX_WATERFALL_SPANS, MIN_BAR_SHARE, explorer_link,
                                             linked, waterfall, with_status)

st.title("Trace explorer")
path = ui.current_store()
stamp = ui.stamp(path)

wanted = st.query_params.get("trace") or st.query_params.get("request") or ""
query = st.text_input("Request id or trace id", value=wanted, key="trace-search").strip()
if not query:
    st.info("Enter a request id (restore.request_id) or a trace id; the slowest requests are listed below.")
    ui.table(with_no_gate(ui.guarded(queries.recent_requests, path, stamp, 50, ui.settings().selection)))
    st.stop()

trace_ids = ui.guarded(queries.traces_for_request, path, stamp, query)
trace_id = trace_ids[0] if trace_ids else query.lower()
if len(trace_ids) > 1:
    trace_id = st.selectbox("Traces holding this request", trace_ids, key="trace-choice")
spans = ui.guarded(queries.trace, path, stamp, trace_id)
if spans.is_empty():
    st.info(f"No request or trace {ui.plain(repr(query))} in this store.")
    st.stop()

st.query_params["trace"] = trace_id
services = ", ".join(sorted({str(name) for name in spans["service_name"]}))
st.caption(ui.plain(f"trace {trace_id} · {spans.height} spans · services: {services}"))
ui.show_figure(waterfall(spans.head(MAX_WATERFALL_SPANS)), "waterfall", f"trace-{trace_id[:12]}")
if spans.height > MAX_WATERFALL_SPANS:
    st.caption(f"The first {MAX_WATERFALL_SPANS} of {spans.height} spans in tree order are drawn; the table lists "
               "them all.")
st.caption(f"One row per span in tree order, each attempt on its own row. Spans answered 503 or 429 are drawn in "
           f"the status colour the legend names, the others in their service's colour. A bar is at least "
           f"{MIN_BAR_SHARE:.1%} of the trace wide: the hover shows its true duration. Ticks are span events.")


def _trace_link(linked_trace_id: object) -> str:
    """A markdown link to the explorer on that trace, or the id as plain text when it is not a trace id."""
    url = explorer_link(linked_trace_id)
    return f"[{str(linked_trace_id).lower()}]({url})" if url else ui.plain(linked_trace_id)


links = linked(spans)
linking = ui.guarded(queries.linked_from, path, stamp, trace_id)
if not links.is_empty() or not linking.is_empty():
    st.subheader("Linked traces")
    lines = [f"- {ui.plain(row['name'])} span {ui.plain(row['span_id'])} links to the request trace "
             f"{_trace_link(row['linked_trace_id'])} (its span {ui.plain(row['linked_span_id'])})"
             for row in links.iter_rows(named=True)]
    lines += [f"- linked from {ui.plain(row['name'])} span {ui.plain(row['span_id'])} in trace "
              f"{_trace_link(row['trace_id'])} (it links to this trace's span {ui.plain(row['linked_span_id'])})"
              for row in linking.iter_rows(named=True)]
    st.markdown("\n".join(lines))
    st.caption(ui.plain(f"Span links of {' and '.join(LINKING_SPANS)} spans, both ways: open a trace id to "
                        "see its waterfall."))

ui.table(with_status(spans).drop("attributes"))
