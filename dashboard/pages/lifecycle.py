"""Lifecycle: each model's ModelClaim phases per run and pod over time, and the memory its pods held."""

import streamlit as st

from restorelens.dashboard import lifecycle, queries, ui

st.title("Model lifecycle")
path = ui.current_store()
intervals = ui.guarded(queries.lifecycle_intervals, path, ui.stamp(path), ui.settings().selection)
if intervals.is_empty():
    st.info("No lifecycle states in this store: they appear when the gate drives models "
            "(`modelclaim.state` spans).")
    st.stop()

drawn = intervals.sort("start").tail(lifecycle.MAX_INTERVALS)
if drawn.height < intervals.height:
    st.caption(f"The latest {drawn.height} of {intervals.height} states are drawn (narrow the runs in the sidebar); "
               "the table lists them all.")
ui.show_figure(lifecycle.lifecycle_swimlanes(drawn), "lifecycle", "model-lifecycle")
if lifecycle.carries_memory(drawn):
    ui.show_figure(lifecycle.memory_over_time(drawn), "lifecycle-memory", "model-memory")
    st.caption("GPU memory and host RAM each pod held, summed over its models' states "
               "(`modelclaim.gpu_bytes`, `modelclaim.host_ram_bytes`): level-1 sleep keeps the weights in host RAM, "
               "which AIBrix does not account for.")
else:
    st.caption("No memory chart: no `modelclaim.state` span in this store carries `modelclaim.gpu_bytes` or "
               "`modelclaim.host_ram_bytes` (the gate's lifecycle adds them when it accounts the models' memory).")
ui.table(intervals)
