"""Wake episodes: first 503 and its hint, wake, readiness, every retry, success and first token."""

import streamlit as st

from restorelens.dashboard import queries, timelines, ui
from restorelens.dashboard.labels import shown
from restorelens.dashboard.segments import time_segments

st.title("Wake episodes")
path = ui.current_store()
stamp = ui.stamp(path)
episodes = ui.guarded(queries.wake_episodes, path, stamp, ui.settings().selection)
if episodes.is_empty():
    st.info("No wake episodes in the runs shown: they appear when a request meets a sleeping model "
            "(a `modelclaim.wake` span linked to its first 503).")
    st.stop()

st.subheader("Where the time went")
ui.time_bars(time_segments(episodes, "wake"), episodes.height, "wake", "wake-bars")

st.subheader("One episode")
labels = [f"{row['t0']:%H:%M:%S} · {shown(row['model'])} · {shown(row['wake_path'])} · "
          f"hint {shown(row['retry_after_s'])} s"
          + (" · censored" if row["censored"] else "") for row in episodes.iter_rows(named=True)]
span_id = ui.pick("episode", episodes["span_id"].to_list(), labels, "Episode")
detail = ui.guarded(queries.wake_detail, path, stamp, span_id)
episode = detail.episode

ui.episode_metrics(episode, (("Retry-After hint", "retry_after_s"), ("engine ready", "ready_s"),
                             ("overshoot", "overshoot_s"), ("attempts", "attempts"), ("first token", "total_s")))
ui.schedule_caption(episode, "the successful attempt started")
ui.show_figure(timelines.wake_timeline(detail), "wake-timeline", "wake-episode")
ui.engine_pressure(path, stamp, episode, detail.events, "wake-pressure")

st.subheader("Hint vs actual readiness")
ui.show_figure(timelines.hint_scatter(episodes), "hint-scatter", "wake-hint-vs-ready")
ui.table(episodes)
