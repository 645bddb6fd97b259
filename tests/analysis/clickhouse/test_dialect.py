"""The analysis on ClickHouse equals the analysis on DuckDB.

Each store's spans go into an embedded ClickHouse (chDB) ``otel_traces`` created with the
OpenTelemetry Collector exporter's own DDL (``restorelens.store.EXPORTER_DDL``); every layer
(``VIEW_LAYERS``) is created there from ``dialect.layer_sql`` and every parameterised query run
from ``dialect.query_sql``, and each must equal what ``Analysis`` answers on the DuckDB store,
row for row (floats within 1e-9). Stores: the recorded sample traces (plain, and with every label
mapped, which is the only way ``span_labels`` has rows), the experiment store (a MoFlux matrix of
four arms x two seeds) and the dashboard's realistic store with engine scrapes (the one store with
``engine_pressure`` rows). Below them, each rewrite on its own: the same DuckDB expression gives
DuckDB's answer on chDB, and the plain sqlglot transpilation would not (so the check can fail).
"""

from __future__ import annotations

import io
import math
import sys
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest
import sqlglot
from chdb import session as chdb_session

from restorelens import spans as sc
from restorelens.analysis import Analysis, Slo
from restorelens.analysis.clickhouse import dialect as ch
from restorelens.analysis.layers import PARAMETERISED, VIEW_LAYERS, sql_text
from restorelens.collector import load_paths
from restorelens.store import EXPORTER_DDL

TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TESTS / "dashboard"))

from dashboard_stores import build_store, engine_store  # noqa: E402
from experiment_store import build_experiment_store  # noqa: E402

SAMPLES = TESTS.parent / "sample_traces"

#: restorelens's own tables beside ``otel_traces``, as ClickHouse tables: the label mapping
#: ``span_labels`` reads and the engines' scraped metrics.
LABEL_MAP_DDL = "create table rl_label_map (label String, attribute String) engine = Memory"
ENGINE_METRICS_DDL = ("create table engine_metrics (Timestamp DateTime64(9), Target String, MetricName String, "
                      "Labels Map(String, String), Value Float64) engine = Memory")

#: Every label mapped onto an attribute the sample traces carry (``restore.scenario`` is also a
#: resource attribute: the span's own comes first).
LABELS = {"traffic_class": sc.ATTR_TRAFFIC_CLASS, "policy": sc.ATTR_GATE_POLICY, "workload": sc.ATTR_WORKLOAD,
          "run_id": sc.ATTR_SCENARIO, "seed": sc.ATTR_SEED, "model": sc.ATTR_GEN_AI_REQUEST_MODEL}

#: Floats agree to a nanosecond of a second.
TOLERANCE = 1e-9


# --- comparing frames ---------------------------------------------------------------------------


def _plain(frame: pl.DataFrame) -> pl.DataFrame:
    """Columns whose values compare across engines: instants as UTC nanoseconds, categoricals
    (ClickHouse's LowCardinality) as strings."""
    columns = []
    for name, dtype in frame.schema.items():
        column = pl.col(name)
        if isinstance(dtype, pl.Datetime):
            if dtype.time_zone is not None:
                column = column.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
            column = column.dt.cast_time_unit("ns").cast(pl.Int64)
        elif dtype in (pl.Categorical, pl.Enum):
            column = column.cast(pl.String)
        columns.append(column.alias(name))
    return frame.select(columns)


def _value(value: Any) -> Any:
    """One value in the form both engines' answers share: a boolean as 0/1 (ClickHouse answers a
    condition as UInt8), a decimal as a float (DuckDB types a literal such as 1.5 DECIMAL)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return [_value(item) for item in value]
    if isinstance(value, dict):
        return {key: _value(item) for key, item in value.items()}
    return value


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    # floats rounded well above the tolerance, so that two answers within it sort alike
    def key(value: Any) -> tuple[int, str]:
        if value is None:
            return (0, "")
        if isinstance(value, float):
            return (1, "nan" if math.isnan(value) else f"{round(value, 6):.6f}")
        return (1, repr(_rounded(value)))

    return tuple(key(value) for value in row)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 6)
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return value


def _close(want: Any, got: Any) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        if want is None or got is None:
            return want is got
        if math.isnan(want) or math.isnan(got):
            return math.isnan(want) and math.isnan(got)
        return abs(float(want) - float(got)) <= TOLERANCE
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(_close(w, g) for w, g in zip(want, got, strict=True))
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(_close(want[key], got[key]) for key in want)
    return want == got


def assert_same(want: pl.DataFrame, got: pl.DataFrame, what: str) -> None:
    """``got`` (chDB) holds the same columns, in the same order, and the same rows as ``want``
    (DuckDB), in any row order; floats within ``TOLERANCE``.

    Columns named ``*_key`` are left out: they are the internal integer join keys of the ids
    (``rl_trace_key``, ``rl_span_key``), a 128-bit integer that DuckDB hands polars as a decimal
    and ClickHouse as 16 bytes. They only join layers; the ids themselves are compared."""
    assert got.columns == want.columns, f"{what}: columns differ"
    assert got.height == want.height, f"{what}: {got.height} rows on chDB, {want.height} on DuckDB"
    compared = [name for name in want.columns if not name.endswith("_key")]
    want_rows = sorted((tuple(_value(v) for v in row) for row in _plain(want.select(compared)).iter_rows()),
                       key=_sort_key)
    got_rows = sorted((tuple(_value(v) for v in row) for row in _plain(got.select(compared)).iter_rows()),
                      key=_sort_key)
    for index, (w, g) in enumerate(zip(want_rows, got_rows, strict=True)):
        differing = [name for name, a, b in zip(compared, w, g, strict=True) if not _close(a, b)]
        assert not differing, f"{what}: row {index} differs in {differing}: DuckDB {w}, chDB {g}"


# --- the two engines on one store ----------------------------------------------------------------


def _frame(chdb: Any, sql: str, parameters: dict[str, Any] | None = None) -> pl.DataFrame:
    answer = chdb.query(sql, "ArrowStream", params=ch.chdb_parameters(parameters or {}))
    return pl.from_arrow(pa.ipc.open_stream(io.BytesIO(answer.bytes())).read_all())


@pytest.fixture(scope="module")
def chdb() -> Iterator[Any]:
    """One chDB session for the module (chDB runs one at a time), the analysis's settings and
    macros defined; each store gets a database of its own."""
    with chdb_session.Session() as chdb:
        for name, value in ch.SETTINGS.items():
            chdb.query(f"set {name} = {value}")
        for definition in ch.macro_definitions():
            chdb.query(definition)
        yield chdb


class Engines:
    """A DuckDB store and its spans in chDB, every layer registered on both."""

    def __init__(self, chdb: Any, store: Path, database: str, labels: dict[str, str] | None = None) -> None:
        self.chdb = chdb
        self.database = database
        self.con = duckdb.connect(str(store), read_only=True)
        self.analysis = Analysis(self.con, use_derived=False, labels=labels)
        chdb.query(f"create database {database}")
        chdb.query(f"use {database}")
        chdb.query(EXPORTER_DDL)
        chdb.query(LABEL_MAP_DDL)
        chdb.query(ENGINE_METRICS_DDL)
        self._copy("otel_traces", store.with_suffix(".spans.parquet"))
        self._copy("engine_metrics", store.with_suffix(".metrics.parquet"))
        for label, attribute in (labels or {}).items():
            chdb.query("insert into rl_label_map values ({label:String}, {attribute:String})",
                       params=ch.chdb_parameters({"label": label, "attribute": attribute}))
        for name in VIEW_LAYERS:
            chdb.query(f"create view {name} as {ch.layer_sql(name)}")

    def _copy(self, table: str, parquet: Path) -> None:
        """``table`` from the DuckDB store into chDB through a Parquet file (its columns in the same order)."""
        self.con.execute(f"copy (select * from {table}) to '{parquet}' (format parquet)")
        self.chdb.query(f"insert into {table} select * from file('{parquet}', Parquet)")

    def clickhouse(self, sql: str, parameters: dict[str, Any] | None = None) -> pl.DataFrame:
        self.chdb.query(f"use {self.database}")
        return _frame(self.chdb, sql, parameters)

    def duckdb(self, sql: str) -> list[tuple[Any, ...]]:
        return self.con.execute(sql).fetchall()

    def close(self) -> None:
        self.chdb.query(f"drop database {self.database}")
        self.con.close()


def _sample_store(folder: Path) -> Path:
    load_paths(sorted(SAMPLES.glob("*.jsonl")), folder / "samples.duckdb")
    return folder / "samples.duckdb"


def _scraped_store(folder: Path) -> Path:
    """The sample traces with engine scrapes around each lending and wake episode's t0, so that
    the episodes' ``asof left join`` onto ``engine_pressure`` has something to find: per model,
    the first episode has only another model's sample at its t0 (the join's equality must refuse
    it), the second a sample exactly at t0 (``>=``) and an older one, the others an older sample
    only; each has a later one that must not be taken."""
    db = _sample_store(folder)
    with duckdb.connect(str(db)) as con:
        Analysis(con, use_derived=False)
        episodes = con.execute("""
            select model, epoch_ns(t0), row_number() over (partition by model order by t0, kind) as n
            from (select model, t0, 'lending' as kind from lending_episodes
                  union all select model, t0, 'wake' from wake_episodes)""").fetchall()
        rows = []
        for model, t0_ns, n in episodes:
            samples = [(t0_ns + 1_000_000_000, model, 9.0)]
            samples += [(t0_ns, "another-model", 7.0)] if n == 1 else [(t0_ns - n * 125_000_000, model, float(n))]
            samples += [(t0_ns, model, 0.5)] if n == 2 else []
            for at_ns, name, value in samples:
                for metric, scale in (("vllm:num_requests_running", 1), ("vllm:num_requests_waiting", 2),
                                      ("vllm:kv_cache_usage_perc", 0.125)):
                    rows.append((at_ns, "http://engine:8000/metrics", metric, {"model_name": name, "engine": "0"},
                                 value * scale))
        con.executemany("insert into engine_metrics values (make_timestamp_ns(?), ?, ?, ?, ?)", rows)
    return db


def _skewed_store(folder: Path) -> Path:
    """The sample traces with the services' clocks apart: the gate's spans 2 s early, the engine's
    3 s early, so every kind of negative gap (``negative_gaps``, ``clock_skew``) has rows."""
    db = _sample_store(folder)
    with duckdb.connect(str(db)) as con:
        for service, seconds in (("restorelens-gate", 2), ("restorelens-sim", 3)):
            con.execute(f"""
                update otel_traces
                set "Timestamp" = "Timestamp" - interval {seconds} second,
                    "Events.Timestamp" = list_transform("Events.Timestamp", lambda event_at: event_at - interval {seconds} second)
                where "ServiceName" = $service""", {"service": service})
    return db


def _realistic_store(folder: Path) -> Path:
    realistic = build_store(folder / "realistic.duckdb", folder)
    return engine_store(folder / "engines.duckdb", realistic)


STORES = {
    "samples": (_sample_store, None),
    "labelled": (_sample_store, LABELS),
    "scraped": (_scraped_store, None),
    "skewed": (_skewed_store, None),
    "experiment": (build_experiment_store, None),
    "realistic": (_realistic_store, None),
}


@pytest.fixture(scope="module", params=list(STORES))
def engines(request: pytest.FixtureRequest, chdb: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    build, labels = STORES[request.param]
    store = build(tmp_path_factory.mktemp(request.param))
    engines = Engines(chdb, store, request.param, labels)
    yield engines
    engines.close()


# --- every layer and query ------------------------------------------------------------------------


@pytest.mark.parametrize("name", VIEW_LAYERS)
def test_layer_equals_duckdb(engines: Engines, name: str) -> None:
    assert_same(engines.analysis.view(name), engines.clickhouse(f"select * from {name}"), name)


def test_every_layer_has_rows_somewhere(engines: Engines) -> None:
    """The comparison means something: the layers a store is meant to exercise are not empty."""
    empty = [name for name in VIEW_LAYERS if engines.clickhouse(f"select count() as n from {name}")["n"][0] == 0]
    expected_empty = {
        # the samples' virtual starts and the realistic store's cold start exported startup spans
        "samples": {"span_labels", "engine_pressure", "model_pressure", "episode_pressure"},
        "labelled": {"engine_pressure", "model_pressure", "episode_pressure"},
        "scraped": {"span_labels"},
        "skewed": {"span_labels", "engine_pressure", "model_pressure", "episode_pressure"},
        "experiment": {"span_labels", "engine_pressure", "model_pressure", "episode_pressure", "typed_model_wakes",
                       "wake_episodes", "typed_model_states", "lifecycle_intervals", "wake_phases"},
        "realistic": {"span_labels"},
    }[engines.database]
    assert set(empty) == expected_empty


def test_negative_gaps_are_compared_somewhere(engines: Engines) -> None:
    """The lambdas that list the negative gaps run on rows that have some (the skewed store)."""
    if engines.database == "skewed":
        for name in ("request_attempts", "lending_episodes", "wake_episodes"):
            gaps = engines.clickhouse(f"select count() as n from {name} where notEmpty(negative_gaps)")["n"][0]
            assert gaps > 0, name


def test_policy_summary_and_paired_differences_equal_duckdb(engines: Engines) -> None:
    slo = Slo().parameters()
    assert_same(engines.analysis.policy_summary(), engines.clickhouse(ch.query_sql("policy_summary"), slo),
                "policy_summary")
    # paired_differences reads the summary under one SLO as a table, as the DuckDB analysis keeps it
    engines.chdb.query(f"create table policy_summary engine = Memory as {ch.query_sql('policy_summary')}",
                       params=ch.chdb_parameters(slo))
    try:
        assert_same(engines.analysis.paired_differences(), engines.clickhouse(ch.query_sql("paired_differences")),
                    "paired_differences")
    finally:
        engines.chdb.query("drop table policy_summary")


def test_trace_queries_equal_duckdb(engines: Engines) -> None:
    # the deepest trace (most spans), a trace some link points into, and a request's id
    [(deepest,)] = engines.duckdb(
        'select "TraceId" from otel_traces group by "TraceId" order by count(*) desc, "TraceId" limit 1')
    linked = engines.duckdb('select "Links.TraceId"[1] from otel_traces where len("Links.TraceId") > 0 '
                            'order by "SpanId" limit 1')
    [(request_id,)] = engines.duckdb("select request_id from requests where request_id is not null "
                                     "order by request_id limit 1")
    for trace_id in (deepest, *(row[0] for row in linked)):
        parameters = {"trace_id": trace_id}
        trace = engines.analysis.trace(trace_id)
        assert trace.height > 1
        assert_same(trace, engines.clickhouse(ch.query_sql("trace_spans"), parameters), "trace_spans")
        assert_same(engines.analysis.linked_from(trace_id), engines.clickhouse(ch.query_sql("linked_from"), parameters),
                    "linked_from")
    if engines.database != "experiment":  # the experiment's runs record no links
        assert linked and engines.analysis.linked_from(linked[0][0]).height > 0
    # oldest first; traces that start at the same instant (the experiment's runs reuse request ids
    # in virtual time) come in no set order on either engine
    found = engines.clickhouse(ch.query_sql("traces_for_request"), {"request_id": request_id})
    assert found["start"].is_sorted()
    assert_same(engines.con.sql(sql_text("traces_for_request"), params={"request_id": request_id}).pl(), found,
                "traces_for_request")
    assert sorted(found["trace_id"]) == sorted(engines.analysis.traces_for_request(request_id)) != []


def test_every_parameterised_query_is_covered() -> None:
    assert set(PARAMETERISED) == {"policy_summary", "paired_differences", "trace_spans", "linked_from",
                                  "traces_for_request"}


# --- each rewrite -----------------------------------------------------------------------------------

#: (what, a DuckDB query over the sample spans): each needs a rewrite to mean the same on ClickHouse.
REWRITES = {
    "a missing map key is NULL": f"""
        select "SpanId", "SpanAttributes"['no.such.key'] as missing, "SpanAttributes"['{sc.ATTR_GATE_POLICY}'] as policy
        from otel_traces""",
    "a list index past the end is NULL": """
        select "SpanId", "Events.Name"[1] as first_event, "Events.Name"[40] as far, "Links.SpanId"[1] as link
        from otel_traces""",
    "try_cast of bad input is NULL": f"""
        select "SpanId", try_cast("SpanName" as bigint) as not_a_number,
               try_cast("SpanAttributes"['{sc.ATTR_HTTP_STATUS_CODE}'] as bigint) as status
        from otel_traces""",
    "try_cast reads what DuckDB reads": """
        select "SpanId", try_cast(' 7' as bigint) as spaced, try_cast('2.5' as bigint) as decimal,
               try_cast('-2.5' as bigint) as negative, try_cast('1e3' as bigint) as exponent,
               try_cast(' 1.5 ' as double) as spaced_float, try_cast('9223372036854775808' as bigint) as too_big
        from otel_traces""",
    "round is half away from zero": """
        select "SpanId", round((length("SpanName") % 4) / 2 - 1) as tie, round((length("SpanName") % 5) / 2 - 1) as
            negative_tie
        from otel_traces""",
    "try of a NaN, infinite or oversized cast is NULL": """
        select "SpanId",
               try(epoch_ns("Timestamp") + round(cast('nan' as double))::bigint) as nan,
               try(epoch_ns("Timestamp") + round(cast('inf' as double))::bigint) as inf,
               try(epoch_ns("Timestamp") + round(9.0e18)::bigint) as overflow,
               try(epoch_ns("Timestamp") + round("Duration" / 2)::bigint) as fine
        from otel_traces""",
    "lead past the partition's end is NULL": """
        select "SpanId", lead(epoch_ns("Timestamp")) over (partition by "TraceId" order by "Timestamp", "SpanId") as next
        from otel_traces""",
    "a 128-bit key prints as hex": """
        select "SpanId", printf('%032x', rl_trace_key("TraceId")) as trace_id, printf('%016x', rl_span_key("SpanId")) as span_id
        from otel_traces""",
}


#: The shared macros' ClickHouse definitions (``sql/clickhouse/``) read a Retry-After header as
#: DuckDB's do: delay-seconds, an HTTP date (here 1445412480 s is 07:28:00 on that day), a JSON list.
MACRO_CHECK = """
    select header, rl_retry_after_raw(header) as raw,
           rl_retry_after_s(null, rl_retry_after_raw(header), 1445412480000000000) as seconds,
           rl_retry_after_s(1.5, header, 0) as attribute_first,
           rl_span_key(header) is null as not_a_span_id
    from (select unnest(['120', ' 7', '2.5', 'Wed, 21 Oct 2015 07:28:00 GMT', 'Wed, 21 Oct 2015 07:29:30 GMT',
                         '["5"]', '[]', '["Wed, 21 Oct 2015 07:28:10 GMT"]', 'soon', '', '00f067aa0ba902b7'])
                  as header)"""


@pytest.fixture(scope="module")
def samples(chdb: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engines]:
    engines = Engines(chdb, _sample_store(tmp_path_factory.mktemp("rewrites")), "rewrites")
    yield engines
    engines.close()


@pytest.mark.parametrize("what", REWRITES)
def test_rewrite_gives_duckdbs_answer(samples: Engines, what: str) -> None:
    sql = REWRITES[what]
    want = samples.con.sql(sql).pl()
    assert want.height > 0
    assert_same(want, samples.clickhouse(ch.to_clickhouse(sql)), what)


def test_macros_give_duckdbs_answer(samples: Engines) -> None:
    assert_same(samples.con.sql(MACRO_CHECK).pl(), samples.clickhouse(ch.to_clickhouse(MACRO_CHECK)), "macros")


@pytest.mark.parametrize("what", [what for what in REWRITES if what != "try_cast of bad input is NULL"])
def test_plain_transpilation_would_differ(samples: Engines, what: str) -> None:
    """Without the rewrites, ClickHouse answers otherwise (or fails): the test above can fail. (Not
    for bad input to ``try_cast``: ClickHouse 26's ``CAST(x AS Nullable(T))`` gives NULL for it
    too, where older servers fail.)"""
    sql = REWRITES[what]
    want = samples.con.sql(sql).pl()
    plain = sqlglot.transpile(sql, read="duckdb", write="clickhouse")[0]
    try:
        got = samples.clickhouse(plain)
    except Exception:  # noqa: BLE001 - failing outright is differing too
        return
    with pytest.raises(AssertionError):
        assert_same(want, got, what)


def test_parameters_are_typed_placeholders() -> None:
    """A ``$name`` becomes a ClickHouse query parameter: a value never enters the SQL text."""
    text = ch.to_clickhouse("select * from otel_traces where \"TraceId\" = $trace_id", {"trace_id": "String"})
    assert "= {trace_id: String}" in text
    with pytest.raises(KeyError):
        ch.to_clickhouse("select $unknown as x")


def test_parameter_values_round_trip(chdb: Any) -> None:
    values = {"text": "it's a \\ tab\there", "phases": ["wake", "o'clock", "back\\slash"], "none": [], "x": 1.5}
    sql = "select {text:String} as text, {phases:Array(String)} as phases, {none:Array(String)} as none, {x:Float64} as x"
    assert _frame(chdb, sql, values).row(0) == (values["text"], values["phases"], [], 1.5)
