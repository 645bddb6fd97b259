"""``restorelens demo``, ``run`` and ``experiment``: experiments from the command line.

``demo`` plays every scenario on loopback, then shows the report and the dashboard; ``run`` plays
one scenario, live or in virtual time, and records its spans; ``experiment`` plays a study's whole
matrix (scenarios × arms × seeds) and scores it as the study does. Kept light: heavy imports (the OTel
SDK, the cores, the servers) happen inside the commands.
"""

from __future__ import annotations

from typing import Any

import click

from restorelens.errors import RestorelensError, SettingError
from restorelens.gate import DEFAULT_POLICY, DEFAULTS, POLICIES, check_option, named_in_prose, study_policies
from restorelens.loadgen import traces_endpoint

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
@click.option("--arm", default=None, help=f"Gate policy arm: {named_in_prose(tuple(POLICIES))}. Default: {DEFAULT_POLICY}. "
                                         "ModelClaim scenarios: fixed (default), calibrated, hold.")
@click.option("--seed", type=int, default=0, show_default=True, help="Workload seed (the same seed replays the same load).")
@click.option("--cycles", type=click.IntRange(min=1), default=None,
              help="ModelClaim scenarios: sleep -> wake cycles of the run.  [default: 10]")
@click.option("--time-scale", type=click.FloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="Live runs: speed-up over real time (10 runs a 105-s protocol in ~10.5 s).")
@click.option("--out", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write every service's spans to this OTLP/JSON-lines file.")
@click.option("--collector", default=None, help="Send spans to this OTLP/HTTP endpoint (e.g. http://127.0.0.1:4318).")
@click.option("--run-id", default=None, help="Label for this run (restore.run_id); random by default.")
@click.option("--json", "as_json", is_flag=True, help="Print the run summary as one JSON object.")
def run(scenario: str, virtual: bool, arm: str | None, seed: int, cycles: int | None, time_scale: float,
        out: str | None, collector: str | None, run_id: str | None, as_json: bool) -> None:
    """Play SCENARIO (e.g. moflux-balanced, moflux-long-context) and record its spans.

    Live (default): the simulator and the gate run on loopback and the client drives them in real
    time, sped up by --time-scale. --virtual: the same client, gate and engine cores run together
    in virtual time and emit the same spans with virtual timestamps, in well under a second.
    Exits 1 when spans could not be exported (e.g. the collector is unreachable).
    """
    import json

    from restorelens.experiments.catalog import get_scenario
    from restorelens.experiments.run_telemetry import RunTelemetry
    from restorelens.experiments.runner import new_run_id, run_live, run_virtual

    chosen = with_cycles(get_scenario(scenario, arm), cycles)
    if bool(out) == bool(collector):
        raise SettingError("--out/--collector", "give exactly one: --out FILE or --collector URL")
    run_id = run_id or new_run_id()
    labels = {"run_id": run_id, "scenario": chosen.name}
    if collector:
        telemetry = RunTelemetry("otlp", endpoint=traces_endpoint(collector), **labels)
    else:
        telemetry = RunTelemetry("file", path=out, **labels)
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


def _budget(ctx: click.Context, param: click.Parameter, value: float) -> float:
    return float(check_option("restore_budget_s", value, "--restore-budget-s"))


@click.command()
@click.argument("scenarios", nargs=-1, metavar="[SCENARIO]...")
@click.option("--replay", "replay_db", type=click.Path(dir_okay=False), default=None, metavar="DB",
              help="Instead of SCENARIOs: replay each recorded run of this span store (arrivals, classes, token "
                   "counts), as docs/experiments.md describes.")
@click.option("--replay-run", "replay_runs", multiple=True, metavar="RUN_ID",
              help="With --replay: only this recorded run (restore.run_id; repeatable). Default: every run.")
@click.option("--replay-engine", default=None, metavar="PRESET",
              help="With --replay: the engine preset to replay on (docs/sim.md).  [default: qwen2.5-1.5b-m1]")
@click.option("--replay-label", "replay_labels", multiple=True, metavar="LABEL=ATTR",
              help="With --replay: read a label of the recorded spans from your own attribute, e.g. "
                   "traffic_class=app.tier (repeatable; as report's --label).")
@click.option("--replay-config", type=click.Path(dir_okay=False), default=None,
              help="With --replay: TOML file whose [analysis.labels] maps the recorded spans' labels.")
@click.option("--replay-class", "replay_classes", multiple=True, metavar="VALUE=CLASS",
              help="With --replay: play requests recorded with class VALUE as CLASS (interactive or batch), "
                   "e.g. gold=interactive (repeatable). Any other value, or none: interactive.")
@click.option("--arms", default=None,
              help=f"Comma-separated arms: the study's {named_in_prose(study_policies())}; restorelens's "
                   f"{named_in_prose([name for name in POLICIES if name not in study_policies()])}. ModelClaim "
                   f"scenarios: fixed, calibrated, hold.  [default: {','.join(study_policies())}; ModelClaim: fixed]")
@click.option("--cycles", type=click.IntRange(min=1), default=None,
              help="ModelClaim scenarios: sleep -> wake cycles per run.  [default: 10]")
@click.option("--seeds", default=None,
              help="Seeds: a range (1-5), a list (1,3,7) or both.  [default: 1-5; with --replay: 1, as a "
                   "replay's load does not vary with the seed]")
@click.option("--restore-budget-s", type=float, default=DEFAULTS["restore_budget_s"], show_default=True, callback=_budget,
              help="The budget-aware arms' restoration budget: what a loan may cost to give back, in seconds.")
@click.option("--queue-s", default=None, metavar="CLASS=S,...",
              help="Every gated arm (the study's too) queues each class this long instead of the study's 429 at "
                   "once, e.g. interactive=2,batch=120: what the lenders' own queues give, measured apart.")
@click.option("--live", is_flag=True, help="Play on loopback servers instead of in virtual time (one run at a time).")
@click.option("--time-scale", type=click.FloatRange(min=1, max=100), default=10.0, show_default=True,
              help="With --live: speed-up over real time; every figure stays in protocol seconds.")
@click.option("--workers", type=click.IntRange(min=1, max=64), default=None,
              help="Virtual runs at once (default: one per core).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Folder for runs/*.jsonl, spans.duckdb, summary.json, summary.md and experiment.json; one that "
                   "holds an earlier experiment's files is refused (see --resume).")
@click.option("--resume", is_flag=True,
              help="Finish the experiment in --out (interrupted, or to add arms, seeds or scenarios): keep the runs "
                   "whose files are there, play the others, then build the store and the summaries anew. Its "
                   "settings (budget, queues, cycles, replays, --live, --time-scale) must be the same.")
def experiment(scenarios: tuple[str, ...], replay_db: str | None, replay_runs: tuple[str, ...],
               replay_engine: str | None, replay_labels: tuple[str, ...], replay_config: str | None,
               replay_classes: tuple[str, ...], arms: str | None, cycles: int | None, seeds: str | None,
               restore_budget_s: float, queue_s: str | None, live: bool, time_scale: float, workers: int | None,
               out_dir: str, resume: bool) -> None:
    """Play every SCENARIO x arm x seed and print the MoFlux study's table.

    Virtual time by default, the runs in parallel across cores. Every run's spans are written to
    OUT/runs/, loaded into OUT/spans.duckdb and scored with the study's definitions: interactive
    SLO goodput of the contention window, batch borrow goodput, TTFT p95, the lending episode's
    times, and the gates H1 (priority - fcfs >= 0), H2 (lend - priority >= -0.04) and H3
    (lend - static batch borrow >= 0.02) over nearest-rank medians. The table goes to stdout and
    to OUT/summary.md; OUT/summary.json holds the same figures and each arm's frontier point
    (interactive SLO goodput, batch borrow goodput). --replay DB plays each run recorded in a span
    store instead of named scenarios.

    The ModelClaim wake scenarios (modelclaim-in-place, -make-room, -move, -cold-start) have their
    own arms (fixed, calibrated, hold) and table: per scenario x arm, the wakes' overshoot, attempts
    and time to first token, over all wakes, after each run's first and for the first alone, then
    whether each arm but fixed meets its goals (overshoot p95, attempts per wake, no wake path
    slower to first token than under fixed).

    Each file in OUT is written whole (renamed into place once complete). Ctrl-C stops the runs at
    once and exits 130, leaving only whole runs: --resume finishes them.
    """
    import json
    import sys
    from pathlib import Path

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from restorelens.analysis import Analysis
    from restorelens.experiments.matrix import (
        Matrix,
        default_arms,
        parse_arms,
        parse_queue,
        parse_seeds,
        play,
        run_files,
        scenario_kind,
    )
    from restorelens.experiments.out_folder import SUMMARY_JSON, SUMMARY_MD, build_store, prepare, write_whole

    replays = _replays(scenarios, replay_db, replay_runs, replay_engine, replay_labels, replay_config, replay_classes)
    names = tuple(replay.name for replay in replays) if replay_db else tuple(dict.fromkeys(scenarios))
    kind = scenario_kind(names)
    matrix = Matrix(names, parse_arms(arms, kind) if arms is not None else default_arms(kind),
                    parse_seeds(seeds or ("1" if replay_db else "1-5")), restore_budget_s,
                    {replay.name: replay.scenario() for replay in replays},
                    parse_queue(queue_s) if queue_s is not None else (), cycles)
    out = Path(out_dir)
    with prepare(out, {**matrix.settings(), "live": live, "time_scale": time_scale if live else None}, resume=resume):
        for replay in replays:
            click.echo(replay.describe(), err=True)
        kept = sum(path.exists() for path in run_files(matrix, out / "runs")) if resume else 0
        if kept:
            click.echo(f"resuming {out}: {kept} of {len(matrix)} runs already played", err=True)
        console = Console(stderr=True)
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console, transient=True, disable=not sys.stderr.isatty())
        try:
            with progress:
                task = progress.add_task("runs", total=len(matrix))
                files = play(matrix, out / "runs", live=live, time_scale=time_scale, workers=workers, resume=resume,
                             on_done=lambda cell: progress.update(task, advance=1, description=cell.run_id))
            db, spans = build_store(files, out)
        except KeyboardInterrupt:
            played = sum(path.exists() for path in run_files(matrix, out / "runs"))
            click.echo(f"interrupted: {out} holds {played} of {len(matrix)} runs, each whole; --resume finishes them",
                       err=True)
            click.get_current_context().exit(130)
        with Analysis.open(db) as analysis:
            table = _score(analysis, matrix)
        if matrix.kind == "modelclaim":
            summary = {**table.to_json(), "cycles": matrix.scenario(next(matrix.cells())).cycles}
        else:
            summary = {**table.to_json(), "restore_budget_s": restore_budget_s,
                       "queue_s": dict(matrix.queue_s) if matrix.queue_s else None}
        if replay_db:
            summary["replay"] = {"store": str(replay_db), "runs": [replay.to_json() for replay in replays]}
        write_whole(out / SUMMARY_JSON, json.dumps(summary, indent=2) + "\n")
        markdown = table.to_markdown()
        write_whole(out / SUMMARY_MD, markdown)
        click.echo(markdown, nl=False)
        click.echo(f"{len(matrix)} runs, {spans} spans: {db}, {out / SUMMARY_JSON}, {out / SUMMARY_MD}", err=True)


def _score(analysis: Any, matrix: Any) -> Any:
    """The matrix's table: the MoFlux study's, or the wake table of the ModelClaim scenarios."""
    if matrix.kind == "modelclaim":
        from restorelens.experiments.modelclaim.summary import score_wakes

        return score_wakes(analysis, {cell.run_id: (cell.scenario, cell.arm) for cell in matrix.cells()}, matrix.arms)
    from restorelens.analysis import score

    return score(analysis, matrix.workload_scenarios(), matrix.arms)


def with_cycles(scenario: Any, cycles: int | None) -> Any:
    """``scenario`` with ``cycles`` sleep -> wake cycles (``--cycles``: ModelClaim scenarios only)."""
    if cycles is None:
        return scenario
    if scenario.kind != "modelclaim":
        raise SettingError("--cycles", "only the ModelClaim scenarios repeat a sleep -> wake cycle")
    from dataclasses import replace

    return replace(scenario, cycles=cycles)


def _replays(scenarios: tuple[str, ...], replay_db: str | None, runs: tuple[str, ...], engine: str | None,
             labels: tuple[str, ...], config_file: str | None, classes: tuple[str, ...]) -> list[Any]:
    """The recorded runs ``--replay`` names, read from its store; none without it. SCENARIO names
    and --replay exclude each other, and the --replay-* options need --replay."""
    if replay_db is None:
        given = [name for name, value in (("--replay-run", runs), ("--replay-engine", engine),
                                          ("--replay-label", labels), ("--replay-config", config_file),
                                          ("--replay-class", classes)) if value]
        if given:
            raise SettingError(given[0], "needs --replay DB")
        return []
    if scenarios:
        raise SettingError("--replay", f"replays a store instead of scenarios: drop {scenarios[0]!r} or --replay")
    from restorelens.analysis import checked_labels, label_mapping, parse_label
    from restorelens.experiments.replay.store import DEFAULT_REPLAY_ENGINE, replays_from_store
    from restorelens.experiments.replay.workload import parse_class_map

    mapping = label_mapping(config_file)
    for text in labels:  # as label_mapping's flags, but errors name --replay-label
        mapping.update(checked_labels("--replay-label", dict([parse_label(text, "--replay-label")])))
    return replays_from_store(replay_db, runs=runs, engine_preset=engine or DEFAULT_REPLAY_ENGINE, labels=mapping,
                              class_map=parse_class_map(classes))


COMMANDS = [demo, run, experiment]
