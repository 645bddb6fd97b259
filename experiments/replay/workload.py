"""A recorded run made a workload: the sans-I/O core of a replay (what it keeps and what it makes up:
the package's docstring)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from restorelens.errors import SettingError
from restorelens.experiments.moflux.scenarios import MofluxScenario
from restorelens.loadgen import Arrival, EngineShape, Phase, RequestShape, Workload
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN, TRAFFIC_CLASSES

if TYPE_CHECKING:
    from restorelens.sim.config import EngineConfig

__all__ = [
    "DEFAULT_TRAFFIC_CLASS",
    "RecordedRequest",
    "Replay",
    "ReplayScenario",
    "parse_class_map",
    "prompt_chars_for",
    "replay_workload",
]

#: The class of a request recorded without one: what the gate makes of a request without an
#: ``x-traffic-class`` header (``gate.default_traffic_class``'s default).
DEFAULT_TRAFFIC_CLASS = "interactive"


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
    from restorelens.analysis import nearest_rank

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
