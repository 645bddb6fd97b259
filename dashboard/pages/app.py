"""The dashboard's entrypoint (``streamlit run``): page setup, the span source, the navigation.

It sits beside the page scripts rather than above them on purpose: Streamlit treats a ``pages/``
folder next to the main script as a legacy multipage app and then never runs ``st.navigation``.
"""

from pathlib import Path

import streamlit as st

from restorelens.dashboard import ui

PAGES = Path(__file__).resolve().parent

st.set_page_config(page_title="restorelens recovery dashboard", page_icon="⏱", layout="wide")
ui.source_picker()
ui.settings_sidebar()
overview = st.Page(PAGES / "overview.py", title="Overview", url_path="overview")


def _root() -> None:
    # Every page has a path of its own, the overview's included (/overview), so the root only
    # forwards there: a default page would be served at / alone and /overview would not exist.
    st.switch_page(overview)


navigation = st.navigation([
    st.Page(_root, title="restorelens", url_path="home", default=True, visibility="hidden"),
    overview,
    st.Page(PAGES / "lending.py", title="Lending episodes", url_path="lending"),
    st.Page(PAGES / "wakes.py", title="Wake episodes", url_path="wakes"),
    st.Page(PAGES / "engine.py", title="Engine", url_path="engine"),
    st.Page(PAGES / "policies.py", title="Policy comparison", url_path="policies"),
    st.Page(PAGES / "lifecycle.py", title="Lifecycle", url_path="lifecycle"),
    st.Page(PAGES / "traces.py", title="Trace explorer", url_path="traces"),
])
navigation.run()
