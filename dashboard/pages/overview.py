"""Overview: how many restorations, where each one's time went, how their events are distributed,
which break the limits."""

import streamlit as st

from restorelens.dashboard import figures, palette, queries, ui

st.title("Recovery overview")
path = ui.current_store()
settings = ui.settings()
limits = ui.limits_in_use()
with st.sidebar:
    include_requests = st.toggle("Request latencies too (slower on large stores)", key="requests")
result = ui.guarded(queries.overview, path, ui.stamp(path), limits, include_requests, settings.selection,
                     settings.method)

counts = {row["what"]: row for row in result.counts.iter_rows(named=True)}
columns = st.columns(len(counts))
for column, (what, row) in zip(columns, counts.items(), strict=True):
    column.metric(what, row["count"], help=f"censored {row['censored']}, clock skew {row['clock_skew']}")
nothing = all(row["count"] == 0 for row in counts.values())
if nothing:
    st.info("No restoration episodes (lending or wake) in the runs shown; the Engine page shows every "
            "request an engine served, with or without a gate.")

episodes = (
    ("lending", counts["lending episodes"]["count"], result.lending_segments, result.lending_curves,
     figures.LENDING_TITLES, "policy", palette.POLICIES, result.lending_stats),
    ("wake", counts["wake episodes"]["count"], result.wake_segments, result.wake_curves,
     figures.WAKE_TITLES, "wake path", palette.WAKE_PATHS, result.wake_stats),
)
for kind, total, segments, curves, titles, group, known, stats in episodes:
    if total:
        ui.time_bars(segments, total, kind, f"overview-{kind}-bars")

# the verdicts `restorelens check` gives on the same rows: a limit with no values to rest on is
# not said to hold, on an empty store too
st.subheader("Limits")
for violation in result.violations:
    st.error(f"Limit broken: {ui.plain(violation)}")
for unchecked in result.unchecked:
    st.warning(f"Nothing to check: {ui.plain(unchecked)} (`restorelens check` fails it unless --allow-empty)")
if not result.limits:
    st.success("No limits configured.")
elif len(result.held) == len(result.limits):
    st.success("Every limit holds: " + ui.plain(", ".join(result.held)))
elif result.held:
    st.success("Holds: " + ui.plain(", ".join(result.held)))
if not result.breaches.is_empty():
    st.caption("Episodes and requests whose own value is over a limit (open them on their page):")
    ui.table(result.breaches)
if nothing and not include_requests:
    st.stop()

for kind, total, segments, curves, titles, group, known, stats in episodes:
    if not total or curves.is_empty():
        continue
    st.subheader(f"{kind.capitalize()} episodes per {group}")
    ui.show_figure(figures.engine_distributions(curves, titles, (group,), known=known, what="episodes"),
                   f"overview-{kind}-ecdf", f"overview-{kind}-ecdf")
    st.caption(f"Percentiles: {settings.method}.")
    ui.table(stats)
if include_requests:
    st.subheader("Requests by class and policy")
    st.caption(f"Percentiles: {settings.method}.")
    ui.table(result.request_stats)
