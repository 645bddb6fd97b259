"""Workloads as data: seeded, immutable arrival schedules that replay identically across arms.

A ``Workload`` is built once per (profile, seed) and is a frozen tuple of ``Arrival``s, so every
arm of an experiment (FCFS, priority, static, lending) sees exactly the same offered load. Arrivals
are Poisson per traffic class with a piecewise-constant rate; each class draws from its own
RNG stream (seeded with seed and class), so changing one class's rates leaves the other's arrival
times unchanged.

The MoFlux protocol (the MoFlux benchmark's demo/VLLM-CONTENTION.md): 105 s in four
phases. Interactive alone 0-25 s at 0.25 req/s; batch from 25 s at 0.75 req/s while interactive is
idle (its protected slots become lendable); interactive returns 60-85 s at 0.5 req/s; drain
85-105 s with no arrivals. SLO: TTFT <= 5 s and e2e <= 30 s.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from restorelens.errors import SettingError
from restorelens.loadgen.prompts import approx_tokens, filler_prompt
from restorelens.loadgen.request import ClientRequest, RunLabels
from restorelens.spans import ARRIVAL_PHASE_BORROW, ARRIVAL_PHASE_RETURN

__all__ = [
    "FIXED_BURST",
    "MOFLUX_PHASES",
    "MOFLUX_PROFILES",
    "Arrival",
    "EngineShape",
    "Phase",
    "RequestShape",
    "Slo",
    "Workload",
    "moflux_workload",
    "poisson_arrivals",
]

#: The served model of the MoFlux study; the simulator preset 'qwen2.5-1.5b-m1' mimics it.
MOFLUX_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"


@dataclass(frozen=True, slots=True)
class RequestShape:
    prompt_chars: int
    max_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return approx_tokens(self.prompt_chars)


@dataclass(frozen=True, slots=True)
class Phase:
    """``[start_s, end_s)`` with an arrival rate per traffic class (absent: no arrivals)."""

    name: str
    start_s: float
    end_s: float
    rates_per_s: tuple[tuple[str, float], ...] = ()

    def rate_per_s(self, traffic_class: str) -> float:
        return dict(self.rates_per_s).get(traffic_class, 0.0)


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float = 5.0
    e2e_s: float = 30.0


@dataclass(frozen=True, slots=True)
class EngineShape:
    """Engine settings the profile prescribes (vLLM flags in the study)."""

    max_num_seqs: int = 4
    max_model_len: int = 4096
    num_gpu_blocks: int | None = None
    block_size: int = 16

    @property
    def kv_tokens(self) -> int | None:
        return None if self.num_gpu_blocks is None else self.num_gpu_blocks * self.block_size


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request of the offered load; ``at_s`` is seconds from the run's start."""

    at_s: float
    request_id: str
    traffic_class: str
    phase: str
    prompt_chars: int
    max_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return approx_tokens(self.prompt_chars)


@dataclass(frozen=True)
class Workload:
    name: str
    seed: int
    duration_s: float
    phases: tuple[Phase, ...]
    shapes: tuple[tuple[str, RequestShape], ...]
    arrivals: tuple[Arrival, ...]
    model: str = MOFLUX_MODEL
    slo: Slo = field(default_factory=Slo)
    engine: EngineShape = field(default_factory=EngineShape)

    def phase_at(self, at_s: float) -> str:
        for phase in self.phases:
            if phase.start_s <= at_s < phase.end_s:
                return phase.name
        return self.phases[-1].name if self.phases else ""

    def phase_named(self, name: str) -> Phase | None:
        return next((phase for phase in self.phases if phase.name == name), None)

    def count(self, traffic_class: str, phase: str | None = None) -> int:
        return sum(1 for a in self.arrivals if a.traffic_class == traffic_class and (phase is None or a.phase == phase))

    def until(self, end_s: float) -> Workload:
        """The same workload with only the arrivals before ``end_s`` (a short smoke run)."""
        return self.between(0.0, end_s)

    def between(self, start_s: float, end_s: float) -> Workload:
        """The arrivals in ``[start_s, end_s)``, moved ``start_s`` earlier so the run begins with the
        slice (a short run of a later part of the protocol; arrivals keep their phase labels)."""
        end_s = min(self.duration_s, end_s)
        arrivals = tuple(a if start_s == 0 else replace(a, at_s=round(a.at_s - start_s, 6))
                         for a in self.arrivals if start_s <= a.at_s < end_s)
        return replace(self, arrivals=arrivals, duration_s=max(0.0, end_s - start_s))

    def client_request(self, arrival: Arrival, labels: RunLabels, *, stream: bool = True,
                       priority: int | None = None) -> ClientRequest:
        """The HTTP request for ``arrival`` (with its filler prompt and its phase's window)."""
        phase = self.phase_named(arrival.phase)
        return ClientRequest(
            arrival.request_id,
            self.model,
            filler_prompt(arrival.prompt_chars, self.seed, arrival.request_id),
            arrival.max_tokens,
            traffic_class=arrival.traffic_class,
            stream=stream,
            arrival_phase=arrival.phase,
            arrival_phase_start_s=None if phase is None else phase.start_s,
            arrival_phase_window_s=None if phase is None else phase.end_s - phase.start_s,
            priority=priority,
            labels=labels,
        )

    def requests(self, labels: RunLabels, *, stream: bool = True,
                 priority: Callable[[str], int | None] = lambda traffic_class: None,
                 ) -> Iterator[tuple[float, ClientRequest]]:
        """Every arrival's request; ``priority(traffic_class)`` is the body's vLLM priority, if any."""
        for arrival in self.arrivals:
            yield arrival.at_s, self.client_request(arrival, labels, stream=stream,
                                                    priority=priority(arrival.traffic_class))


def poisson_arrivals(rng: random.Random, phases: tuple[Phase, ...], traffic_class: str) -> list[tuple[float, str]]:
    """(time, phase name) of each arrival of one class: a Poisson process, rate constant per phase."""
    out: list[tuple[float, str]] = []
    for phase in phases:
        rate = phase.rate_per_s(traffic_class)
        if rate <= 0:
            continue
        t = phase.start_s + rng.expovariate(rate)
        while t < phase.end_s:
            out.append((t, phase.name))
            t += rng.expovariate(rate)
    return out


MOFLUX_PHASES = (
    Phase("interactive-alone", 0.0, 25.0, (("interactive", 0.25),)),
    Phase(ARRIVAL_PHASE_BORROW, 25.0, 60.0, (("batch", 0.75),)),
    Phase(ARRIVAL_PHASE_RETURN, 60.0, 85.0, (("interactive", 0.5), ("batch", 0.75))),
    Phase("drain", 85.0, 105.0),
)

_INTERACTIVE = RequestShape(400, 16)
MOFLUX_PROFILES: dict[str, tuple[tuple[tuple[str, RequestShape], ...], float, EngineShape]] = {
    # metal-balanced-v1: short batch; the engine never nears KV pressure.
    "balanced": ((("interactive", _INTERACTIVE), ("batch", RequestShape(800, 32))), 0.75, EngineShape()),
    # metal-long-context-v1: ~1,600-token batch prompts at 0.15 req/s into 320 blocks x 16 tokens.
    "long-context": (
        (("interactive", _INTERACTIVE), ("batch", RequestShape(7_100, 64))),
        0.15,
        EngineShape(num_gpu_blocks=320, block_size=16),
    ),
}


#: The fixed-burst protocol (the MoFlux benchmark's backend-availability runs, v3): the Long-context
#: load with its batch arrivals before 60 s replaced by one "prime" request at 25 s and three
#: "pressure" requests 100 ms apart at 48 s, and the first interactive arrival of the return window
#: moved to exactly 60 s with a 2,000-character prompt (~474 tokens, 30 KV blocks of 16).
FIXED_BURST = "fixed-burst"
FIXED_BURST_PRIME_S = 25.0
FIXED_BURST_PRESSURE_S = (48.0, 48.1, 48.2)
FIXED_BURST_RETURN_S = 60.0
FIXED_BURST_RETURN_CHARS = 2_000


def moflux_workload(profile: str = "balanced", seed: int = 0, *, model: str = MOFLUX_MODEL) -> Workload:
    """The 105-s MoFlux protocol for ``profile`` (``balanced``, ``long-context`` or ``fixed-burst``)."""
    if profile == FIXED_BURST:
        return _fixed_burst(moflux_workload("long-context", seed, model=model))
    if profile not in MOFLUX_PROFILES:
        choices = ", ".join([*MOFLUX_PROFILES, FIXED_BURST])
        raise SettingError("workload", f"unknown MoFlux profile {profile!r}; choose one of {choices}")
    shapes, batch_rate, engine = MOFLUX_PROFILES[profile]
    phases = tuple(
        Phase(p.name, p.start_s, p.end_s, tuple((c, batch_rate if c == "batch" else r) for c, r in p.rates_per_s))
        for p in MOFLUX_PHASES
    )
    shape_of = dict(shapes)
    timed: list[tuple[float, str, str]] = []
    for traffic_class in ("interactive", "batch"):
        rng = random.Random(f"moflux:{seed}:{traffic_class}")
        timed.extend((t, traffic_class, phase) for t, phase in poisson_arrivals(rng, phases, traffic_class))
    timed.sort()
    arrivals = tuple(
        Arrival(round(t, 6), f"{profile}-s{seed}-{i:04d}-{c[0]}", c, phase, shape_of[c].prompt_chars, shape_of[c].max_tokens)
        for i, (t, c, phase) in enumerate(timed)
    )
    return Workload(profile, seed, 105.0, phases, shapes, arrivals, model, Slo(), engine)


def _fixed_burst(long_context: Workload) -> Workload:
    """``long_context`` made the fixed-burst protocol (``FIXED_BURST``), same seed, same phases."""
    batch = dict(long_context.shapes)["batch"]
    kept = [a for a in long_context.arrivals if not (a.traffic_class == "batch" and a.at_s < FIXED_BURST_RETURN_S)]
    prefix = f"{FIXED_BURST}-s{long_context.seed}"
    fixed = [Arrival(FIXED_BURST_PRIME_S, f"{prefix}-prime-b", "batch", ARRIVAL_PHASE_BORROW, batch.prompt_chars,
                     batch.max_tokens)]
    fixed += [Arrival(at_s, f"{prefix}-pressure{i}-b", "batch", ARRIVAL_PHASE_BORROW, batch.prompt_chars,
                      batch.max_tokens) for i, at_s in enumerate(FIXED_BURST_PRESSURE_S, 1)]
    returning = min((a for a in kept if a.traffic_class == "interactive" and a.phase == ARRIVAL_PHASE_RETURN),
                    key=lambda a: a.at_s, default=None)
    arrivals = []
    for arrival in kept:
        if arrival is returning:
            arrival = replace(arrival, at_s=FIXED_BURST_RETURN_S, prompt_chars=FIXED_BURST_RETURN_CHARS)
        arrivals.append(replace(arrival, request_id=arrival.request_id.replace(long_context.name, FIXED_BURST, 1)))
    return replace(long_context, name=FIXED_BURST, arrivals=tuple(sorted(fixed + arrivals, key=lambda a: a.at_s)))
