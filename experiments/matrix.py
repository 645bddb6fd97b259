"""``restorelens experiment``: every scenario × arm × seed of a study, in one command.

A matrix is data (``Matrix``); ``play`` runs each cell once, its spans into one OTLP/JSON-lines
file per run under ``DIR/runs/``. Virtual runs are shared out to worker processes, one per core,
because a run is pure CPU and the cores are otherwise idle; live runs play one after another on
loopback servers (they share the machine's ports and time). The files are then loaded into
``DIR/spans.duckdb`` and ``analysis.study`` scores the store.

A scenario is a named MoFlux one (``experiments.moflux.scenarios``) or a recorded run replayed
(``experiments.replay``); every cell's scenario carries the matrix's restoration budget. A matrix
of ModelClaim wake scenarios (``experiments.modelclaim.scenarios``) has their arms instead (fixed,
calibrated, hold) and, when given, its runs' number of sleep -> wake cycles; ``experiments.modelclaim.summary``
scores it. The two kinds do not mix in one matrix: their arms differ.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from restorelens.errors import SettingError
from restorelens.experiments.moflux.scenarios import SCENARIOS
from restorelens.experiments.out_folder import partial_file
from restorelens.experiments.workers import run_workers, worker_script
from restorelens.gate import DEFAULTS, arm_names, check_option, study_policies

__all__ = ["DEFAULT_ARMS", "MAX_SEEDS", "Cell", "Matrix", "default_arms", "parse_arms", "parse_queue",
           "parse_seeds", "play", "run_files", "scenario_kind"]

#: The study's four arms, in the order its table lists them.
DEFAULT_ARMS = study_policies()
#: A seed range past this is a typo, not a study (each seed is one run per scenario and arm).
MAX_SEEDS = 1_000


@dataclass(frozen=True, slots=True)
class Cell:
    scenario: str
    arm: str
    seed: int

    @property
    def run_id(self) -> str:
        return f"{self.scenario}-{self.arm}-s{self.seed}"


@dataclass(frozen=True, slots=True)
class Matrix:
    scenarios: tuple[str, ...]
    arms: tuple[str, ...] = DEFAULT_ARMS
    seeds: tuple[int, ...] = (1, 2, 3, 4, 5)
    #: Every cell's ``restore_budget_s`` (``--restore-budget-s``).
    restore_budget_s: float = DEFAULTS["restore_budget_s"]
    #: Recorded runs to replay, by scenario name (``experiments.replay.workload.ReplayScenario``); a name
    #: in ``scenarios`` is looked up here first, then among the MoFlux scenarios.
    replays: Mapping[str, Any] = field(default_factory=dict)
    #: Every gated cell's queue per traffic class (``--queue-s``; ``MofluxScenario.queue_s``).
    queue_s: tuple[tuple[str, float], ...] = ()
    #: ModelClaim scenarios: sleep -> wake cycles per run (``--cycles``); None: the scenario's own.
    cycles: int | None = None

    def __post_init__(self) -> None:
        from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_SCENARIOS

        check_option("restore_budget_s", self.restore_budget_s, "--restore-budget-s")
        if not self.scenarios:
            raise SettingError("SCENARIO", "name at least one scenario, or give --replay DB")
        for name in self.scenarios:
            if name not in SCENARIOS and name not in self.replays and name not in MODELCLAIM_SCENARIOS:
                raise SettingError("SCENARIO", f"unknown scenario {name!r}; choose from "
                                               f"{', '.join([*SCENARIOS, *MODELCLAIM_SCENARIOS])}")
        wakes = scenario_kind(self.scenarios) == "modelclaim"
        if self.cycles is not None and not wakes:
            raise SettingError("--cycles", "only the ModelClaim scenarios repeat a sleep -> wake cycle")
        if self.queue_s and wakes:
            raise SettingError("--queue-s", "queues the MoFlux scenarios' gated arms; the ModelClaim ones have none")

    @property
    def kind(self) -> str:
        """``modelclaim`` for a matrix of wake scenarios, else ``moflux`` (MoFlux and replays)."""
        return scenario_kind(self.scenarios)

    def cells(self) -> Iterator[Cell]:
        for scenario in self.scenarios:
            for arm in self.arms:
                for seed in self.seeds:
                    yield Cell(scenario, arm, seed)

    def __len__(self) -> int:
        return len(self.scenarios) * len(self.arms) * len(self.seeds)

    def scenario(self, cell: Cell) -> Any:
        """The scenario ``cell`` plays: its arm, and the matrix's restoration budget."""
        from restorelens.experiments.catalog import get_scenario

        if self.kind == "modelclaim":
            scenario = get_scenario(cell.scenario, cell.arm)
            return scenario if self.cycles is None else replace(scenario, cycles=self.cycles)
        replayed = self.replays.get(cell.scenario)
        scenario = replayed.with_arm(cell.arm) if replayed is not None else get_scenario(cell.scenario, cell.arm)
        return replace(scenario, restore_budget_s=self.restore_budget_s, queue_s=self.queue_s)

    def settings(self) -> dict[str, Any]:
        """What a cell's run depends on besides its scenario, arm and seed, as JSON: a folder's runs
        are resumed only under the same (a replay by a digest of the workload it plays)."""
        from hashlib import sha256

        from restorelens.experiments.replay.scenario_json import scenario_to_json

        replays = {name: sha256(json.dumps(scenario_to_json(self.replays[name]), sort_keys=True).encode()).hexdigest()
                   for name in self.scenarios if name in self.replays}
        return {"restore_budget_s": self.restore_budget_s, "queue_s": dict(self.queue_s) or None,
                "cycles": self.cycles, "replays": replays or None}

    def workload_scenarios(self) -> dict[str, str]:
        """Workload label (``restore.workload`` of the runs' spans) -> scenario name, for scoring."""
        return {(self.replays[name].replayed.name if name in self.replays else SCENARIOS[name].profile): name
                for name in self.scenarios}


def parse_queue(text: str) -> tuple[tuple[str, float], ...]:
    """``interactive=2,batch=120`` -> ((class, seconds), ...); a one-line error naming ``--queue-s``."""
    from restorelens.spans import TRAFFIC_CLASSES

    queue: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, value = part.partition("=")
        try:
            wait_s = float(value) if sep else math.nan
        except ValueError:
            wait_s = math.nan
        if name not in TRAFFIC_CLASSES or name in queue or not (math.isfinite(wait_s) and wait_s >= 0):
            raise SettingError("--queue-s", f"{part!r}: give CLASS=SECONDS once per class "
                                            f"({', '.join(TRAFFIC_CLASSES)}), seconds finite and >= 0")
        queue[name] = wait_s
    if not queue:
        raise SettingError("--queue-s", "give CLASS=SECONDS, e.g. interactive=2,batch=120")
    return tuple(queue.items())


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"1-5"``, ``"1,3,7"`` or ``"1-3,9"`` -> the seeds in order, each once."""
    seeds: list[int] = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            first, last = (int(low), int(high)) if dash else (int(part), int(part))
        except ValueError:
            raise SettingError("--seeds", f"{part!r} is not a seed or a range like 1-5") from None
        if first < 0 or last < first:
            raise SettingError("--seeds", f"{part!r}: a range goes from a seed >= 0 up to a larger one")
        if last - first + 1 + len(seeds) > MAX_SEEDS:
            raise SettingError("--seeds", f"{text!r} asks for more than {MAX_SEEDS} seeds")
        seeds.extend(s for s in range(first, last + 1) if s not in seeds)
    return tuple(seeds)


def parse_arms(text: str, kind: str = "moflux") -> tuple[str, ...]:
    """``"lend,static"`` -> the arms in order, each once; ``kind`` ``modelclaim``: the wake
    scenarios' arms (fixed, calibrated, hold) instead of MoFlux's."""
    from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_ARMS

    valid = MODELCLAIM_ARMS if kind == "modelclaim" else arm_names()
    arms = tuple(dict.fromkeys(a.strip() for a in text.split(",") if a.strip()))
    unknown = [a for a in arms if a not in valid]
    if not arms or unknown:
        raise SettingError("--arms", f"unknown arm {', '.join(unknown) or '(none)'}; choose from {', '.join(valid)}")
    return arms


def scenario_kind(names: Sequence[str]) -> str:
    """``modelclaim`` when every scenario named is a wake scenario, ``moflux`` when none is; a
    ``SettingError`` for a mix (their arms differ)."""
    from restorelens.experiments.modelclaim.scenarios import MODELCLAIM_SCENARIOS

    wakes = [name in MODELCLAIM_SCENARIOS for name in names]
    if any(wakes) and not all(wakes):
        raise SettingError("SCENARIO", "play the ModelClaim and the MoFlux scenarios in separate experiments: "
                                       "their arms differ")
    return "modelclaim" if wakes and all(wakes) else "moflux"


def default_arms(kind: str) -> tuple[str, ...]:
    """The arms played when none are given: the study's four, or ``fixed`` (AIBrix's table) for wakes."""
    from restorelens.experiments.modelclaim.scenarios import FIXED

    return (FIXED,) if kind == "modelclaim" else DEFAULT_ARMS


def run_files(matrix: Matrix, runs_dir: Path) -> list[Path]:
    """Each cell's span file under ``runs_dir``, in the matrix's order."""
    return [runs_dir / f"{cell.run_id}.jsonl" for cell in matrix.cells()]


def play(matrix: Matrix, runs_dir: Path, *, live: bool = False, time_scale: float = 1.0,
         workers: int | None = None, on_done: Callable[[Cell], None] = lambda cell: None,
         resume: bool = False) -> list[Path]:
    """Run every cell; returns the span files, one per run, in the matrix's order.

    Each run's file is written whole (under its ``out_folder.partial_file``, then renamed),
    replacing any file of that name; ``resume``: a cell whose file exists is not played again (``on_done`` is called for it
    first). Interrupted (Ctrl-C, an error), no partial file is left and no worker left running."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    cells = list(zip(matrix.cells(), run_files(matrix, runs_dir), strict=True))
    todo = []
    for cell, path in cells:
        if resume and path.exists():
            on_done(cell)
        else:
            todo.append((cell, path))
    workers = 1 if live else min(workers or os.cpu_count() or 1, len(todo))
    try:
        if workers <= 1:
            for cell, path in todo:
                _run(matrix.scenario(cell), cell, path, live=live, time_scale=time_scale)
                on_done(cell)
        else:
            chunks = [todo[i::workers] for i in range(workers)]
            by_id = [{cell.run_id: cell for cell, _ in chunk} for chunk in chunks]

            def on_line(index: int, line: str) -> None:
                if line in by_id[index]:
                    on_done(by_id[index][line])

            run_workers(_WORKER, [_job(matrix, chunk) for chunk in chunks], on_line)
    finally:  # a worker killed mid-run could not remove its own
        for _, path in todo:
            partial_file(path).unlink(missing_ok=True)
    return [path for _, path in cells]


def _job(matrix: Matrix, chunk: list[tuple[Cell, Path]]) -> str:
    """A worker's runs as JSON: the budget, the replayed workloads they need, and
    ``[[scenario, arm, seed, path], ...]``."""
    from restorelens.experiments.replay.scenario_json import scenario_to_json

    needed = dict.fromkeys(cell.scenario for cell, _ in chunk if cell.scenario in matrix.replays)
    return json.dumps({
        "restore_budget_s": matrix.restore_budget_s,
        "queue_s": matrix.queue_s,
        "cycles": matrix.cycles,
        "replays": [scenario_to_json(matrix.replays[name]) for name in needed],
        "runs": [[cell.scenario, cell.arm, cell.seed, str(path)] for cell, path in chunk],
    })


def _cells_of_job(job: str) -> list[tuple[Any, Cell, Path]]:
    """A worker's runs (``_job``) as (scenario, cell, span file), each scenario built as the
    parent's matrix builds it."""
    from restorelens.experiments.replay.scenario_json import scenario_from_json

    data = json.loads(job)
    replays = {scenario.name: scenario for scenario in map(scenario_from_json, data["replays"])}
    cells = [(Cell(scenario, arm, seed), Path(path)) for scenario, arm, seed, path in data["runs"]]
    matrix = Matrix(tuple(dict.fromkeys(cell.scenario for cell, _ in cells)),
                    tuple(dict.fromkeys(cell.arm for cell, _ in cells)),
                    tuple(dict.fromkeys(cell.seed for cell, _ in cells)), data["restore_budget_s"], replays,
                    tuple((name, float(wait_s)) for name, wait_s in data["queue_s"]), data["cycles"])
    return [(matrix.scenario(cell), cell, path) for cell, path in cells]


def _work(job: str) -> None:
    """Play a worker's runs (``_job``), printing each run id as it finishes."""
    for scenario, cell, path in _cells_of_job(job):
        _run(scenario, cell, path)
        print(cell.run_id, flush=True)


#: A worker: its runs on stdin as JSON (``_job``); prints each run id done.
_WORKER = worker_script("""
import sys
from restorelens.experiments.matrix import _work
from restorelens.errors import RestorelensError
try:
    _work(sys.stdin.read())
except RestorelensError as exc:
    sys.exit(f"{exc}")
""")


def _run(scenario: Any, cell: Cell, path: Path, *, live: bool = False, time_scale: float = 1.0) -> None:
    from restorelens.experiments.run_telemetry import RunTelemetry
    from restorelens.experiments.runner import run_live, run_virtual

    partial = partial_file(path)
    partial.unlink(missing_ok=True)  # the exporter appends: an earlier run's leftover must not be added to
    try:
        with RunTelemetry("file", path=str(partial), run_id=cell.run_id, scenario=scenario.name) as telemetry:
            if live:
                run_live(scenario, cell.seed, telemetry.providers, cell.run_id, time_scale=time_scale)
            else:
                run_virtual(scenario, cell.seed, telemetry.providers, cell.run_id)
        telemetry.raise_if_spans_dropped()
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
