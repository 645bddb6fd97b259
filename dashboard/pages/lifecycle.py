"""Lifecycle: each model's ModelClaim states over time."""

import streamlit as st

from restorelens.dashboard import figures, queries, ui

st.title("Model lifecycle")
path = ui.current_store()
intervals = ui.guarded(queries.lifecycle_intervals, path, ui.stamp(path))
if intervals.is_empty():
    st.info("No lifecycle states in this store: they appear when the gate drives models "
            "(`modelclaim.state` spans).")
    st.stop()

ui.show_figure(figures.lifecycle_swimlanes(intervals), "lifecycle", "model-lifecycle")
st.caption("GPU and host memory are not accounted here: the span contract records no memory figures yet "
           "(level-1 sleep moves weights to host RAM that nobody accounts for).")
st.dataframe(intervals, hide_index=True)
