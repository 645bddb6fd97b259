"""Export a span store: Parquet (zstd, the ``otel_traces`` columns as they are) or OTLP JSON lines.

The OTLP JSON lines are what the Collector's file exporter writes (one ``TracesData`` per line,
lower-case hex IDs, int64 as strings, enums as integers), so Jaeger's UI, the Collector's
``otlpjsonfile`` receiver and ``restorelens load`` read them back. The store keeps attribute values
as strings, so they are exported as ``stringValue``.

An export goes to a temporary file next to the output, renamed over it once complete: a failed
export (disk full, a store error) leaves the previous file whole, never half of a new one. An
existing output is replaced only when asked (``overwrite=True``, ``restorelens export --force``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from restorelens.collector.rows import KIND_NAMES, STATUS_NAMES
from restorelens.store import DEFAULT_LOCK_TIMEOUT_S, TABLE, open_read_only
from restorelens.errors import InputError

__all__ = ["DEFAULT_SPANS_PER_LINE", "OutputExists", "export_otlp_jsonl", "export_parquet", "export_to_clickhouse"]

#: Spans per exported line: the SDK's default export batch size.
DEFAULT_SPANS_PER_LINE = 512
_FETCH_ROWS = 65_536
_KIND_NUMBER = {name: i for i, name in enumerate(KIND_NAMES)}
_STATUS_NUMBER = {name: i for i, name in enumerate(STATUS_NAMES)}


def _make_folder(out: str | os.PathLike[str]) -> None:
    folder = Path(out).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(str(out), f"cannot create folder {folder}: {_reason(exc)}") from None


def _reason(exc: OSError) -> str:
    # Arrow's strerror repeats the path and adds detail; the errno's text alone reads the same for both writers.
    return os.strerror(exc.errno) if exc.errno else str(exc)


class OutputExists(InputError):
    """The output file exists and replacing it was not asked for."""

    def __init__(self, out: str | os.PathLike[str]) -> None:
        super().__init__(str(out), "already exists (overwrite=True replaces it)")


def _is_stream(out: str | os.PathLike[str]) -> bool:
    """Whether OUT exists as something other than a regular file or folder (``/dev/stdout``, a pipe):
    written in place, as there is neither a file to keep nor one a rename could replace."""
    try:
        mode = os.stat(out).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _check_output(out: str | os.PathLike[str], overwrite: bool) -> None:
    """Refuse an existing OUT before the store is read (a folder would only fail at the rename)."""
    if Path(out).is_dir():
        raise InputError(str(out), os.strerror(errno.EISDIR))
    if not overwrite and Path(out).is_file():
        raise OutputExists(out)


@contextlib.contextmanager
def _writing(out: str | os.PathLike[str]) -> Iterator[str]:
    """The path to write OUT's content to: a new file next to OUT, renamed over it when the block
    ends and removed if it fails. Failing to write (permissions, disk full) is an InputError
    naming OUT."""
    if _is_stream(out):
        with _named(out):
            yield str(out)
        return
    _make_folder(out)
    final = Path(out)
    # Hidden, and made with O_EXCL so no other file is ever truncated; mode 0666 less the umask,
    # as the output itself would get (tempfile's files are 0600). A process killed meanwhile
    # leaves it behind, under a name that says what it was.
    partial = final.with_name(f".{final.name}.{secrets.token_hex(4)}.partial")
    with _named(out):
        os.close(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        with _named(out):
            yield str(partial)
            os.replace(partial, final)
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise


@contextlib.contextmanager
def _named(out: str | os.PathLike[str]) -> Iterator[None]:
    """An OSError in the block (missing folder, permissions, disk full) is an InputError naming OUT."""
    try:
        yield
    except OSError as exc:
        raise InputError(str(out), _reason(exc)) from None


def export_parquet(
    db_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    overwrite: bool = False,
) -> int:
    """Write ``otel_traces`` (ordered by start time) to a zstd Parquet file; returns the span count.

    An existing ``out`` is an ``OutputExists`` error unless ``overwrite``; it is replaced only once
    the export is complete."""
    _check_output(out, overwrite)
    written = 0
    with open_read_only(db_path, timeout_s=lock_timeout_s) as con:
        reader = con.sql(f'select * from {TABLE} order by "Timestamp"').to_arrow_reader(_FETCH_ROWS)
        with _writing(out) as path, pq.ParquetWriter(path, reader.schema, compression="zstd") as writer:
            for batch in reader:
                writer.write_batch(batch)
                written += batch.num_rows
    return written


_SPAN_QUERY = f"""
select "TraceId", "SpanId", "ParentSpanId", "TraceState", "SpanName", "SpanKind",
       map_entries("ResourceAttributes") as resource, "ScopeName", "ScopeVersion",
       map_entries("SpanAttributes") as attributes, epoch_ns("Timestamp") as start_ns, "Duration",
       "StatusCode", "StatusMessage",
       [epoch_ns(t) for t in "Events.Timestamp"] as event_times, "Events.Name" as event_names,
       [map_entries(m) for m in "Events.Attributes"] as event_attributes,
       "Links.TraceId" as link_traces, "Links.SpanId" as link_spans, "Links.TraceState" as link_states,
       [map_entries(m) for m in "Links.Attributes"] as link_attributes
from {TABLE} order by "TraceId", "Timestamp", "SpanId"
"""


def _attributes(entries: list[dict[str, str]] | None) -> list[dict[str, Any]]:
    return [{"key": e["key"], "value": {"stringValue": e["value"]}} for e in entries or ()]


def _span(row: dict[str, Any]) -> dict[str, Any]:
    span: dict[str, Any] = {"traceId": row["TraceId"], "spanId": row["SpanId"]}
    if row["ParentSpanId"]:
        span["parentSpanId"] = row["ParentSpanId"]
    if row["TraceState"]:
        span["traceState"] = row["TraceState"]
    span["name"] = row["SpanName"]
    kind = _KIND_NUMBER.get(row["SpanKind"], 0)
    if kind:
        span["kind"] = kind
    span["startTimeUnixNano"] = str(row["start_ns"])
    span["endTimeUnixNano"] = str(row["start_ns"] + row["Duration"])
    if row["attributes"]:
        span["attributes"] = _attributes(row["attributes"])
    if row["event_names"]:
        span["events"] = [
            {"timeUnixNano": str(t), "name": n, **({"attributes": _attributes(a)} if a else {})}
            for t, n, a in zip(row["event_times"], row["event_names"], row["event_attributes"], strict=True)
        ]
    if row["link_spans"]:
        links = zip(row["link_traces"], row["link_spans"], row["link_states"], row["link_attributes"], strict=True)
        span["links"] = [
            {"traceId": t, "spanId": s, **({"traceState": st} if st else {}), **({"attributes": _attributes(a)} if a else {})}
            for t, s, st, a in links
        ]
    status: dict[str, Any] = {}
    code = _STATUS_NUMBER.get(row["StatusCode"], 0)
    if code:
        status["code"] = code
    if row["StatusMessage"]:
        status["message"] = row["StatusMessage"]
    span["status"] = status
    return span


def _traces_data(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Group one line's spans by resource, then scope, as OTLP nests them."""
    resources: dict[str, tuple[list[dict[str, str]], dict[tuple[str, str], list[dict[str, Any]]]]] = {}
    for row in rows:
        key = json.dumps(row["resource"], sort_keys=True)
        scopes = resources.setdefault(key, (row["resource"], {}))[1]
        scopes.setdefault((row["ScopeName"], row["ScopeVersion"]), []).append(_span(row))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _attributes(resource)},
                "scopeSpans": [
                    {"scope": {k: v for k, v in (("name", name), ("version", version)) if v}, "spans": spans}
                    for (name, version), spans in scopes.items()
                ],
            }
            for resource, scopes in resources.values()
        ]
    }


def _chunks(con: Any, size: int) -> Iterator[list[dict[str, Any]]]:
    pending: list[dict[str, Any]] = []
    for batch in con.sql(_SPAN_QUERY).to_arrow_reader(_FETCH_ROWS):
        pending.extend(batch.to_pylist())
        while len(pending) >= size:
            yield pending[:size]
            del pending[:size]
    if pending:
        yield pending


def export_otlp_jsonl(
    db_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    spans_per_line: int = DEFAULT_SPANS_PER_LINE,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    overwrite: bool = False,
) -> int:
    """Write every span as OTLP JSON lines (spans of a trace kept together); returns the span count.

    An existing ``out`` is an ``OutputExists`` error unless ``overwrite``; it is replaced only once
    the export is complete."""
    _check_output(out, overwrite)
    written = 0
    with open_read_only(db_path, timeout_s=lock_timeout_s) as con:
        with _writing(out) as path, open(path, "w", encoding="utf-8") as f:
            for rows in _chunks(con, spans_per_line):
                f.write(json.dumps(_traces_data(rows), separators=(",", ":"), ensure_ascii=False))
                f.write("\n")
                written += len(rows)
    return written


def _refuse_filled(target: str, spans: int) -> None:
    """A table that holds spans already would get them twice: ClickHouse does not deduplicate."""
    if spans:
        raise InputError(target, f"otel_traces holds {spans} spans already; export into an empty table "
                                 "(the analysis reads each span once, but a second copy doubles the storage)")


def export_to_clickhouse(db_path: str | os.PathLike[str], target: Any, *,
                         lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> int:
    """Copy every span of the store into ``otel_traces`` of ``target`` (a ``restorelens.sources.Source``
    of kind chdb or clickhouse), created with the OpenTelemetry Collector ClickHouse exporter's own
    DDL when it does not exist, so the exporter and restorelens can share it. Returns the count.

    The spans go through a zstd Parquet copy in a temporary folder, in one insert: ClickHouse wants
    few large inserts. A table holding spans already is refused (an ``InputError``): ClickHouse
    keeps repeats. The store's engine scrapes (``engine_metrics``) stay behind: the Collector's
    schema has no place for them.
    """
    import tempfile

    from restorelens.store import EXPORTER_DDL

    with tempfile.TemporaryDirectory(prefix="restorelens-export-") as folder:
        copy = Path(folder) / "spans.parquet"
        count = export_parquet(db_path, copy, lock_timeout_s=lock_timeout_s)
        described = target.describe()
        try:
            if target.kind == "chdb":
                from chdb import session

                chdb = session.Session(target.path)
                try:
                    chdb.query(EXPORTER_DDL)
                    _refuse_filled(described, int(chdb.query("select count() from otel_traces", "CSV").bytes()))
                    # a string literal of our own temporary path (never the user's text), escaped as
                    # ClickHouse reads one; columns by name, whatever order the table has them in
                    literal = "'" + str(copy).replace("\\", "\\\\").replace("'", "\\'") + "'"
                    names = ", ".join(f"`{name}`" for name in pq.read_schema(copy).names)
                    chdb.query(f"insert into otel_traces ({names}) select {names} from file({literal}, Parquet)")
                finally:
                    chdb.close()
            else:
                import clickhouse_connect

                from restorelens.sources import password

                client = clickhouse_connect.get_client(host=target.host, port=target.port, username=target.user,
                                                       password=password(), database=target.database,
                                                       secure=target.secure)
                try:
                    client.command(EXPORTER_DDL)
                    _refuse_filled(described, int(client.command("select count() from otel_traces")))
                    client.insert_arrow("otel_traces", pq.read_table(copy))
                finally:
                    client.close()
        except ImportError as exc:
            raise InputError(described, f"needs the clickhouse extra (pip install 'restorelens[clickhouse]'): "
                                        f"{exc.name} is missing") from None
        except InputError:
            raise
        except Exception as exc:  # the drivers raise their own types; the line names what failed
            raise InputError(described, f"cannot write the spans: {str(exc).splitlines()[0]}") from None
    return count
