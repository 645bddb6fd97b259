"""Trace explorer: find a request or trace, see its waterfall across client, gate and engine."""

import streamlit as st

from restorelens.dashboard import data, figures, queries, ui

st.title("Trace explorer")
path = ui.current_store()
stamp = ui.stamp(path)

wanted = st.query_params.get("trace") or st.query_params.get("request") or ""
query = st.text_input("Request id or trace id", value=wanted, key="trace-search").strip()
if not query:
    st.info("Enter a request id (restore.request_id) or a trace id; the slowest requests are listed below.")
    st.dataframe(data.with_no_gate(ui.guarded(queries.recent_requests, path, stamp)), hide_index=True)
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
ui.show_figure(figures.waterfall(spans), "waterfall", f"trace-{trace_id[:12]}")
st.dataframe(spans.drop("attributes"), hide_index=True)
