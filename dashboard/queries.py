"""Cached data access for the pages: one reader per store, cached frames keyed by the store's stamp.

DuckDB lets no other process open a file while one holds it, and ``restorelens collect`` may be
writing the store: so the cached resource is a *reader* that opens a read-only connection per load
(through the collector's ``open_read_only``, which waits for the writer's release) and closes it
at once. Frames are cached with ``st.cache_data`` keyed by path and ``store_stamp`` (changes when a
writer commits) and a TTL. Nothing connects at import time.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import polars as pl
import streamlit as st

from restorelens.analysis import Analysis, Slo
from restorelens.dashboard import engine, environment, episodes, pressure, source, uploads
from restorelens.dashboard.overview import Overview
from restorelens.dashboard.overview import overview as overview_of
from restorelens.dashboard.selection import Selection, runs_of, select
from restorelens.store import open_read_only

__all__ = [
    "TTL_S",
    "StoreReader",
    "engine_policies",
    "engine_pressure",
    "engine_requests",
    "engine_summary",
    "episode_pressure",
    "lending_detail",
    "lending_episodes",
    "lifecycle_intervals",
    "linked_from",
    "overview",
    "policy_page",
    "recent_requests",
    "runs",
    "sample_store",
    "store_reader",
    "trace",
    "traces_for_request",
    "uploaded_store",
    "wake_detail",
    "wake_episodes",
    "wake_phases",
]

#: No run filter: every row.
_ALL = Selection()
#: Cached frames expire after this long even when the store's stamp did not change.
TTL_S = 10 * 60


class StoreReader:
    """Opens short-lived read-only ``Analysis`` objects on one store (thread-safe: one at a time),
    each with the label mapping the CLI set (``--label``, ``--config``), whichever store it is, and
    over the window the CLI set (``--since``, ``--until``, ``--run``) when it is the CLI's store."""

    def __init__(self, path: str) -> None:
        # read once: the CLI fixes the mapping and the window for the life of the process, as it
        # fixes the store
        self.window = environment.store_window(path)
        source.validate_store(path, window=self.window)
        self.path = path
        self.labels = environment.configured_labels()
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def analysis(self, slo: Slo | None = None) -> Iterator[Analysis]:
        with self._lock:
            if source.is_warehouse(self.path) or not self.window.everything:
                from restorelens.analysis import open_analysis
                from restorelens.sources import Source, parse_source

                store = parse_source(self.path) if source.is_warehouse(self.path) else Source("duckdb", path=self.path)
                with open_analysis(store, window=self.window, slo=slo, labels=self.labels) as analysis:
                    yield analysis
                return
            con = open_read_only(self.path, timeout_s=source.READ_LOCK_TIMEOUT_S)
            try:
                yield Analysis(con, labels=self.labels, slo=slo)
            finally:
                con.close()


@st.cache_resource(show_spinner=False)
def store_reader(path: str) -> StoreReader:
    return StoreReader(path)


@st.cache_resource(show_spinner="Loading the uploaded traces…")
def uploaded_store(digest: str, name: str, max_bytes: int, _upload: IO[bytes]) -> str:
    """A store holding an uploaded OTLP file, JSON or protobuf, plain, gzip or zstd (one per distinct
    content, name and limit: the name appears in messages), in this process's folder."""
    _upload.seek(0)
    return str(uploads.load_upload(_upload, name, max_bytes=max_bytes))


@st.cache_resource(show_spinner="Loading the sample traces…")
def sample_store(files: tuple[str, ...], stamps: tuple[int, ...]) -> str:
    """A store holding the sample traces (rebuilt when a sample file changes), in this process's folder."""
    folder = Path(tempfile.mkdtemp(prefix="samples-", dir=source.work_folder()))
    return str(source.load_into_store([Path(f) for f in files], folder / "spans.duckdb"))


# --- frames (keyed by the store's stamp so new spans are never hidden) -------------------------


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs(path: str, stamp: tuple[int, ...]) -> pl.DataFrame:
    """The runs the store holds (``selection.runs_of``), for the sidebar's filter and every selection."""
    with store_reader(path).analysis() as analysis:
        return runs_of(analysis.runs())


def _keep(path: str, stamp: tuple[int, ...], selection: Selection) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """A frame -> its rows of the runs ``selection`` keeps."""
    known = runs(path, stamp) if selection.active else pl.DataFrame()
    return lambda frame: select(frame, known, selection)


@st.cache_data(ttl=TTL_S, show_spinner="Decomposing restorations…")
def overview(path: str, stamp: tuple[int, ...], limits: tuple[str, ...], include_requests: bool = False,
             selection: Selection = _ALL, method: str = "linear") -> Overview:
    keep = _keep(path, stamp, selection)
    with store_reader(path).analysis() as analysis:
        return overview_of(analysis, limits, include_requests=include_requests, keep=keep, method=method)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def lending_episodes(path: str, stamp: tuple[int, ...], selection: Selection = _ALL) -> pl.DataFrame:
    keep = _keep(path, stamp, selection)
    with store_reader(path).analysis() as analysis:
        return keep(analysis.lending_episodes())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def lending_detail(path: str, stamp: tuple[int, ...], span_id: str) -> episodes.LendingDetail:
    with store_reader(path).analysis() as analysis:
        episode = analysis.lending_episodes().filter(pl.col("span_id") == span_id).row(0, named=True)
        gates = analysis.view("gate_requests").select("trace_id", "run_id", "policy", "slot", "grant_ns", "end_ns")
        # a gate span carries no run id of its own: its request's client span (same trace) does
        clients = analysis.view("typed_client_requests").select("trace_id", pl.col("run_id").alias("client_run_id"))
        gates = (gates.join(clients.unique("trace_id"), on="trace_id", how="left")
                 .with_columns(pl.coalesce("run_id", "client_run_id").alias("run_id"))
                 .drop("trace_id", "client_run_id"))
        return episodes.lending_detail(episode, gates)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def wake_episodes(path: str, stamp: tuple[int, ...], selection: Selection = _ALL) -> pl.DataFrame:
    keep = _keep(path, stamp, selection)
    with store_reader(path).analysis() as analysis:
        return keep(analysis.wake_episodes())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def wake_phases(path: str, stamp: tuple[int, ...], selection: Selection = _ALL) -> pl.DataFrame:
    """The engine startup spans of the wake episodes ``selection`` keeps (they carry no run label)."""
    keep = _keep(path, stamp, selection)
    with store_reader(path).analysis() as analysis:
        kept = keep(analysis.wake_episodes())["span_id"]
        return analysis.wake_phases().filter(pl.col("wake_span_id").is_in(kept.to_list()))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def wake_detail(path: str, stamp: tuple[int, ...], span_id: str) -> episodes.WakeDetail:
    with store_reader(path).analysis() as analysis:
        episode = analysis.wake_episodes().filter(pl.col("span_id") == span_id).row(0, named=True)
        wakes = analysis.view("typed_model_wakes").filter(pl.col("span_id") == span_id)
        attempts = analysis.attempts().filter(pl.col("trace_id") == episode["request_trace_id"])
        return episodes.wake_detail(episode, wakes.row(0, named=True) if wakes.height else None, attempts)


@st.cache_data(ttl=TTL_S, show_spinner="Reading the engines' requests…")
def engine_requests(path: str, stamp: tuple[int, ...], selection: Selection = _ALL) -> pl.DataFrame:
    keep = _keep(path, stamp, selection)
    with store_reader(path).analysis() as analysis:
        return keep(analysis.engine_requests())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def engine_policies(path: str, stamp: tuple[int, ...], selection: Selection = _ALL) -> tuple[str, ...]:
    return engine.engine_policies(engine_requests(path, stamp, selection))


@st.cache_data(ttl=TTL_S, show_spinner="Summarising the engines' requests…")
def engine_summary(path: str, stamp: tuple[int, ...], policies: tuple[str, ...] | None,
                   by_policy: bool, selection: Selection = _ALL, method: str = "linear") -> engine.EngineSummary:
    return engine.engine_summary(engine_requests(path, stamp, selection), policies, by_policy=by_policy, method=method)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def engine_pressure(path: str, stamp: tuple[int, ...]) -> pl.DataFrame:
    with store_reader(path).analysis() as analysis:
        return analysis.engine_pressure()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def episode_pressure(path: str, stamp: tuple[int, ...], model: str | None, t0: object, start_s: float,
                     end_s: float) -> pressure.EpisodePressure:
    """The scrapes of the engines serving ``model`` from ``start_s`` to ``end_s`` around ``t0``."""
    return pressure.episode_pressure(engine_pressure(path, stamp), model, t0, start_s, end_s)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def policy_page(path: str, stamp: tuple[int, ...], selection: Selection = _ALL, slo: Slo | None = None) -> Any:
    """The policy page (``frontier.PolicyPage``) of the selected runs under ``slo`` (None: the default).

    Each cached load takes only the settings it depends on: a new SLO rescores the policy page
    alone, a new percentile method recomputes only the statistics that use it."""
    from restorelens.dashboard import frontier

    keep = _keep(path, stamp, selection)
    with store_reader(path).analysis(slo) as analysis:
        return frontier.policy_page(keep(analysis.policy_summary()), keep(analysis.requests()),
                                    keep(analysis.lending_episodes()))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def lifecycle_intervals(path: str, stamp: tuple[int, ...], selection: Selection = _ALL) -> pl.DataFrame:
    keep = _keep(path, stamp, selection)
    with store_reader(path).analysis() as analysis:
        return keep(analysis.lifecycle_intervals())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def trace(path: str, stamp: tuple[int, ...], trace_id: str) -> pl.DataFrame:
    with store_reader(path).analysis() as analysis:
        return analysis.trace(trace_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def linked_from(path: str, stamp: tuple[int, ...], trace_id: str) -> pl.DataFrame:
    """The restorations and wakes (their spans) that link into ``trace_id``."""
    with store_reader(path).analysis() as analysis:
        return analysis.linked_from(trace_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def traces_for_request(path: str, stamp: tuple[int, ...], request_id: str) -> list[str]:
    with store_reader(path).analysis() as analysis:
        return analysis.traces_for_request(request_id)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def recent_requests(path: str, stamp: tuple[int, ...], limit: int = 50,
                    selection: Selection = _ALL) -> pl.DataFrame:
    """A few requests to pick from in the trace explorer (the slowest first)."""
    keep = _keep(path, stamp, selection)
    with store_reader(path).analysis() as analysis:
        columns = ["request_id", "trace_id", "traffic_class", "policy", "outcome", "attempts", "ttft_s", "e2e_s"]
        return keep(analysis.requests()).select(columns).sort("e2e_s", descending=True, nulls_last=True).head(limit)
