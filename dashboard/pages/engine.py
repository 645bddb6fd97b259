"""Engine: every request an engine served, gate or not: queue, schedule delay, TTFT, prefill, decode."""

import streamlit as st

from restorelens import spans as sc
from restorelens.analysis.report import NO_GATE
from restorelens.dashboard import figures, queries, ui
from restorelens.dashboard.labels import NO_CLASS

st.title("Engine")
path = ui.current_store()
stamp = ui.stamp(path)
settings = ui.settings()
policies = ui.guarded(queries.engine_policies, path, stamp, settings.selection)
if not policies:
    st.info("No engine requests in this store: they appear when an engine's `llm_request` spans are stored "
            "(vLLM started with `--otlp-traces-endpoint`), with or without a gate in front of it.")
    st.stop()

left, right = st.columns([4, 1])
chosen = left.multiselect("Policies", list(policies), default=list(policies), key="engine-policies",
                          help=f"{NO_GATE!r}: requests that passed no gate.")
by_policy = right.toggle("Split by policy", key="engine-by-policy")
if not chosen:
    st.info("Choose at least one policy.")
    st.stop()
summary = ui.guarded(queries.engine_summary, path, stamp, tuple(chosen), by_policy, settings.selection,
                     settings.method)

columns = st.columns(4)
columns[0].metric("engine requests", summary.requests)
columns[1].metric("through a gate", summary.via_gate)
columns[2].metric("no gate", summary.requests - summary.via_gate)
columns[3].metric("clock skew", summary.clock_skew, help="a negative gap between the attempt and the engine")

points = summary.points
st.caption(
    "Queue (vLLM's time in queue), TTFT, prefill and decode are vLLM's, from the engine's arrival. The "
    "schedule delay is engine scheduled − the start of the attempt that led to the engine (the client's "
    "call, through a gate or not; `attempt_source` says which). vLLM's spans give the schedule instant as "
    "an interval: lower bound arrival + time in queue, upper bound arrival + TTFT − prefill. The point "
    f"value `schedule_delay_s` is the upper bound for {points['upper']} requests and the lower bound for "
    f"{points['lower']} (no prefill time, or the two contradict each other)."
)
if summary.unclassified:
    # the mapping this store is read with (--label, --config): a mapped attribute can be missing too
    mapped = ui.guarded(queries.store_reader, path).labels.get("traffic_class")
    if mapped is None:
        st.caption(f"{summary.unclassified} requests carry no traffic class ({NO_CLASS!r}): map your own "
                   "attribute with `restorelens dashboard --label traffic_class=ATTR`.")
    else:
        st.caption(f"{summary.unclassified} requests carry no traffic class ({NO_CLASS!r}): the mapped "
                   f"attribute {ui.plain(mapped)} ({ui.plain(f'traffic_class = {mapped}')}, from --label or "
                   f"--config) is absent on them, and so is restorelens's own `{sc.ATTR_TRAFFIC_CLASS}`.")

titles = dict(figures.ENGINE_TITLES)
if points["lower"] == 0 or points["upper"] == 0:
    titles["schedule_delay_s"] += f" ({'upper' if points['lower'] == 0 else 'lower'} bound)"
else:
    titles["schedule_delay_s"] += f" (upper ×{points['upper']}, lower ×{points['lower']})"
group_names = [name.replace("_", " ") for name in summary.groups]
st.subheader(f"Per {' × '.join(group_names)}")
ui.show_figure(figures.engine_distributions(summary.curves, titles, group_names), "engine-distributions",
               "engine-distributions")
ui.table(summary.statistics)

st.subheader("Longest schedule delays")
st.caption("Open one in the Trace explorer by its trace id.")
ui.table(summary.slowest)
