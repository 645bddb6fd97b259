"""``restorelens report`` and ``restorelens check``: the analysis from the command line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from restorelens.analysis.report import FORMATS, SECTIONS

__all__ = ["COMMANDS", "check", "note_if_empty", "report", "resolve_source", "source_options", "store_errors", "window_options"]

_DB = click.option(
    "--db",
    "db_path",
    type=click.Path(dir_okay=False),
    help="DuckDB span store (written by `restorelens collect` / `restorelens load`); the same as --source PATH.",
)
_SOURCE = click.option(
    "--source",
    "source_text",
    metavar="SOURCE",
    help="Where the spans are: a DuckDB store path, chdb:PATH (the embedded ClickHouse engine's data folder) or "
         "clickhouse://USER@HOST:PORT/DATABASE (clickhouses:// for TLS; password from "
         "RESTORELENS_CLICKHOUSE_PASSWORD), with otel_traces in the OpenTelemetry Collector ClickHouse exporter's "
         "schema. Read only.",
)
_SINCE = click.option("--since", metavar="TIME", help="Only spans that started at or after TIME (ISO 8601; UTC when "
                                                        "no offset is given), pushed down to the store.")
_UNTIL = click.option("--until", metavar="TIME", help="Only spans that started before TIME (ISO 8601).")
_RUN = click.option("--run", "runs", multiple=True, metavar="RUN_ID",
                    help="Only spans of this run (restore.run_id on the span or its resource; repeatable).")


def window_options(command: Any) -> Any:
    """``--since``, ``--until`` and ``--run`` (the command takes ``since``, ``until`` and ``runs``;
    ``analysis.window.parse_window`` reads them): the window of every command that reads a store."""
    for option in reversed((_SINCE, _UNTIL, _RUN)):
        command = option(command)
    return command


def source_options(command: Any) -> Any:
    """``--db``, ``--source`` and the window options: where a command reads its spans."""
    return _DB(_SOURCE(window_options(command)))


def resolve_source(db_path: str | None, source_text: str | None, since: str | None, until: str | None,
                   runs: tuple[str, ...]) -> tuple[Any, Any]:
    """The source (``--db`` or ``--source``, exactly one) and the window the options name."""
    from restorelens.analysis.window import parse_window
    from restorelens.errors import SettingError
    from restorelens.sources import parse_source

    if (db_path is None) == (source_text is None):
        raise SettingError("--source", "give the spans' store: --db PATH or --source SOURCE (one of them)")
    window = parse_window(since, until, runs)
    source = parse_source(source_text, "--source") if source_text is not None else parse_source(f"duckdb:{db_path}")
    return source, window


@contextlib.contextmanager
def store_errors(db_path: Any) -> Iterator[None]:
    """A store whose spans the SQL cannot decompose (a value out of every range the collector
    checks, written by another tool) is a one-line error naming the store, not a traceback."""
    import duckdb

    from restorelens.errors import InputError, first_line

    try:
        yield
    except duckdb.Error as exc:
        raise InputError(str(db_path), f"cannot decompose its spans: {first_line(exc)}") from None


def note_if_empty(analysis: Any, source: Any, window: Any) -> None:
    """Say on stderr that the window holds no spans: an empty answer must not read as a good one."""
    from restorelens.analysis.sources import empty_note

    if not analysis.holds_spans():
        click.echo(empty_note(source.describe(), window), err=True)


def _seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    from restorelens.analysis.views import checked_seconds

    return checked_seconds(param.opts[0], value)


_SLO_TTFT = click.option("--slo-ttft-s", default=5.0, show_default=True, callback=_seconds,
                         help="Interactive SLO: TTFT limit.")
_PERCENTILE = click.option("--percentile", type=click.Choice(["linear", "nearest-rank"]), default="linear",
                           show_default=True,
                           help="How percentiles and medians are read: linear interpolation, or the value at "
                                "rank ceil(q*n) (as studies report a median of 5 seeds: the 3rd).")
_LABEL = click.option(
    "--label", "labels", multiple=True, metavar="LABEL=ATTR",
    help="Read a label from your own span or resource attribute, e.g. traffic_class=app.tier (repeatable; "
         "labels: traffic_class, policy, workload, run_id, seed, model). Wins over --config's [analysis.labels].",
)
_CONFIG = click.option(
    "--config", "config_file", type=click.Path(dir_okay=False), default=None,
    help="TOML file whose [analysis.labels] table maps labels onto your attribute names (other tables ignored).",
)
_SLO_E2E = click.option("--slo-e2e-s", default=30.0, show_default=True, callback=_seconds,
                        help="Interactive SLO: e2e limit.")


@click.command()
@source_options
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table",
              show_default=True, help="Output format (csv: one block per section after a `# section` line).")
@click.option("--section", "sections", multiple=True, type=click.Choice(SECTIONS),
              help="Only these sections (repeatable). Default: all.")
@_SLO_TTFT
@_SLO_E2E
@_PERCENTILE
@_LABEL
@_CONFIG
def report(db_path: str | None, source_text: str | None, since: str | None, until: str | None,
           runs: tuple[str, ...], fmt: str, sections: tuple[str, ...], slo_ttft_s: float, slo_e2e_s: float,
           percentile: str, labels: tuple[str, ...], config_file: str | None) -> None:
    """Decompose every restoration in a span store and print the statistics.

    Lending episodes (grant restored, borrowed work drained, engine scheduled, first token), wake
    episodes (Retry-After hint, engine ready, readiness observed, overshoot, engine scheduled),
    request latencies, the engine's view of every request it served (queue, schedule delay, TTFT,
    prefill, decode per engine x traffic class, with or without a gate), and goodput per policy x
    workload x seed with paired differences. A request that passed no gate shows as "no gate".
    """
    from restorelens.analysis.report import build_report, render
    from restorelens.analysis.settings import label_mapping
    from restorelens.analysis.sources import open_analysis
    from restorelens.analysis.views import Slo

    source, window = resolve_source(db_path, source_text, since, until, runs)
    mapping = label_mapping(config_file, labels)
    slo = Slo(ttft_s=slo_ttft_s, e2e_s=slo_e2e_s)
    with store_errors(source.describe()), open_analysis(source, window=window, slo=slo, materialize=True,
                                                          labels=mapping) as analysis:
        note_if_empty(analysis, source, window)
        built = build_report(analysis, percentile=percentile)
    if sections:
        built = {name: frame for name, frame in built.items() if name in sections}
    click.echo(render(built, fmt), nl=False)


@click.command()
@source_options
@click.option("--max", "maxima", multiple=True, metavar="METRIC.STAT=NUMBER", required=True,
              help="A limit, e.g. overshoot_s.p95=1.0 or drain_s.max=5 or wake.censored.count=0 (repeatable). "
                   "STAT: p50 p90 p95 p99 max min mean; count for flags. Qualify with lending./wake./requests./engine. "
                   "when a metric is in several views. An engine startup phase by its span name in brackets: "
                   "'wake.phase[Warmup (CPU)].p95=35' (quote it for the shell).")
@click.option("--allow-empty", is_flag=True,
              help="Let a limit with nothing to check hold (no values of its metric, e.g. an empty store or "
                   "no such episodes). Without it, such a limit fails the check.")
@_PERCENTILE
@_LABEL
@_CONFIG
def check(db_path: str | None, source_text: str | None, since: str | None, until: str | None,
          runs: tuple[str, ...], maxima: tuple[str, ...], allow_empty: bool, percentile: str, labels: tuple[str, ...],
          config_file: str | None) -> None:
    """Exit 1 listing every limit the episodes exceed; exit 0 when all hold (for CI).

    A limit must rest on at least one value: one whose metric has no values (an empty store, a
    run that produced no such episodes, every episode censored) fails too, unless --allow-empty.

    Exit codes: 0 every limit holds; 1 a limit is exceeded or has nothing to check; 2 the check
    could not run (a malformed --max, an unknown metric or statistic, a bad option value, a
    missing, unreadable or busy store).
    """
    from restorelens.analysis.limits import Violation, evaluate, parse_limit
    from restorelens.analysis.settings import label_mapping
    from restorelens.analysis.sources import open_analysis
    from restorelens.errors import RestorelensError

    try:
        source, window = resolve_source(db_path, source_text, since, until, runs)
        limits = [parse_limit(text, "--max") for text in maxima]
        mapping = label_mapping(config_file, labels)
        with store_errors(source.describe()), open_analysis(source, window=window, materialize=True,
                                                              labels=mapping) as analysis:
            note_if_empty(analysis, source, window)
            evaluations = evaluate(analysis, limits, percentile=percentile)
    except RestorelensError as exc:
        # Exit 1 must mean "a limit failed" alone, so that CI can tell a regression from a job
        # that is set up wrong; a check that could not judge exits 2, as click's usage errors do.
        exc.exit_code = 2
        raise
    unchecked = [e for e in evaluations if e.unchecked]
    if allow_empty:
        for empty in unchecked:
            click.echo(f"note: {empty.limit.name} has {empty.describe_unchecked()}; the limit holds (--allow-empty)",
                       err=True)
        unchecked = []
    violations = [Violation(e.limit, e.value, e.count) for e in evaluations if e.violated]  # type: ignore[arg-type]
    if violations:
        click.echo(f"{len(violations)} of {len(limits)} limits exceeded:", err=True)
        for violation in violations:
            click.echo(f"  {violation}", err=True)
    if unchecked:
        click.echo(f"{len(unchecked)} of {len(limits)} limits had nothing to check (--allow-empty accepts that):",
                   err=True)
        for empty in unchecked:
            click.echo(f"  {empty.limit.name}: {empty.describe_unchecked()}", err=True)
    if violations or unchecked:
        click.get_current_context().exit(1)
    click.echo(f"all {len(limits)} limits hold")


COMMANDS = [report, check]
