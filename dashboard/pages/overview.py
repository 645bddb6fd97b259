"""Overview: how many restorations, how long each of their events took, which break the limits."""

import streamlit as st

from restorelens.dashboard import figures, queries, ui

st.title("Recovery overview")
path = ui.current_store()
limits = ui.limits_in_use()
with st.sidebar:
    include_requests = st.toggle("Request latencies too (slower on large stores)", key="requests")
result = ui.guarded(queries.overview, path, ui.stamp(path), limits, include_requests)

counts = {row["what"]: row for row in result.counts.iter_rows(named=True)}
columns = st.columns(len(counts))
for column, (what, row) in zip(columns, counts.items(), strict=True):
    column.metric(what, row["count"], help=f"censored {row['censored']}, clock skew {row['clock_skew']}")
nothing = all(row["count"] == 0 for row in counts.values())
if nothing:
    st.info("This store holds no restoration episodes yet (lending or wake); the Engine page shows every "
            "request an engine served, with or without a gate.")
    # the limits still hold or break on any view they name that has rows (engine.* on engine traffic)
    if not any(result.limited_rows.values()):
        st.stop()

st.subheader("Limits")
if result.violations:
    for violation in result.violations:
        st.error(f"Limit broken: {ui.plain(violation)}")
else:
    st.success("Every limit holds: " + ui.plain(", ".join(result.limits)) if result.limits else "No limits configured.")
if not result.breaches.is_empty():
    st.caption("Episodes and requests whose own value is over a limit (open them on their page):")
    st.dataframe(result.breaches, hide_index=True)
if nothing:
    st.stop()

sections = (
    ("Lending episodes by policy", result.lending_stats, ["policy"], "overview-lending"),
    ("Wake episodes by model and wake path", result.wake_stats, ["model", "wake_path"], "overview-wakes"),
)
if include_requests:
    sections += (("Requests by class and policy", result.request_stats, ["traffic_class", "policy"],
                  "overview-requests"),)
for title, stats, groups, key in sections:
    st.subheader(title)
    if stats.is_empty() or int(stats["count"].sum()) == 0:
        st.caption("No data found.")
        continue
    ui.show_figure(figures.statistics_dots(stats, groups, f"{title}: p50, p95, max (s)"), key, key)
    st.dataframe(stats, hide_index=True)
