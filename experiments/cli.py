"""``restorelens demo``, ``run`` and ``experiment``: experiments from the command line.

``demo`` plays every scenario on loopback, then shows the report and the dashboard; ``run`` plays
one scenario, live or in virtual time, and records its spans; ``experiment`` plays a study's whole
matrix (scenarios × arms × seeds) and scores it as the study does. Kept light: heavy imports (the OTel
SDK, the cores, the servers) happen inside the commands.
"""

from __future__ import annotations

import click

from restorelens.errors import RestorelensError, SettingError
from restorelens.loadgen.cli import traces_endpoint

__all__ = ["COMMANDS", "demo", "experiment", "run"]


@click.command()
@click.option("--no-dashboard", is_flag=True, help="Print the report and exit instead of serving the dashboard.")
@click.option("--db", default=None, type=click.Path(dir_okay=False),
              help="Store to create (must not exist). Default: spans.duckdb in a fresh temporary folder.")
@click.option("--time-scale", type=click.FloatRange(min=1, max=100), default=10.0, show_default=True,
              help="Speed-up over real time of every scenario (10 plays them all in about 1.5 minutes); "
                   "every figure stays in protocol seconds.")
@click.option("--seed", type=int, default=0, show_default=True, help="Workload seed.")
def demo(no_dashboard: bool, db: str | None, time_scale: float, seed: int) -> None:
    """Run every part on 127.0.0.1 and show what "capacity restored" really took.

    Starts a collector (OTLP/HTTP into a DuckDB file), then plays, live and time-scaled: the
    Balanced and the Long-context MoFlux protocol, each under the gate's lend policy and its static
    baseline (simulated engine behind the gate), and a wake through each ModelClaim path (in place,
    make room, move, cold start: the gate's lifecycle driver over two simulated models). Prints the
    decomposition report, then serves the dashboard on the store until Ctrl-C (--no-dashboard: exit
    after the report).
    """
    import sys

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from restorelens.experiments.demo import run_demo

    console = Console(stderr=True)
    progress = None
    if sys.stderr.isatty():
        progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                            transient=True)
    run_demo(db, time_scale=time_scale, seed=seed, dashboard=not no_dashboard, echo=click.echo, progress=progress)


@click.command()
@click.argument("scenario")
@click.option("--virtual", is_flag=True, help="Run in virtual time (a discrete-event loop; no servers, no waiting).")
@click.option("--arm", default=None, help="Gate policy arm: fcfs, priority, static, lend (alias moflux). Default: lend.")
@click.option("--seed", type=int, default=0, show_default=True, help="Workload seed (the same seed replays the same load).")
@click.option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Live runs: speed-up over real time (10 runs a 105-s protocol in ~10.5 s).")
@click.option("--out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write every service's spans to this OTLP/JSON-lines file.")
@click.option("--collector", default=None, help="Send spans to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318).")
@click.option("--run-id", default=None, help="Label for this run (restore.run_id); random by default.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as one JSON object.")
def run(scenario: str, virtual: bool, arm: str | None, seed: int, time_scale: float, out: str | None,
        collector: str | None, run_id: str | None, as_json: bool) -> None:
    """Play SCENARIO (e.g. moflux-balanced, moflux-long-context) and record its spans.

    Live (default): the simulator and the gate run on loopback and the client drives them in real
    time, sped up by --time-scale. --virtual: the same client, gate and engine cores run together
    in virtual time and emit the same spans with virtual timestamps, in well under a second.
    Exits 1 when spans could not be exported (e.g. the collector is unreachable).
    """
    import json

    from restorelens.experiments.runner import RunTelemetry, run_live, run_virtual
    from restorelens.experiments.scenarios import get_scenario

    chosen = get_scenario(scenario, arm)
    if bool(out) == bool(collector):
        raise SettingError("--out/--collector", "give exactly one: --out FILE or --collector URL")
    if collector:
        telemetry = RunTelemetry("otlp", endpoint=traces_endpoint(collector))
    else:
        telemetry = RunTelemetry("file", path=out)
    with telemetry:
        if virtual:
            report = run_virtual(chosen, seed, telemetry.providers, run_id)
        else:
            report = run_live(chosen, seed, telemetry.providers, run_id, time_scale=time_scale)
    summary = report.summary()
    if as_json:
        click.echo(json.dumps(summary))
    else:
        for key, value in summary.items():
            click.echo(f"{key:30} {value}")
    telemetry.raise_if_spans_dropped()


@click.command()
@click.argument("scenarios", nargs=-1, required=True, metavar="SCENARIO...")
@click.option("--arms", default="fcfs,priority,static,lend", show_default=True,
              help="Comma-separated arms: fcfs, priority, static, lend.")
@click.option("--seeds", default="1-5", show_default=True, help="Seeds: a range (1-5), a list (1,3,7) or both.")
@click.option("--live", is_flag=True, help="Play on loopback servers instead of in virtual time (one run at a time).")
@click.option("--time-scale", type=click.FloatRange(min=1, max=100), default=10.0, show_default=True,
              help="With --live: speed-up over real time; every figure stays in protocol seconds.")
@click.option("--workers", type=click.IntRange(min=1, max=64), default=None,
              help="Virtual runs at once (default: one per core).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder for runs/*.jsonl, spans.duckdb, summary.json and summary.md (a store there must not exist).")
def experiment(scenarios: tuple[str, ...], arms: str, seeds: str, live: bool, time_scale: float,
               workers: int | None, out_dir: str) -> None:
    """Play every SCENARIO x arm x seed and print the MoFlux study's table.

    Virtual time by default, the runs in parallel across cores. Every run's spans are written to
    OUT/runs/, loaded into OUT/spans.duckdb and scored with the study's definitions: interactive
    SLO goodput of the contention window, batch borrow goodput, TTFT p95, the lending episode's
    times, and the gates H1 (priority - fcfs >= 0), H2 (lend - priority >= -0.04) and H3
    (lend - static batch borrow >= 0.02) over nearest-rank medians. The table goes to stdout and
    to OUT/summary.md; OUT/summary.json holds the same figures.
    """
    import json
    import sys
    from pathlib import Path

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from restorelens.analysis import Analysis
    from restorelens.collector import load_paths
    from restorelens.experiments.matrix import Matrix, parse_arms, parse_seeds, play
    from restorelens.experiments.scenarios import SCENARIOS
    from restorelens.experiments.study import score

    matrix = Matrix(tuple(dict.fromkeys(scenarios)), parse_arms(arms), parse_seeds(seeds))
    out = Path(out_dir)
    db = out / "spans.duckdb"
    if db.exists():
        raise SettingError("--out", f"{db} exists: give a new folder, so runs of two experiments do not mix")
    console = Console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=True, disable=not sys.stderr.isatty())
    with progress:
        task = progress.add_task("runs", total=len(matrix))
        files = play(matrix, out / "runs", live=live, time_scale=time_scale, workers=workers,
                     on_done=lambda cell: progress.update(task, advance=1, description=cell.run_id))
    loaded = load_paths(files, db)
    if loaded.errors:
        raise RestorelensError(f"{db}: spans of the runs could not be loaded: {loaded.errors[0]}")
    scenario_of = {SCENARIOS[name].profile: name for name in matrix.scenarios}
    with Analysis.open(db) as analysis:
        table = score(analysis, scenario_of, matrix.arms)
    (out / "summary.json").write_text(json.dumps(table.to_json(), indent=2) + "\n")
    markdown = table.to_markdown()
    (out / "summary.md").write_text(markdown)
    click.echo(markdown, nl=False)
    click.echo(f"{len(matrix)} runs, {loaded.loaded} spans: {db}, {out / 'summary.json'}, {out / 'summary.md'}", err=True)


COMMANDS = [demo, run, experiment]
