"""Small Streamlit helpers the pages share: the store in use, guarded loads, charts with export,
and selections kept in the URL so a view can be shared.

Streamlit renders markdown in st.error, st.info, st.caption and the like: text that a user or a
span store controls (file names, ids from the URL, service names, attribute values) goes through
``plain`` first, so it shows as written and cannot become a link or an external image.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import duckdb
import plotly.graph_objects as go
import streamlit as st

from restorelens.analysis import PERCENTILE_METHODS, Slo
from restorelens.dashboard import (
    environment,
    episodes,
    figures,
    overview,
    queries,
    selection,
    source,
    timelines,
    uploads,
)
from restorelens.dashboard.labels import MISSING
from restorelens.dashboard.segments import PROCESS_STARTED, legend
from restorelens.errors import InputError, RestorelensError

__all__ = ["NO_SCRAPES", "current_store", "engine_pressure", "guarded", "limits_in_use", "pick", "plain",
           "schedule_caption", "settings", "settings_sidebar", "show_figure", "source_picker", "stamp", "table",
           "time_bars"]

T = TypeVar("T")

#: Session keys: the store the pages read (None: none, e.g. the upload failed) and why there is none.
_STORE_KEY, _PROBLEM_KEY = "store_path", "store_problem"
#: The last upload that failed (its digest, name and limit) and its message: not loaded again on every rerun.
_FAILED_UPLOAD_KEY = "failed_upload"
_DIGEST_KEY = "upload_digest"
_SOURCE_DB, _SOURCE_SAMPLES, _SOURCE_UPLOAD = "span store (--db)", "sample traces", "upload an OTLP file"
#: What the uploader offers; the content decides how it is read (gzip and zstd by their magic bytes).
_UPLOAD_TYPES = ["json", "jsonl", "pb", "binpb", "gz", "zst"]
#: Every ASCII punctuation character: CommonMark lets a backslash escape each of them.
_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
#: What GitHub-flavoured markdown links by itself (a bare URL, www., an e-mail address), escaped or
#: not: Streamlit finds them in the text after the escapes are read.
_AUTOLINKED = re.compile(r"://|www\.|@|mailto:|xmpp:", re.IGNORECASE)
#: The sidebar's settings for every page (``selection.Settings``), set by ``settings_sidebar``.
_SETTINGS_KEY = "settings"
#: The run filter: URL parameter, ``Selection`` field, the runs' column, its label.
_FILTERS = (("scenario", "scenarios", "scenario", "Scenario"), ("policy", "policies", "policy", "Policy"),
            ("seed", "seeds", "seed", "Seed"), ("run", "run_ids", "run_id", "Run id"))
#: The SLO and percentile settings: URL parameter (also the widget's key) and default.
_SLO_TTFT, _SLO_E2E, _PERCENTILE = "slo_ttft_s", "slo_e2e_s", "percentile"
#: The largest SLO the sidebar takes (an hour): a longer one would count every request as on time.
_MAX_SLO_S = 3600.0
#: What an episode page says instead of a pressure chart when the store holds no scrape at all.
NO_SCRAPES = "No engine metrics in this store: record them with `restorelens collect --scrape URL`."


def plain(text: object) -> str:
    """``text`` on one line, as markdown that shows it as written: each word backslash-escaped
    (no link, image, emphasis, colour directive or LaTeX), and each word GFM would link by itself
    in a code span, where nothing is read."""
    return " ".join(_code_span(word) if _AUTOLINKED.search(word) else _MARKDOWN_PUNCTUATION.sub(r"\\\1", word)
                    for word in str(text).split())


def _code_span(word: str) -> str:
    """``word`` as a CommonMark code span: fenced by more backticks than it holds in a row."""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", word)), default=0) + 1)
    pad = " " if word.startswith("`") or word.endswith("`") else ""
    return f"{fence}{pad}{word}{pad}{fence}"


def source_picker() -> None:
    """Sidebar: choose the --db store, the sample traces or an uploaded file (entrypoint only).

    The choice always sets the store the pages read, even to none: a failed upload shows its error,
    never the --db store in its place. A caption under the choice says which store is shown, and
    the window (--since, --until, --run) the --db store is read for.
    """
    db = os.environ.get(environment.DB_ENV)
    samples = source.sample_files()
    options = [name for name, present in ((_SOURCE_DB, db), (_SOURCE_SAMPLES, samples), (_SOURCE_UPLOAD, True))
               if present]
    with st.sidebar:
        choice = st.radio("Spans from", options, key="source")
        try:
            if choice == _SOURCE_DB:
                window = environment.configured_window().describe()
                _show(db, f"the store {db} (read-only)" + (f", {window}" if window else ""))
            elif choice == _SOURCE_SAMPLES:
                stamps = tuple(int(p.stat().st_mtime_ns) for p in samples)
                _show(queries.sample_store(tuple(str(p) for p in samples), stamps), f"{len(samples)} sample file(s)")
            else:
                _upload_picker()
        except (RestorelensError, duckdb.Error, OSError) as exc:
            _show(None, problem=_one_line(exc))
        _labels_caption()


def settings_sidebar() -> None:
    """Sidebar (entrypoint only, after ``source_picker``): which runs every page shows (scenario,
    policy, seed, run id), the interactive SLO and the percentile method. Every choice is kept in
    the URL, so a link reopens the same view; a value in the link the store does not hold is dropped."""
    path = st.session_state.get(_STORE_KEY)
    chosen: dict[str, tuple[Any, ...]] = {}
    with st.sidebar:
        runs = _runs_or_none(path)
        if runs is not None and runs.height:
            st.subheader("Runs")
            for param, field_name, column, label in _FILTERS:
                options = sorted(set(runs[column].drop_nulls().to_list()))
                if not options:
                    continue
                key = f"filter-{param}"
                if key not in st.session_state:
                    wanted = set(st.query_params.get_all(param))
                    st.session_state[key] = [o for o in options if str(o) in wanted]
                else:  # another store may not hold what was chosen
                    st.session_state[key] = [o for o in st.session_state[key] if o in options]
                values = st.multiselect(label, options, key=key, placeholder="all")
                chosen[field_name] = tuple(values)
                _keep_in_url(param, [str(v) for v in values])
            shown = selection.selected_runs(runs, selection.Selection(**chosen))
            total = runs["run_id"].n_unique()
            st.caption(f"Showing {total if shown is None else len(shown)} of {total} runs.")
        st.subheader("SLO and percentiles")
        ttft_s = _number(_SLO_TTFT, "Interactive TTFT SLO (s)", 5.0)
        e2e_s = _number(_SLO_E2E, "Interactive end-to-end SLO (s)", 30.0)
        if _PERCENTILE not in st.session_state:
            wanted = st.query_params.get(_PERCENTILE)
            st.session_state[_PERCENTILE] = wanted if wanted in PERCENTILE_METHODS else PERCENTILE_METHODS[0]
        method = st.radio("Percentiles", PERCENTILE_METHODS, key=_PERCENTILE, horizontal=True,
                          help="linear: interpolated between ranks; nearest-rank: the value at rank ⌈q·n⌉, "
                               "as the MoFlux study reports them.")
        _keep_in_url(_PERCENTILE, [method] if method != PERCENTILE_METHODS[0] else [])
    st.session_state[_SETTINGS_KEY] = selection.Settings(selection.Selection(**chosen),
                                                         Slo(ttft_s=ttft_s, e2e_s=e2e_s), str(method))


def settings() -> selection.Settings:
    """The sidebar's settings (``settings_sidebar``); the defaults for a page run on its own."""
    value = st.session_state.get(_SETTINGS_KEY)
    return value if isinstance(value, selection.Settings) else selection.Settings()


def _runs_or_none(path: str | None) -> Any:
    if not path:
        return None
    try:
        return queries.runs(path, stamp(path))
    except (RestorelensError, duckdb.Error, OSError):
        return None  # the page says why, once, when it opens the store


def _number(param: str, label: str, default: float) -> float:
    """A number of seconds >= 0 kept in the URL (``param``) when it is not ``default``."""
    if param not in st.session_state:
        try:
            value = float(st.query_params.get(param, default))
        except ValueError:
            value = default
        # a value the widget would not take (NaN, negative, above its maximum) is the default, never
        # the minimum Streamlit would clamp it to: an SLO of 0 s fails every request
        st.session_state[param] = value if 0 <= value <= _MAX_SLO_S else default
    value = float(st.number_input(label, min_value=0.0, max_value=_MAX_SLO_S, step=0.5, key=param))
    _keep_in_url(param, [f"{value:g}"] if value != default else [])
    return value


def _keep_in_url(param: str, values: list[str]) -> None:
    if values:
        if st.query_params.get_all(param) != values:
            st.query_params[param] = values
    elif param in st.query_params:
        del st.query_params[param]


def _labels_caption() -> None:
    """Which of the user's attributes the labels are read from (--label, --config), if any."""
    try:
        labels = environment.configured_labels()
    except RestorelensError:
        return  # the pages say so, once, when they open the store
    if labels:
        st.caption("Labels from: " + plain(", ".join(f"{label} = {name}" for label, name in labels.items())))


def _show(path: str | None, what: str = "", *, problem: str | None = None) -> None:
    """Make ``path`` the store the pages read and say so (or that none is shown, and why)."""
    st.session_state[_STORE_KEY] = path
    st.session_state[_PROBLEM_KEY] = problem
    st.caption(f"Showing: {plain(what)}" if path else "Showing: no store")


def _upload_picker() -> None:
    max_bytes = environment.configured_max_upload_bytes()
    upload = st.file_uploader("OTLP JSON, JSON lines or length-prefixed protobuf (plain, gzip or zstd)",
                              type=_UPLOAD_TYPES, key="upload", max_upload_size=uploads.upload_size_mib(max_bytes))
    if upload is None:
        _show(None)
        return
    shown = uploads.shown_name(upload.name)
    attempt = (_digest(upload), upload.name, max_bytes)
    failed = st.session_state.get(_FAILED_UPLOAD_KEY)
    if failed is not None and failed[0] == attempt:
        raise InputError("", failed[1])
    try:
        _show(queries.uploaded_store(*attempt, upload), f"the uploaded {shown}")
    except (RestorelensError, duckdb.Error, OSError) as exc:
        st.session_state[_FAILED_UPLOAD_KEY] = (attempt, _one_line(exc))
        raise


def _digest(upload: Any) -> str:
    """The upload's SHA-256, computed once per uploaded file (not on every rerun)."""
    known = st.session_state.get(_DIGEST_KEY)
    if known is None or known[0] != upload.file_id:
        known = (upload.file_id, hashlib.file_digest(upload, "sha256").hexdigest())
        st.session_state[_DIGEST_KEY] = known
    return str(known[1])


def current_store() -> str:
    """The store the pages read; without one, a message and the page stops (never a traceback)."""
    if _STORE_KEY in st.session_state:  # the entrypoint's choice, even none
        path = st.session_state[_STORE_KEY]
    else:  # a page run on its own
        path = os.environ.get(environment.DB_ENV)
    if not path:
        problem = st.session_state.get(_PROBLEM_KEY)
        if problem:
            st.error(plain(problem))
            st.caption("No spans are shown: pick another source in the sidebar or upload another file.")
        else:
            st.info("No spans yet: start with `restorelens dashboard --db FILE`, or pick the sample traces or "
                    "upload an OTLP file in the sidebar.")
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
        st.error(plain(_one_line(exc)))
        st.stop()
        raise  # st.stop() raises; this keeps type checkers honest


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def limits_in_use() -> tuple[str, ...]:
    """Limits from the CLI (--max), else the defaults with the sidebar's TTFT SLO as the lending
    TTFT limit; editable in the sidebar (one per line). A new SLO starts the defaults again."""
    configured = environment.configured_limits()
    defaults = configured if configured is not None else overview.default_limits(settings().slo)
    default = "\n".join(defaults)
    with st.sidebar:
        text = st.text_area("Limits (view.metric.stat=max, one per line)", value=default,
                            key=f"limits-{hashlib.sha256(default.encode()).hexdigest()[:12]}")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def time_bars(segments: Any, total: int, kind: str, key: str) -> None:
    """An episode kind's "where the time went" chart (``kind``: lending or wake), saying how many
    episodes it leaves out."""
    if segments.is_empty():
        return
    drawn = segments["episode"].n_unique()
    show_figure(figures.time_bars(segments, figures.TIME_BAR_TITLES[kind], legend(segments, kind)), key, key)
    note = f"{drawn} of {total} episodes: the censored first, then the longest. " if drawn < total else ""
    engine = (" A wake whose engine exported its startup spans splits the stretch to engine ready: process "
              "started, each top-level startup phase (named as its span) and the time outside the engine's spans."
              if PROCESS_STARTED in segments["event"].to_list() else "")
    st.caption(note + "Each stretch is named by the instant that ends it; hatched: censored (never completed); "
               "red outline: clock skew between the spans." + engine)


def show_figure(figure: go.Figure, key: str, file_stem: str) -> None:
    """The chart (the modebar's camera exports PNG) and a button exporting standalone HTML."""
    config = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": file_stem, "scale": 2}}
    st.plotly_chart(figure, key=key, config=config)
    st.download_button(
        "Download chart as HTML", data=lambda: figure.to_html(include_plotlyjs=True, full_html=True),
        file_name=f"{file_stem}.html", mime="text/html", key=f"{key}-html", on_click="ignore",
    )


def table(frame: Any) -> None:
    """A table on a page: no index, a missing value shown as ``MISSING`` (Streamlit's: "None")."""
    st.dataframe(frame, hide_index=True, placeholder=MISSING)


def pick(param: str, values: Sequence[str], labels: Sequence[str], label: str) -> str:
    """A select box whose choice lives in ``st.query_params[param]`` (a link reopens the view)."""
    wanted = st.query_params.get(param)
    index = list(values).index(wanted) if wanted in values else 0
    if wanted is not None and wanted not in values:
        st.warning(f"{param} {plain(repr(wanted))} from the link is not in this store; showing the first one.")
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
        st.warning(f"Censored episode: {plain(episode.get('censored_reason'))}")


def schedule_caption(episode: dict[str, Any], after: str) -> None:
    """The episode's engine schedule as the interval it is, and which bound the point value is."""
    point, lower, upper = (episode.get(f"engine_schedule{part}_s") for part in ("", "_lower", "_upper"))
    if point is None:
        return
    if upper is None:
        st.caption(f"Engine scheduled {point:.3f} s after {after}: the lower bound (arrival + time in queue); "
                   "vLLM reported no prefill time, so the instant has no upper bound.")
        return
    which = plain(episode.get("engine_schedule_point") or "upper")
    st.caption(f"Engine scheduled {point:.3f} s after {after}: the {which} bound of the interval "
               f"[{lower:.3f}, {upper:.3f}] s vLLM's latencies allow (docs/analysis.md, Engine schedule).")


def engine_pressure(path: str, stamp: tuple[int, ...], episode: dict[str, Any], events: Any, key: str) -> None:
    """The engines' KV-cache usage and queues around an episode, from a little before t0 to its end;
    without any scrape in the store, one line saying how to record them instead of an empty chart."""
    st.subheader("Engine pressure")
    start_s, end_s = episodes.episode_window(events)
    model = episode.get("model")
    pressure = guarded(queries.episode_pressure, path, stamp, model, episode["t0"], start_s, end_s)
    if not pressure.scraped:
        st.info(NO_SCRAPES)
        return
    age = episode.get("engine_pressure_age_s")
    if age is not None:
        kv = episode.get("engine_kv_cache_usage_at_t0")
        kv_text = f"KV cache {kv:.1%} used" if kv is not None else "KV cache not reported"
        st.caption(f"At t0, the last scrape ({age:.3f} s before): {_count(episode.get('engine_running_at_t0'))} "
                   f"running, {_count(episode.get('engine_waiting_at_t0'))} waiting, {kv_text}.")
    if pressure.samples.is_empty():
        scraped = ", ".join(pressure.models) or "no model"
        st.info(plain(f"No scrape of an engine serving {model if model is not None else 'an unnamed model'} from "
                      f"t0 {start_s:+g} s to t0 {end_s:+g} s; the store's scrapes are of: {scraped}."))
        return
    show_figure(timelines.pressure_timeline(pressure), key, key)


def _count(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"
