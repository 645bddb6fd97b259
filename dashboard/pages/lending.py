"""Lending episodes: demand returned → grant restored → borrowed drained → engine scheduled → first token."""

import polars as pl
import streamlit as st

from restorelens.dashboard import queries, timelines, ui
from restorelens.dashboard.labels import UNNAMED_POLICY, shown, with_unnamed_policy
from restorelens.dashboard.segments import time_segments

st.title("Lending episodes")
path = ui.current_store()
stamp = ui.stamp(path)
episodes = ui.guarded(queries.lending_episodes, path, stamp, ui.settings().selection)
if episodes.is_empty():
    st.info("No lending episodes in the runs shown: they appear when a gate lends protected capacity "
            "(policy `lend`) and the protected class returns.")
    st.stop()

st.subheader("Where the time went")
ui.time_bars(time_segments(episodes, "lending"), episodes.height, "lending", "lending-bars")

st.subheader("One episode")
labels = [f"{row['t0']:%H:%M:%S.%f} · {row['policy'] or UNNAMED_POLICY} · run {shown(row['run_id'])} · "
          f"seed {shown(row['seed'])}" + (" · censored" if row["censored"] else "")
          for row in episodes.iter_rows(named=True)]
span_id = ui.pick("episode", episodes["span_id"].to_list(), labels, "Episode")
detail = ui.guarded(queries.lending_detail, path, stamp, span_id)
episode = detail.episode

ui.episode_metrics(episode, (("grant restored", "grant_restore_s"), ("borrowed drained", "drain_s"),
                             ("engine scheduled after grant", "engine_schedule_s"), ("first token", "ttft_s")))
ui.schedule_caption(episode, "the grant was restored")
ui.show_figure(timelines.lending_timeline(detail), "lending-timeline", "lending-episode")
ui.engine_pressure(path, stamp, episode, detail.events, "lending-pressure")

st.subheader("All lending episodes")
ui.table(with_unnamed_policy(episodes.drop(pl.selectors.ends_with("_id") - pl.selectors.by_name("run_id"))))
