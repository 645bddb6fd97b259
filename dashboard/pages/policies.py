"""Policy comparison: SLO goodput and batch goodput per policy × workload, and paired differences."""

import streamlit as st

from restorelens.dashboard import figures, queries, ui

st.title("Policy comparison")
path = ui.current_store()
result = ui.guarded(queries.policies, path, ui.stamp(path))
if result.summary.is_empty():
    st.info("No requests with a policy and workload in this store: run `restorelens run SCENARIO` per arm.")
    st.stop()

st.caption("Interactive SLO goodput: interactive requests that met TTFT ≤ 5 s and e2e ≤ 30 s per second "
           "(a rejection counts zero). Batch goodput: batch requests that arrived while capacity could be "
           "borrowed and completed, per second.")
ui.show_figure(figures.goodput_strip(result.summary), "goodput", "policy-goodput")
st.dataframe(result.summary, hide_index=True)

st.subheader("Paired differences (same workload and seed)")
baselines = sorted(set(result.paired["baseline"].drop_nulls().to_list()))
if not baselines:
    st.caption("No workload × seed was run under two policies.")
    st.stop()
default = "static" if "static" in baselines else baselines[0]
baseline = st.selectbox("Baseline", baselines, index=baselines.index(default), key="baseline")
ui.show_figure(figures.paired_strip(result.paired, baseline), "paired", f"paired-vs-{baseline}")
st.dataframe(result.paired.filter(result.paired["baseline"] == baseline), hide_index=True)
