"""``restorelens demo``: the whole product on loopback, then the report and the dashboard."""

from __future__ import annotations

import click

__all__ = ["COMMANDS", "demo"]


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

    from restorelens.demo import run_demo

    console = Console(stderr=True)
    progress = None
    if sys.stderr.isatty():
        progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console,
                            transient=True)
    run_demo(db, time_scale=time_scale, seed=seed, dashboard=not no_dashboard, echo=click.echo, progress=progress)


COMMANDS = [demo]
