"""Wake episodes: first 503 and its hint, wake, readiness, every retry, success and first token."""

import polars as pl
import streamlit as st

from restorelens.analysis.report import phase_statistics
from restorelens.dashboard import queries, timelines, ui
from restorelens.dashboard.labels import shown
from restorelens.dashboard.segments import time_segments

#: How the episode's attempts were tied to its first 503 (docs/analysis.md, "Attempts any client made").
LINKS = {
    "trace": "Attempts linked by their trace: one client's, for certain.",
    "request_key": "Attempts linked by the client's own request key (x-request-id or idempotency-key).",
    "client": "Attempts linked by inference: the same sender (credential hash or address) and model, within "
              "the hint's window after each refusal. Two clients behind one address could be mixed up.",
    "none": "One attempt: held or served at once, or refused with no later request linked to it.",
}

st.title("Wake episodes")
path = ui.current_store()
stamp = ui.stamp(path)
episodes = ui.guarded(queries.wake_episodes, path, stamp, ui.settings().selection)
if episodes.is_empty():
    st.info("No wake episodes in the runs shown: they appear when a request meets a sleeping model "
            "(a `modelclaim.wake` span linked to its first 503).")
    st.stop()

phases = ui.guarded(queries.wake_phases, path, stamp, ui.settings().selection)
st.subheader("Where the time went")
ui.time_bars(time_segments(episodes, "wake", phases=phases), episodes.height, "wake", "wake-bars")
if not phases.is_empty():
    st.subheader("Engine startup phases")
    st.caption("The engine's own startup spans (children of the wake span in its trace), per span name: the "
               "duration's count, p50, p95 and max (s); then the time from process start to engine ready "
               "outside every top-level span (imports before them, API bring-up after), the top-level spans' "
               "union and its share of that time. Limit one with `--max 'wake.phase[NAME].p95=S'`.")
    ui.table(phase_statistics(phases, episodes, ui.settings().method))

st.subheader("One episode")
labels = [f"{row['t0']:%H:%M:%S} · {shown(row['model'])} · {shown(row['wake_path'])} · "
          f"hint {shown(row['retry_after_s'])} s · {shown(row['attempt_link'])}"
          + (" · censored" if row["censored"] else "") for row in episodes.iter_rows(named=True)]
span_id = ui.pick("episode", episodes["span_id"].to_list(), labels, "Episode")
detail = ui.guarded(queries.wake_detail, path, stamp, span_id)
episode = detail.episode

ui.episode_metrics(episode, (("Retry-After hint", "retry_after_s"), ("engine ready", "ready_s"),
                             ("overshoot", "overshoot_s"), ("attempts", "attempts"), ("first token", "total_s")))
if episode.get("attempt_link") in LINKS:
    st.caption(LINKS[episode["attempt_link"]])
ui.schedule_caption(episode, "the successful attempt started")
ui.show_figure(timelines.wake_timeline(detail), "wake-timeline", "wake-episode")
own = phases.filter(pl.col("wake_span_id") == span_id)
if not own.is_empty():
    st.caption(f"This wake's engine startup spans (indented by depth; seconds from process start): "
               f"{shown(episode['engine_spans_s'])} s covered, {shown(episode['outside_engine_spans_s'])} s outside "
               f"the engine's spans" + (f", clock skew {episode['engine_skew_s']:.3f} s (spans outside process "
                                        "start → ready)" if episode["engine_skew_s"] else "") + ".")
    ui.table(own.select((pl.lit("· ").repeat_by(pl.col("depth")).list.join("") + pl.col("name")).alias("phase"),
                        "start_s", "end_s", "duration_s", "adds_s", "orphan", "engine_instance", "span_id"))
ui.engine_pressure(path, stamp, episode, detail.events, "wake-pressure")

st.subheader("Hint vs actual readiness")
ui.show_figure(timelines.hint_scatter(episodes), "hint-scatter", "wake-hint-vs-ready")
ui.table(episodes)
