"""Policy page: the MoFlux study's table, scored as ``restorelens experiment`` scores it.

The frontier per scenario (one scenario per workload), the gates H1-H3 as paired differences per
seed, the interactive TTFT p95 of the contention window, and the per-run table; the data and
figures are ``dashboard/frontier.py``'s, under the sidebar's SLO and run filter.
"""

import polars as pl
import streamlit as st

from restorelens.dashboard import frontier, queries, ui

st.title("Policy comparison")
settings = ui.settings()
path = ui.current_store()
page = ui.guarded(queries.policy_page, path, ui.stamp(path), settings.selection, settings.slo)
if page.empty:
    st.info("No requests with a policy and workload in this store: run `restorelens experiment SCENARIO` "
            "(or `restorelens run SCENARIO` per arm).")
    st.stop()

slo = settings.slo
st.caption(f"SLO in use: TTFT ≤ {slo.ttft_s:g} s and end-to-end ≤ {slo.e2e_s:g} s (set in the sidebar). "
           "Interactive SLO goodput: interactive requests of the contention window that met the SLO, per second "
           "(a rejection counts zero). Batch borrow goodput: batch requests of the borrow window that completed, "
           "per second. Medians and p95s are nearest-rank, as the study reports them, whatever the sidebar's "
           "percentile method. One scenario per workload.")

st.subheader("Frontier")
ui.show_figure(frontier.frontier_figure(page), "frontier", "policy-frontier")
if not page.dominance.is_empty():
    st.caption("Arms beyond the study's: does each one's median point dominate every study arm's "
               "(both goodputs at least the best of fcfs, priority, static and lend)?")
    ui.table(page.dominance)

st.subheader("The study's gates")
st.caption("Each gate is a paired difference per seed (same workload and seed), and holds when its nearest-rank "
           "median over the seeds reaches the threshold. n/a: one of the two arms was not played.")
ui.show_figure(frontier.gates_figure(page), "gates", "policy-gates")
ui.table(page.gates.select("scenario", "gate", "label", pl.col("per_seed").alias("per seed"),
                           pl.col("median_rps").alias("median (req/s)"), pl.col("verdict").alias("holds?")))

st.subheader("Interactive TTFT p95 in the contention window")
ui.show_figure(frontier.ttft_figure(page, slo), "ttft", "policy-ttft")

st.subheader("Runs")
ui.table(page.runs)
