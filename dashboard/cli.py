"""``restorelens dashboard``: check the span store, then hand over to Streamlit (heavy imports inside)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from restorelens.analysis import window_options
from restorelens.dashboard.environment import DEFAULT_MAX_UPLOAD_BYTES

__all__ = ["COMMANDS", "dashboard", "streamlit_command"]


def streamlit_command(host: str, port: int, max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES) -> list[str]:
    """The ``python -m streamlit run`` command line for the packaged app."""
    from restorelens.dashboard.uploads import upload_size_mib

    app = Path(__file__).resolve().parent / "pages" / "app.py"
    return [
        sys.executable, "-m", "streamlit", "run", str(app),
        "--server.address", host,
        "--server.port", str(port),
        "--server.headless", "true",
        "--server.fileWatcherType", "none",
        "--browser.gatherUsageStats", "false",
        # no Deploy button, rerun or clear-cache entries: whoever opens the dashboard views it
        "--client.toolbarMode", "viewer",
        # Streamlit holds an upload in memory and refuses it past this (its default is 200 MB):
        # the compressed side of --max-upload-bytes, in whole MiB; the app checks the exact bytes.
        "--server.maxUploadSize", str(upload_size_mib(max_upload_bytes)),
    ]


def _check_listen(host: str, port: int) -> None:
    """Bind (host, port) once and let go: Streamlit binds it later, in the process the command
    becomes, and would say "Port N is not available" after the banner; a busy port or a bad host
    is one line here instead, as from every other server."""
    from restorelens.serving import listen_on

    listen_on(host, port, listen=False).close()


@click.command("dashboard")
@click.option("--db", "db", type=click.Path(dir_okay=False),
              help="DuckDB span store to show (opened read-only; a collector may keep writing it); the same as "
                   "--source PATH.")
@click.option("--source", "source_text", metavar="SOURCE",
              help="Where the spans are: a DuckDB store path, chdb:PATH or clickhouse://USER@HOST:PORT/DATABASE "
                   "(password from RESTORELENS_CLICKHOUSE_PASSWORD); read only, frames kept for a minute.")
@window_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (loopback by default).")
@click.option("--port", default=8501, show_default=True, type=click.IntRange(1, 65535), help="HTTP port.")
@click.option("--max", "limits", multiple=True, metavar="METRIC.STAT=N",
              help="A limit the overview checks, e.g. wake.overshoot_s.p95=1 (repeatable; default: "
                   "lending.ttft_s.p95=5 and wake.overshoot_s.p95=1).")
@click.option("--max-upload-bytes", "max_upload_bytes", default=DEFAULT_MAX_UPLOAD_BYTES, show_default=True,
              type=click.IntRange(min=1), metavar="N",
              help="Largest file the sidebar's upload takes, as sent and once decompressed (256 MiB by default).")
@click.option("--label", "labels", multiple=True, metavar="LABEL=ATTR",
              help="Read a label from your own span or resource attribute, e.g. traffic_class=app.tier (repeatable; "
                   "labels: traffic_class, policy, workload, run_id, seed, model), on every store the dashboard "
                   "shows. Wins over --config's [analysis.labels].")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), default=None,
              help="TOML file whose [analysis.labels] table maps labels onto your attribute names (other tables "
                   "ignored).")
def dashboard(db: str | None, source_text: str | None, since: str | None, until: str | None, runs: tuple[str, ...],
              host: str, port: int, limits: tuple[str, ...], max_upload_bytes: int, labels: tuple[str, ...],
              config_file: str | None) -> None:
    """Open the recovery dashboard on DB (or --source) at http://HOST:PORT.

    Pages: overview (episode counts, where each episode's time went, distributions per policy and
    wake path, broken limits), lending and wake episodes with their timelines and the engine's
    pressure, the engine view of every request an engine served (with or without a gate), the
    policy experiment (frontier and the study's gates), model lifecycle per run, model and pod,
    trace explorer. The sidebar filters runs (scenario, policy, seed, run id), sets the SLO and
    the percentile method, and can switch to the sample traces or an uploaded OTLP file.

    --since, --until and --run read DB (or --source) for that window only, pushed down to the
    store as report and check push it (at most 64 KiB of run ids); the sample traces and
    uploads are read whole.
    """
    from restorelens.analysis import label_mapping, parse_limit, parse_window
    from restorelens.dashboard import environment, source

    for text in limits:
        parse_limit(text, "--max")
    mapping = label_mapping(config_file, labels)
    window = parse_window(since, until, runs)
    window_text = environment.window_env_value(window)
    from restorelens.errors import SettingError
    from restorelens.sources import parse_source

    if (db is None) == (source_text is None):
        raise SettingError("--source", "give the spans' store: --db PATH or --source SOURCE (one of them)")
    where = parse_source(source_text, "--source") if source_text is not None else parse_source(f"duckdb:{db}")
    if where.kind == "duckdb":
        path = str(Path(where.path).resolve())
    else:
        path = f"chdb:{Path(where.path).resolve()}" if where.kind == "chdb" else source_text.strip()  # type: ignore[union-attr]
    _check_listen(host, port)
    if not source.validate_store(path, window=window):
        from restorelens.analysis import empty_note

        click.echo(empty_note(path, window), err=True)
    env = dict(os.environ)
    env[environment.DB_ENV] = path
    env[environment.MAX_UPLOAD_ENV] = str(max_upload_bytes)
    if limits:
        env[environment.LIMITS_ENV] = ";".join(limits)
    # an inherited mapping must not outlive a command line that gives none
    env.pop(environment.LABELS_ENV, None)
    if mapping:
        env[environment.LABELS_ENV] = environment.labels_env_value(mapping)
    env.pop(environment.WINDOW_ENV, None)  # the same for a window
    if not window.everything:
        env[environment.WINDOW_ENV] = window_text
    command = streamlit_command(host, port, max_upload_bytes)
    click.echo(f"restorelens dashboard: http://{host}:{port} (spans from {path}); Ctrl-C stops it", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # Replace this process, so that stopping it (Ctrl-C, SIGTERM to its pid) stops Streamlit too.
    os.execve(command[0], command, env)


COMMANDS = [dashboard]
