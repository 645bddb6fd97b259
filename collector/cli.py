"""``restorelens collect``, ``restorelens load`` and ``restorelens export`` (heavy imports inside)."""

from __future__ import annotations

import click

from restorelens.settings import DEFAULT_DRAIN_TIMEOUT_S, DEFAULT_HEAD_TIMEOUT_S

__all__ = ["COMMANDS", "MIN_TOKEN_CHARS", "collect", "export", "load"]

#: Inputs at least this large get a progress bar.
PROGRESS_MIN_BYTES = 16 * 1024 * 1024
_ERRORS_SHOWN = 50
#: Shortest accepted bearer token: the same minimum as the gate's admin token (gate.admin_token).
MIN_TOKEN_CHARS = 8

_db_option = click.option(
    "--db", "db", required=True, type=click.Path(dir_okay=False), help="DuckDB span store file (created if absent)."
)
_existing_db_option = click.option(
    "--db",
    "db",
    required=True,
    type=click.Path(dir_okay=False),
    help="An existing span store (the DuckDB file collect or load wrote).",
)


@click.command("collect")
@_db_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=4318, show_default=True, type=click.IntRange(0, 65535), help="OTLP/HTTP port (0: any free port, printed at start).")
@click.option(
    "--token",
    envvar="RESTORELENS_COLLECTOR_TOKEN",
    default=None,
    help=f"Require 'Authorization: Bearer TOKEN', at least {MIN_TOKEN_CHARS} characters (env RESTORELENS_COLLECTOR_TOKEN).",
)
@click.option(
    "--max-body-bytes",
    default=64 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1),
    help="Largest request body, compressed or decompressed (413 above).",
)
@click.option(
    "--max-header-bytes",
    default=64 * 1024,
    show_default=True,
    type=click.IntRange(1),
    help="Largest request line plus headers (431 at once above).",
)
@click.option(
    "--scrape",
    "scrape_targets",
    multiple=True,
    metavar="URL",
    help="An engine's Prometheus /metrics to scrape into table engine_metrics (e.g. http://127.0.0.1:8000/metrics); "
    "repeat for several engines. No credentials (user:pass@): the URL is shown on GET /metrics and in logs.",
)
@click.option("--interval-s", default=0.25, show_default=True, type=float, help="Seconds between scrapes of each --scrape URL.")
@click.option(
    "--scrape-timeout-s", default=1.0, show_default=True, type=float,
    help="Longest wait for one scrape's whole exchange (connecting, head and body).",
)
@click.option(
    "--max-scrape-bytes",
    default=8 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1),
    help="Largest scrape answer, decompressed (a failed scrape above).",
)
@click.option(
    "--head-timeout-s", default=DEFAULT_HEAD_TIMEOUT_S, show_default=True, type=float,
    help="Seconds a client may take to send a request head, from its connection's opening or the head's first "
    "byte to its end (408 and closed beyond).",
)
@click.option(
    "--max-client-connections", default=None, type=click.IntRange(1),
    show_default="half of what the open-file limit leaves after 64",
    help="Client connections open at once; past it the one waiting longest for its head is closed, never one "
    "being served.",
)
@click.option(
    "--drain-timeout-s", default=DEFAULT_DRAIN_TIMEOUT_S, show_default=True, type=float,
    help="At SIGTERM or Ctrl-C, seconds the requests being served may take to finish before their connections "
    "are cut (within Kubernetes' 30-s grace period).",
)
@click.option(
    "--max-series-per-scrape",
    default=1000,
    show_default=True,
    type=click.IntRange(1),
    help="Most series of the kept metrics read from one scrape answer (a real vLLM has 6 per engine); the rest "
    "are neither read nor stored, counted on GET /metrics and logged once per URL.",
)
def collect(
    db: str,
    host: str,
    port: int,
    token: str | None,
    max_body_bytes: int,
    max_header_bytes: int,
    scrape_targets: tuple[str, ...],
    interval_s: float,
    scrape_timeout_s: float,
    max_scrape_bytes: int,
    head_timeout_s: float,
    max_client_connections: int | None,
    drain_timeout_s: float,
    max_series_per_scrape: int,
) -> None:
    """Receive OTLP/HTTP traces on POST /v1/traces into the span store DB.

    Point any OpenTelemetry SDK or Collector at http://HOST:PORT/v1/traces (protobuf or JSON, gzip,
    deflate or zstd). A 200 answer means the spans are committed. Readers (restorelens report, the
    dashboard) can open DB while this runs. Ctrl-C stops after storing what was accepted.

    With --scrape URL, the engine's pressure (vLLM's running and waiting requests, KV-cache usage,
    preemptions) is scraped every --interval-s into table engine_metrics of DB, timestamped on the
    spans' clock (this host's UTC wall clock). A failed scrape is counted on GET /metrics and logged
    once until it recovers; it never stops collection. Only the kept metrics' lines of an answer are
    read, at most --max-series-per-scrape of them.
    """
    import math

    from restorelens.collector.scrape import target_problem
    from restorelens.errors import SettingError

    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise SettingError("--token", f"too short: use at least {MIN_TOKEN_CHARS} characters")
    for option, seconds in (("--interval-s", interval_s), ("--scrape-timeout-s", scrape_timeout_s),
                            ("--head-timeout-s", head_timeout_s)):
        if not (math.isfinite(seconds) and seconds > 0):
            raise SettingError(option, f"must be a number of seconds > 0, not {seconds:g}")
    if not (math.isfinite(drain_timeout_s) and drain_timeout_s >= 0):
        raise SettingError("--drain-timeout-s", f"must be a number of seconds >= 0, not {drain_timeout_s:g}")
    for i, target in enumerate(scrape_targets):
        problem = target_problem(target) or (f"{target} given twice" if target in scrape_targets[:i] else None)
        if problem:
            raise SettingError("--scrape", problem)
    from restorelens.collector.writer import DEFAULT_MAX_PENDING_SAMPLES

    if max_series_per_scrape > DEFAULT_MAX_PENDING_SAMPLES:
        raise SettingError(
            "--max-series-per-scrape",
            f"at most {DEFAULT_MAX_PENDING_SAMPLES}, the engine metric samples the store's writer lets wait: "
            "a larger scrape could never be stored",
        )

    from restorelens.collector.receiver import TRACES_PATH, create_receiver_app
    from restorelens.serving import ServingLimits, listen_on, serve

    # Bound here rather than by uvicorn so that port 0 shows the real port, and a busy port or a foreign
    # address is a one-line error before the store file is created.
    with listen_on(host, port) as sock:
        app = create_receiver_app(
            db,
            token=token,
            max_body_bytes=max_body_bytes,
            max_header_bytes=max_header_bytes,
            scrape_targets=scrape_targets,
            scrape_interval_s=interval_s,
            scrape_timeout_s=scrape_timeout_s,
            max_scrape_bytes=max_scrape_bytes,
            max_series_per_scrape=max_series_per_scrape,
        )
        bound_port = sock.getsockname()[1]
        url = f"http://{host}:{bound_port}{TRACES_PATH}"
        scraping = f", scraping {', '.join(scrape_targets)} every {interval_s:g} s" if scrape_targets else ""
        limits = ServingLimits(head_timeout_s, max_client_connections, drain_timeout_s)
        serve(app, sock, ready=f"collecting OTLP/HTTP traces on {url} into {db}{scraping} (Ctrl-C to stop)", limits=limits)


@click.command("load")
@click.argument("files", nargs=-1, required=True)
@_db_option
def load(files: tuple[str, ...], db: str) -> None:
    """Load trace files (globs and directories too) into the span store DB.

    Each file's format is told by its content, never its name, and printed per file: OTLP JSON
    (lines or one document) or length-prefixed OTLP protobuf, as the Collector's file exporter
    writes them; Jaeger JSON (the query API's answer or the UI's download); Grafana Tempo's
    trace-by-ID JSON ("batches" or the v2 "trace"); Parquet from restorelens export. Any but
    Parquet may be gzip- or zstd-compressed.

    Spans already stored are counted as duplicates, not stored twice. Malformed lines are reported
    as FILE:LINE: reason and skipped, unreadable files as FILE: reason; the exit code is 1 when
    anything was skipped.
    """
    from pathlib import Path

    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

    from restorelens.collector.loader import expand_paths, load_paths

    paths = expand_paths(files)
    total = sum(p.stat().st_size for p in paths)
    if total >= PROGRESS_MIN_BYTES:
        columns = (BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task("loading", total=total)
            summary = load_paths(paths, db, progress=lambda done, _total: progress.update(task, completed=done))
    else:
        summary = load_paths(paths, db)
    for message in summary.errors[:_ERRORS_SHOWN]:
        click.echo(message, err=True)
    if len(summary.errors) > _ERRORS_SHOWN:
        click.echo(f"... and {len(summary.errors) - _ERRORS_SHOWN} more problems", err=True)
    for read in summary.inputs:
        click.echo(read.describe())
    click.echo(f"{summary.describe()} into {Path(db)}")
    if summary.rejected or summary.malformed:
        raise SystemExit(1)


@click.command("export")
@_existing_db_option
@click.option(
    "--format", "fmt", type=click.Choice(["parquet", "otlp-json"]), help="Output format of OUT (a file)."
)
@click.option("--to", "target", metavar="TARGET",
              help="Copy the spans into otel_traces of a ClickHouse server (clickhouse://USER@HOST:PORT/DATABASE; "
                   "password from RESTORELENS_CLICKHOUSE_PASSWORD) or a chDB folder (chdb:PATH), created with the "
                   "OpenTelemetry Collector ClickHouse exporter's schema when absent; instead of OUT and --format.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists (refused without).")
@click.argument("out", type=click.Path(dir_okay=False), required=False)
def export(db: str, fmt: str | None, target: str | None, out: str | None, force: bool) -> None:
    """Export every span of DB to OUT: Parquet (zstd, the otel_traces columns) or OTLP JSON lines
    (loadable by Jaeger's UI, the Collector and restorelens load); or, with --to, into ClickHouse.

    OUT is written under a temporary name next to it and renamed once complete, so a failed
    export never leaves half a file in place of a good one. --to appends to the table.
    """
    from restorelens.collector.export import OutputExists, export_otlp_jsonl, export_parquet, export_to_clickhouse
    from restorelens.errors import InputError, SettingError

    if target is not None:
        if out is not None or fmt is not None or force:
            raise SettingError("--to", "writes to ClickHouse: give OUT, --format and --force only without it")
        from restorelens.sources import parse_source

        destination = parse_source(target, "--to")
        if destination.kind == "duckdb":
            raise SettingError("--to", "takes clickhouse://USER@HOST:PORT/DATABASE or chdb:PATH")
        count = export_to_clickhouse(db, destination)
        click.echo(f"{count} spans written to {destination.describe()} (engine scrapes stay in the store)")
        return
    if out is None or fmt is None:
        raise SettingError("OUT", "give OUT and --format (a file), or --to (ClickHouse)")
    exporter = export_parquet if fmt == "parquet" else export_otlp_jsonl
    try:
        count = exporter(db, out, overwrite=force)
    except OutputExists:
        raise InputError(out, "already exists (--force replaces it)") from None
    click.echo(f"{count} spans written to {out}")


COMMANDS = [collect, load, export]
