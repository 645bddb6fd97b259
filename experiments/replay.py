"""Replay recorded traffic: a workload built from a span store, so a policy is tried on real load.

``restorelens experiment --replay DB`` reads every request the store shows arriving
(``experiments/sql/replay_requests.sql``: the restorelens client's ``client.request`` spans, or,
for traces of another client, vLLM's ``llm_request`` spans), makes one ``Workload`` per recorded
run and plays it under each arm in virtual time, as the named MoFlux scenarios are played.

``replay_workload`` is the sans-I/O part: rows (``RecordedRequest``) in, a ``Replay`` (the
workload and what had to be made up for it) out. What a replay keeps, and the choices it makes
where a recording says nothing (docs/experiments.md, "Replaying recorded traffic"):

- arrivals: each run's recorded offsets from its first arrival, to the microsecond (as the
  MoFlux workloads round theirs);
- traffic class: the recorded one (a mapped label first); a value that is neither interactive
  nor batch is translated by ``class_map`` (``--replay-class gold=interactive``), else played as
  interactive, as the gate treats a request without ``x-traffic-class``;
- tokens: the engine's prompt tokens (else the client span's), made into a prompt the chosen
  engine counts as that many tokens; the engine's completion tokens as the output length. The
  simulator generates exactly ``max_tokens``, so that length is the replayed ``max_tokens``
  (the recorded ``max_tokens`` stands in when no completion was recorded). A request no engine
  served has no token counts: it takes its class's nearest-rank median in its run;
- windows: a run whose requests carry ``restore.arrival_phase`` keeps those phases and their
  recorded windows (a restorelens recording is scored as it was); a run without any is one
  window from its first arrival to its last, interactive requests scored as the contention
  window and batch requests as the borrow window (docs/analysis.md, "Policy summary").
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from restorelens.errors import InputError, SettingError
from restorelens.experiments.moflux.scenarios import MofluxScenario
from restorelens.loadgen.workloads import Arrival, EngineShape, Phase, RequestShape, Workload
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN, TRAFFIC_CLASSES

if TYPE_CHECKING:
    from restorelens.sim.config import EngineConfig

__all__ = [
    "DEFAULT_REPLAY_ENGINE",
    "DEFAULT_TRAFFIC_CLASS",
    "RecordedRequest",
    "Replay",
    "ReplayScenario",
    "parse_class_map",
    "prompt_chars_for",
    "read_recorded_requests",
    "replay_workload",
    "replays_from_store",
    "scenario_from_json",
    "scenario_to_json",
]

#: The engine a replay runs against unless ``--replay-engine`` says otherwise: the MoFlux study's
#: (docs/sim.md), as its preset defines it.
DEFAULT_REPLAY_ENGINE = "qwen2.5-1.5b-m1"
#: The class of a request recorded without one: what the gate makes of a request without an
#: ``x-traffic-class`` header (``gate.default_traffic_class``'s default).
DEFAULT_TRAFFIC_CLASS = "interactive"
#: The name of a replayed run's scenario (and workload label): this, then its recorded run id.
REPLAY_PREFIX = "replay"
#: A run id is cut to this many characters in a scenario name (it names the run's span files).
MAX_RUN_NAME_CHARS = 80


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One arrival in a recorded store: a row of ``replay_requests.sql``. ``arrival_ns`` is an
    instant in nanoseconds since the epoch; ``source`` is ``client`` or ``engine``."""

    run_id: str | None
    request_id: str
    source: str
    arrival_ns: int
    traffic_class: str | None = None
    arrival_phase: str | None = None
    arrival_phase_start_s: float | None = None
    arrival_phase_window_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    max_tokens: int | None = None
    model: str | None = None


@dataclass(frozen=True)
class Replay:
    """One recorded run made a workload, and how much of it had to be filled in."""

    name: str
    run_id: str | None
    workload: Workload
    engine_preset: str
    #: ``recorded``: the requests' own arrival phases and windows; ``whole replay``: one window.
    windows: str
    #: Requests whose class was neither interactive nor batch nor mapped, by recorded value
    #: (``None``: no class at all); they play as ``DEFAULT_TRAFFIC_CLASS``.
    defaulted_classes: Mapping[str | None, int] = field(default_factory=dict)
    #: Requests without recorded prompt tokens / output length: they took their class's median.
    prompt_from_median: int = 0
    output_from_median: int = 0
    #: Requests whose prompt the engine counts otherwise than recorded (below its template's own
    #: tokens), and requests cut to fit its ``max_model_len``.
    prompt_inexact: int = 0
    cut_to_fit: int = 0

    def scenario(self) -> ReplayScenario:
        """The scenario that plays this replay (under the lend arm until a cell sets its own)."""
        return ReplayScenario(self.name, self.name, engine_preset=self.engine_preset, replayed=self.workload)

    def to_json(self) -> dict[str, Any]:
        arrivals = self.workload.arrivals
        return {
            "scenario": self.name,
            "recorded_run_id": self.run_id,
            "engine_preset": self.engine_preset,
            "requests": len(arrivals),
            "interactive": sum(1 for a in arrivals if a.traffic_class == "interactive"),
            "batch": sum(1 for a in arrivals if a.traffic_class == "batch"),
            "last_arrival_s": arrivals[-1].at_s if arrivals else 0.0,
            "windows": self.windows,
            "defaulted_classes": {("(none)" if k is None else k): n for k, n in self.defaulted_classes.items()},
            "prompt_from_median": self.prompt_from_median,
            "output_from_median": self.output_from_median,
            "prompt_inexact": self.prompt_inexact,
            "cut_to_fit": self.cut_to_fit,
        }

    def describe(self) -> str:
        """One line for the operator: what is replayed, and what was made up."""
        data = self.to_json()
        run = "no run id" if self.run_id is None else f"run {self.run_id}"
        text = (f"{self.name}: {data['requests']} requests of {run} ({data['interactive']} interactive, "
                f"{data['batch']} batch) over {data['last_arrival_s']:.6g} s, windows: {self.windows}")
        notes = []
        if self.defaulted_classes:
            values = ", ".join(f"{k}: {n}" for k, n in data["defaulted_classes"].items())
            notes.append(f"{sum(self.defaulted_classes.values())} played as {DEFAULT_TRAFFIC_CLASS} ({values})")
        if self.prompt_from_median or self.output_from_median:
            notes.append(f"{max(self.prompt_from_median, self.output_from_median)} never served took their "
                         "class's median tokens")
        if self.prompt_inexact:
            notes.append(f"{self.prompt_inexact} prompts below the engine's template tokens")
        if self.cut_to_fit:
            notes.append(f"{self.cut_to_fit} cut to the engine's max_model_len")
        return text + ("; " + "; ".join(notes) if notes else "")


@dataclass(frozen=True)
class ReplayScenario(MofluxScenario):
    """A MoFlux scenario whose workload is a recording's (``replayed``) instead of the protocol's:
    the same arms, gate and client, and the engine preset as it is defined (the workload's engine
    shape mirrors it). The workload is the same whatever the seed."""

    replayed: Workload | None = None

    def workload(self, seed: int) -> Workload:
        if self.replayed is None:
            raise SettingError("--replay", f"scenario {self.name!r} has no recorded workload")
        return replace(self.replayed, seed=seed)


def prompt_chars_for(prompt_tokens: int, engine: EngineConfig) -> int:
    """The fewest characters of filler prompt ``engine`` counts as
    ``prompt_tokens``; when it counts more for any prompt (its template's own tokens), none."""
    if prompt_tokens <= engine.estimate_prompt_tokens(0):
        return 0
    # estimate = fixed + ceil(chars / chars_per_token): start at the inverse, then step to the
    # exact smallest length, whatever the float rounding of chars_per_token
    chars = max(0, math.floor((prompt_tokens - engine.prompt_fixed_tokens - 1) * engine.chars_per_token) + 1)
    while chars > 0 and engine.estimate_prompt_tokens(chars - 1) >= prompt_tokens:
        chars -= 1
    while engine.estimate_prompt_tokens(chars) < prompt_tokens:
        chars += 1
    return chars


def parse_class_map(texts: Iterable[str]) -> dict[str, str]:
    """``("gold=interactive", "bronze=batch")`` -> a recorded value's class; else a ``SettingError``
    naming ``--replay-class``."""
    mapping: dict[str, str] = {}
    for text in texts:
        value, sep, traffic_class = text.partition("=")
        if not sep or not value.strip() or traffic_class.strip() not in TRAFFIC_CLASSES:
            raise SettingError("--replay-class", f"{text!r} is not VALUE=CLASS with CLASS one of "
                                                 f"{', '.join(TRAFFIC_CLASSES)} (e.g. gold=interactive)")
        mapping[value.strip()] = traffic_class.strip()
    return mapping


def replay_workload(requests: Sequence[RecordedRequest], engine: EngineConfig, *, name: str, engine_preset: str,
                    class_map: Mapping[str, str] | None = None) -> Replay:
    """The workload of one recorded run's ``requests`` on ``engine`` (the preset
    ``engine_preset``), named ``name`` (its scenario and workload label). See the module."""
    if not requests:
        raise SettingError("--replay", f"{name}: no requests to replay")
    class_map = class_map or {}
    ordered = sorted(requests, key=lambda r: (r.arrival_ns, r.request_id))
    defaulted: Counter[str | None] = Counter()
    classes = []
    for request in ordered:
        recorded = request.traffic_class
        traffic_class = recorded if recorded in TRAFFIC_CLASSES else class_map.get(recorded or "")
        if traffic_class is None:
            defaulted[recorded] += 1
            traffic_class = DEFAULT_TRAFFIC_CLASS
        classes.append(traffic_class)

    prompts: dict[str, list[int]] = {}
    outputs: dict[str, list[int]] = {}
    for request, traffic_class in zip(ordered, classes, strict=True):
        if request.prompt_tokens is not None:
            prompts.setdefault(traffic_class, []).append(request.prompt_tokens)
        output = _output_tokens(request)
        if output is not None:
            outputs.setdefault(traffic_class, []).append(output)
    prompt_medians, output_medians = _medians(prompts), _medians(outputs)
    if None not in prompt_medians or None not in output_medians:
        raise SettingError("--replay", f"{name}: no request of the run reached an engine that recorded its token "
                                       "counts, so no request's size is known")

    labelled = any(request.arrival_phase for request in ordered)
    origin_ns = ordered[0].arrival_ns
    ids: Counter[str] = Counter()
    arrivals = []
    prompt_from_median = output_from_median = prompt_inexact = cut_to_fit = 0
    for request, traffic_class in zip(ordered, classes, strict=True):
        prompt_tokens = request.prompt_tokens
        if prompt_tokens is None:
            prompt_tokens = prompt_medians.get(traffic_class, prompt_medians[None])
            prompt_from_median += 1
        output_tokens = _output_tokens(request)
        if output_tokens is None:
            output_tokens = output_medians.get(traffic_class, output_medians[None])
            output_from_median += 1
        chars = prompt_chars_for(prompt_tokens, engine)
        counted = engine.estimate_prompt_tokens(chars)
        prompt_inexact += counted != prompt_tokens
        if counted + output_tokens > engine.max_model_len:
            # vLLM refuses such a request outright: keep it, as long as the engine takes
            cut_to_fit += 1
            output_tokens = max(1, engine.max_model_len - counted)
            if counted + output_tokens > engine.max_model_len:
                chars = prompt_chars_for(engine.max_model_len - output_tokens, engine)
        if labelled:
            phase = request.arrival_phase or ""
        else:
            phase = ARRIVAL_PHASE_RETURN if traffic_class == "interactive" else ARRIVAL_PHASE_BORROW
        # the engine refuses a second request with an id in flight: a repeated id gets a suffix
        ids[request.request_id] += 1
        seen = ids[request.request_id]
        request_id = request.request_id if seen == 1 else f"{request.request_id}-{seen}"
        # nanoseconds -> seconds from the first arrival, to the microsecond
        at_s = round((request.arrival_ns - origin_ns) / 1e9, 6)
        arrivals.append(Arrival(at_s, request_id, traffic_class, phase, chars, output_tokens))

    last_s = arrivals[-1].at_s
    phases = _recorded_phases(ordered) if labelled else (
        Phase(ARRIVAL_PHASE_BORROW, 0.0, last_s), Phase(ARRIVAL_PHASE_RETURN, 0.0, last_s))
    chars_medians = _medians({c: [a.prompt_chars for a in arrivals if a.traffic_class == c] for c in TRAFFIC_CLASSES})
    tokens_medians = _medians({c: [a.max_tokens for a in arrivals if a.traffic_class == c] for c in TRAFFIC_CLASSES})
    shapes = tuple((c, RequestShape(chars_medians[c], tokens_medians[c])) for c in TRAFFIC_CLASSES if c in classes)
    workload = Workload(name, 0, max([last_s, *(p.end_s for p in phases)]), phases, shapes, tuple(arrivals),
                        engine=EngineShape(engine.max_num_seqs, engine.max_model_len, engine.num_blocks,
                                           engine.block_size))
    models = Counter(request.model for request in ordered if request.model)
    if models:
        workload = replace(workload, model=models.most_common(1)[0][0])
    return Replay(name, ordered[0].run_id, workload, engine_preset, "recorded" if labelled else "whole replay",
                  dict(defaulted), prompt_from_median, output_from_median, prompt_inexact, cut_to_fit)


def _medians(values: Mapping[str, list[int]]) -> dict[str | None, int]:
    """Each class's nearest-rank median (classes without values left out), and under ``None``
    the median of all, if there are any values at all."""
    from restorelens.analysis.views import nearest_rank

    medians: dict[str | None, int] = {c: int(m) for c, v in values.items() if (m := nearest_rank(v, 0.5)) is not None}
    everything = nearest_rank([value for class_values in values.values() for value in class_values], 0.5)
    if everything is not None:
        medians[None] = int(everything)
    return medians


def _output_tokens(request: RecordedRequest) -> int | None:
    """The output length a request had: the engine's completion tokens (at least one: the
    simulator generates max_tokens >= 1), else the max_tokens it asked for, else unknown."""
    if request.completion_tokens is not None:
        return max(1, request.completion_tokens)
    if request.max_tokens is not None and request.max_tokens >= 1:
        return request.max_tokens
    return None


def _recorded_phases(requests: Sequence[RecordedRequest]) -> tuple[Phase, ...]:
    """Each recorded arrival phase with a window, as recorded (protocol seconds of the recorded
    run; several values for one phase: its earliest start and longest window, as the policy
    summary takes the longest). A phase recorded without a window gets none: it is not scored."""
    starts: dict[str, float] = {}
    windows: dict[str, float] = {}
    for request in requests:
        name = request.arrival_phase
        if not name or request.arrival_phase_window_s is None:
            continue
        start_s = request.arrival_phase_start_s or 0.0
        starts[name] = min(starts.get(name, start_s), start_s)
        windows[name] = max(windows.get(name, 0.0), request.arrival_phase_window_s)
    return tuple(Phase(name, starts[name], starts[name] + windows[name])
                 for name in sorted(starts, key=lambda n: (starts[n], n)))


# --- the store ---------------------------------------------------------------------------------


def read_recorded_requests(db_path: str | Path, *, labels: Mapping[str, str] | None = None) -> list[RecordedRequest]:
    """Every replayable request in the store at ``db_path`` (read-only), labels mapped by ``labels``."""
    import duckdb

    from restorelens.analysis import Analysis, Slo
    from restorelens.errors import first_line

    sql = resources.files(__package__).joinpath("sql", "replay_requests.sql").read_text(encoding="utf-8")
    with Analysis.open(db_path, materialize=True, labels=labels) as analysis:
        try:
            cursor = analysis.con.execute(sql, {"excluded_phases": list(Slo().excluded_phases)})
            columns = [column[0] for column in cursor.description or ()]
            rows = cursor.fetchall()
        except duckdb.Error as exc:
            raise InputError(str(db_path), f"cannot read its requests: {first_line(exc)}") from None
    return [RecordedRequest(**dict(zip(columns, row, strict=True))) for row in rows]


def replays_from_store(db_path: str | Path, *, runs: Sequence[str] = (), engine_preset: str = DEFAULT_REPLAY_ENGINE,
                       labels: Mapping[str, str] | None = None, class_map: Mapping[str, str] | None = None,
                       ) -> list[Replay]:
    """One ``Replay`` per recorded run of the store (``runs``: only those run ids), in the order of
    their first arrivals. Nothing replayable, or a run id not recorded, is a ``SettingError``."""
    from restorelens.sim.config import PRESETS

    engine = PRESETS.get(engine_preset)
    if engine is None:
        raise SettingError("--replay-engine", f"unknown preset {engine_preset!r}; choose one of {', '.join(PRESETS)}")
    by_run: dict[str | None, list[RecordedRequest]] = {}
    for request in sorted(read_recorded_requests(db_path, labels=labels), key=lambda r: r.arrival_ns):
        by_run.setdefault(request.run_id, []).append(request)
    if not by_run:
        raise SettingError("--replay", f"{db_path}: nothing to replay: no client.request span, nor an llm_request "
                                       "span with vLLM's latencies (ModelClaim wake requests are left out)")
    if runs:
        missing = [run for run in runs if run not in by_run]
        if missing:
            recorded = ", ".join(r for r in by_run if r is not None) or "none with a run id"
            raise SettingError("--replay-run", f"{db_path} records no run {missing[0]!r}; its runs: {recorded}")
        by_run = {run: by_run[run] for run in dict.fromkeys(runs)}
    names: set[str] = set()
    replays = []
    for run_id, requests in by_run.items():
        name = _unique(_replay_name(run_id), names)
        replays.append(replay_workload(requests, engine, name=name, engine_preset=engine_preset, class_map=class_map))
    return replays


def _replay_name(run_id: str | None) -> str:
    if not run_id:
        return REPLAY_PREFIX
    # the name becomes a file name (SCENARIO-ARM-sSEED.jsonl): only portable characters
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id)[:MAX_RUN_NAME_CHARS].strip("._-") or "run"
    return f"{REPLAY_PREFIX}-{safe}"


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    taken.add(candidate)
    return candidate


# --- to and from a worker process --------------------------------------------------------------


def scenario_to_json(scenario: ReplayScenario) -> dict[str, Any]:
    """A replayed scenario as JSON (without its arm and budget, which each cell sets)."""
    workload = scenario.replayed
    assert workload is not None
    return {
        "name": scenario.name,
        "engine_preset": scenario.engine_preset,
        "workload": {
            "name": workload.name,
            "duration_s": workload.duration_s,
            "model": workload.model,
            "phases": [[p.name, p.start_s, p.end_s] for p in workload.phases],
            "shapes": [[c, s.prompt_chars, s.max_tokens] for c, s in workload.shapes],
            "engine": [workload.engine.max_num_seqs, workload.engine.max_model_len, workload.engine.num_gpu_blocks,
                       workload.engine.block_size],
            "slo": [workload.slo.ttft_s, workload.slo.e2e_s],
            "arrivals": [[a.at_s, a.request_id, a.traffic_class, a.phase, a.prompt_chars, a.max_tokens]
                         for a in workload.arrivals],
        },
    }


def scenario_from_json(data: Mapping[str, Any]) -> ReplayScenario:
    from restorelens.loadgen.workloads import Slo

    w = data["workload"]
    workload = Workload(
        w["name"], 0, w["duration_s"], tuple(Phase(*p) for p in w["phases"]),
        tuple((c, RequestShape(chars, tokens)) for c, chars, tokens in w["shapes"]),
        tuple(Arrival(*a) for a in w["arrivals"]), w["model"], Slo(*w["slo"]), EngineShape(*w["engine"]),
    )
    return ReplayScenario(data["name"], data["name"], engine_preset=data["engine_preset"], replayed=workload)
