"""Small Streamlit helpers the pages share: the store in use, guarded loads, charts with export,
and selections kept in the URL so a view can be shared."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import duckdb
import plotly.graph_objects as go
import streamlit as st

from restorelens.dashboard import data, queries, source
from restorelens.errors import RestorelensError

__all__ = ["current_store", "guarded", "limits_in_use", "pick", "show_figure", "source_picker", "stamp"]

T = TypeVar("T")

_STORE_KEY = "store_path"
_SOURCE_DB, _SOURCE_SAMPLES, _SOURCE_UPLOAD = "span store (--db)", "sample traces", "upload OTLP JSON(L)"


def source_picker() -> None:
    """Sidebar: choose the --db store, the sample traces or an uploaded file (entrypoint only)."""
    db = os.environ.get(source.DB_ENV)
    samples = source.sample_files()
    options = [name for name, present in ((_SOURCE_DB, db), (_SOURCE_SAMPLES, samples), (_SOURCE_UPLOAD, True))
               if present]
    with st.sidebar:
        choice = st.radio("Spans from", options, key="source")
        try:
            if choice == _SOURCE_DB:
                st.session_state[_STORE_KEY] = db
                st.caption(f"`{db}` (read-only)")
            elif choice == _SOURCE_SAMPLES:
                stamps = tuple(int(p.stat().st_mtime_ns) for p in samples)
                st.session_state[_STORE_KEY] = queries.sample_store(tuple(str(p) for p in samples), stamps)
                st.caption(f"{len(samples)} sample file(s)")
            else:
                upload = st.file_uploader("OTLP JSON or JSON lines", type=["json", "jsonl"], key="upload")
                if upload is None:
                    st.session_state.pop(_STORE_KEY, None)
                else:
                    payload = upload.getvalue()
                    digest = hashlib.sha256(payload).hexdigest()
                    st.session_state[_STORE_KEY] = queries.uploaded_store(digest, upload.name, payload)
        except (RestorelensError, duckdb.Error) as exc:
            st.session_state.pop(_STORE_KEY, None)
            st.error(_one_line(exc))


def current_store() -> str:
    """The store the pages read; without one, a message and the page stops (never a traceback)."""
    path = st.session_state.get(_STORE_KEY) or os.environ.get(source.DB_ENV)
    if not path:
        st.info("No spans yet: start with `restorelens dashboard --db FILE`, or pick the sample traces or "
                "upload an OTLP JSON(L) file in the sidebar.")
        st.stop()
    guarded(queries.store_reader, path)
    return str(path)


def stamp(path: str) -> tuple[int, ...]:
    return source.store_stamp(path)


def guarded(load: Callable[..., T], *args: Any) -> T:
    """Run a load; a user error or unreadable store becomes one red line and stops the page."""
    try:
        return load(*args)
    except (RestorelensError, duckdb.Error, OSError) as exc:
        st.error(_one_line(exc))
        st.stop()
        raise  # st.stop() raises; this keeps type checkers honest


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def limits_in_use() -> tuple[str, ...]:
    """Limits from the CLI (--max) or the defaults, editable in the sidebar (one per line)."""
    configured = source.configured_limits()
    default = "\n".join(configured if configured is not None else data.DEFAULT_LIMITS)
    with st.sidebar:
        text = st.text_area("Limits (view.metric.stat=max, one per line)", value=default, key="limits")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def show_figure(figure: go.Figure, key: str, file_stem: str) -> None:
    """The chart (the modebar's camera exports PNG) and a button exporting standalone HTML."""
    config = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": file_stem, "scale": 2}}
    st.plotly_chart(figure, key=key, config=config)
    st.download_button(
        "Download chart as HTML", data=lambda: figure.to_html(include_plotlyjs=True, full_html=True),
        file_name=f"{file_stem}.html", mime="text/html", key=f"{key}-html", on_click="ignore",
    )


def pick(param: str, values: Sequence[str], labels: Sequence[str], label: str) -> str:
    """A select box whose choice lives in ``st.query_params[param]`` (a link reopens the view)."""
    wanted = st.query_params.get(param)
    index = list(values).index(wanted) if wanted in values else 0
    if wanted is not None and wanted not in values:
        st.warning(f"{param} {wanted!r} from the link is not in this store; showing the first one.")
    names = dict(zip(values, labels, strict=True))
    chosen = st.selectbox(label, list(values), index=index, format_func=names.__getitem__, key=f"pick-{param}")
    st.query_params[param] = chosen
    return str(chosen)


def episode_metrics(episode: dict[str, Any], metrics: Sequence[tuple[str, str]]) -> None:
    """One metric per (label, column): seconds to 3 decimals, counts as integers, "—" when absent;
    then a warning when the episode is censored (it never completed)."""
    for column, (name, key) in zip(st.columns(len(metrics)), metrics, strict=True):
        value = episode.get(key)
        if value is None:
            text = "—"
        elif key.endswith("_s"):
            text = f"{value:.3f} s"
        else:
            text = str(value)
        column.metric(name, text)
    if episode.get("censored"):
        st.warning(f"Censored episode: {episode.get('censored_reason')}")
