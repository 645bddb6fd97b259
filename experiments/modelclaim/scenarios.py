"""ModelClaim wake scenarios as data (the wake story of docs/design.md; AIBrix semantics: docs/modelclaim.md).

Each scenario is a small deployment (pods, declared claims, pool policy, the simulator preset that
plays each model's engine), the state it is brought into before the first request, and the
requests: the first one at 0 s and a second client during the wake. Which wake path the lifecycle
takes, and which Retry-After the gateway answers, follow from that state:

| scenario | state before the first request | wake path | first answer |
|---|---|---|---|
| ``modelclaim-in-place`` | asleep, wake reserve kept (room on its GPU) | in-place | 503, Retry-After 10 |
| ``modelclaim-make-room`` | asleep with ``noWakeReserveWhileAsleep``; a neighbour idle 120 s fills the GPU | make-room | 503, Retry-After 20 |
| ``modelclaim-move`` | asleep, no reserve; its pod's neighbour idle only 5 s; room on another pod | move | 503, Retry-After 30 |
| ``modelclaim-cold-start`` | not started (the lifecycle starts with the first request) | cold-start | 503, Retry-After 10 |

Each claim declares what its engine takes (``declared_durations``: the preset's modelled start,
wake and level-1 sleep), as an operator declares a measured engine's: a calibrated gate's first
wake, with no wake seen yet, is hinted from that.

Both runners (``modelclaim.virtual``, ``modelclaim.live``) build the same lifecycle core from this.
``expected_wake`` derives the decomposition the scenario must show from the engine presets, so
tests assert the analysis against numbers that are not read back from the run.

Arms (issue #20, ``MODELCLAIM_ARMS``): how the gateway answers a waking model and how the client
reads the answer. Each arm's name is the ``modelclaim.hint_mode`` its gate puts on ``gate.request``:

| arm | ``[modelclaim]`` | client policy |
|---|---|---|
| ``fixed`` (default) | the fixed Retry-After table (AIBrix) | ``honour-retry-after`` |
| ``calibrated`` | ``retry_after_mode = "calibrated"`` | ``honour-hint-ms`` |
| ``hold`` | ``retry_after_mode = "calibrated"``, ``hold_s = 30`` | ``honour-hint-ms`` |

Cycles: a run repeats the sleep -> wake cycle ``cycles`` times (default 10), so a calibrated
lifecycle has history within the run. A cycle is the whole scenario once: a fresh deployment
(a restarted gate and lifecycle, new engines) brought into the scenario's starting state, then
its requests. Only what the lifecycle learnt from its wakes (``WakeCalibration``) carries over to
the next cycle: handed over in virtual time, through the ``calibration_path`` file live, as a
restarted gate reads it. Cycles follow one another on the run's timeline, never overlapping, and
carry the run's labels; cycle ``k`` > 1 suffixes its request ids with ``-c{k}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from restorelens.errors import SettingError
from restorelens.experiments.live_tolerance import live_tolerance_s
from restorelens.loadgen import Arrival
from restorelens.spans import ARRIVAL_PHASE_WAKE, HINT_MODES

__all__ = [
    "CALIBRATED",
    "DEFAULT_CYCLES",
    "FIXED",
    "HOLD",
    "HOLD_S",
    "ClaimShape",
    "ExpectedWake",
    "MODELCLAIM_ARMS",
    "MODELCLAIM_SCENARIOS",
    "ModelClaimScenario",
    "ModelClaimSetup",
    "WAKE_PHASE",
    "WAKE_WORKLOAD",
    "declared_durations",
    "expected_wake",
    "get_modelclaim_scenario",
]

GIB = 2**30
#: How the wake scenarios' requests are labelled (``restore.workload``, ``restore.arrival_phase``).
#: They measure a wake, not a policy: the gate in front of the lifecycle admits first come, first
#: served (``gate.policy`` fcfs, truthfully), but they are no MoFlux arm (docs/demo.md).
WAKE_WORKLOAD = "modelclaim"
#: Kept as this module's name for ``restorelens.spans.ARRIVAL_PHASE_WAKE`` (the analysis's side of it).
WAKE_PHASE = ARRIVAL_PHASE_WAKE
WAKE_MODEL = "llama-3-8b"
NEIGHBOUR_MODEL = "qwen2.5-1.5b"
GPU_BYTES = 24 * GIB
#: The arms, named as the hint modes their gates put on ``gate.request`` (``modelclaim.hint_mode``).
MODELCLAIM_ARMS = HINT_MODES
FIXED, CALIBRATED, HOLD = MODELCLAIM_ARMS
#: Sleep -> wake cycles per run: enough for a calibration to have history within the run.
DEFAULT_CYCLES = 10
#: The hold arm's ``[modelclaim] hold_s``: a request is held when its model should serve within it.
HOLD_S = 30.0


@dataclass(frozen=True, slots=True)
class ClaimShape:
    """One declared model and the simulator preset that plays its engine."""

    model: str
    preset: str
    max_footprint_bytes: int
    kv_floor_bytes: int
    weight_bytes: int
    sleeping_footprint_bytes: int = 1 * GIB
    pods: tuple[str, ...] = ("pod-1",)


WAKE_CLAIM = ClaimShape(WAKE_MODEL, "llama-8b-h20", 16 * GIB, 4 * GIB, 15 * GIB)
NEIGHBOUR_CLAIM = ClaimShape(NEIGHBOUR_MODEL, "qwen2.5-1.5b-m1", 6 * GIB, 2 * GIB, 3 * GIB)


@dataclass(frozen=True, slots=True)
class ModelClaimSetup:
    """The deployment before the first request."""

    model_state: str  # "asleep" or "not-started"
    wake_reserve: bool = True  # False: noWakeReserveWhileAsleep
    #: A neighbour on the model's GPU, placed once the model sleeps, idle this long at the first request.
    neighbour_idle_s: float | None = None
    room_on_own_pod: bool = True
    room_on_other_pod: bool = False
    #: Asleep scenarios: the model is put to sleep this long after it became ready.
    sleep_after_ready_s: float = 1.0
    #: In-place: the first request comes this long after the model fell asleep.
    asleep_for_s: float = 30.0


@dataclass(frozen=True, slots=True)
class ModelClaimScenario:
    name: str
    wake_path: str
    expected_retry_after_s: int
    setup: ModelClaimSetup
    #: The first request at 0 s and a second client arriving during the wake.
    arrivals: tuple[Arrival, ...]
    model: str = WAKE_MODEL
    claims: tuple[ClaimShape, ...] = (WAKE_CLAIM,)
    pods: tuple[str, ...] = ("pod-1",)
    gpu_bytes: int = GPU_BYTES
    max_attempts: int = 10
    deadline_s: float = 300.0
    #: The lifecycle's readiness polling (virtual time: a start observed at the first poll after ready).
    poll_interval_s: float = 0.5
    #: Idle sleep of an Active engine; None: never (allowed only without the wake reserve).
    sleep_after_s: float | None = 600.0
    stream: bool = True
    arm: str = FIXED
    #: Sleep -> wake cycles of one run (see the module doc).
    cycles: int = DEFAULT_CYCLES
    #: The hold arm's ``hold_s``.
    hold_s: float = HOLD_S
    #: Each claim declares its preset's durations (``declared_durations``); False: nothing is known
    #: of a wake before one was seen, and a calibrated gate re-estimates its first wake's hints.
    declare_durations: bool = True
    labels: dict[str, str] = field(default_factory=dict)

    kind = "modelclaim"

    def __post_init__(self) -> None:
        if self.arm not in MODELCLAIM_ARMS:
            raise SettingError("--arm", _unknown_arm(self.arm))
        if isinstance(self.cycles, bool) or not isinstance(self.cycles, int) or self.cycles < 1:
            raise SettingError("--cycles", f"a run has at least one sleep -> wake cycle, got {self.cycles!r}")

    @property
    def workload_name(self) -> str:
        return WAKE_WORKLOAD

    @property
    def retry_policy(self) -> str:
        """The client's policy: the Retry-After of the fixed table, else the gate's precise hint."""
        return "honour-retry-after" if self.arm == FIXED else "honour-hint-ms"

    def hint_settings(self) -> dict[str, Any]:
        """The arm's keys of the ``[modelclaim]`` table (``retry_after_mode``, ``hold_s``)."""
        settings: dict[str, Any] = {"retry_after_mode": FIXED if self.arm == FIXED else CALIBRATED}
        if self.arm == HOLD:
            settings["hold_s"] = self.hold_s
        return settings

    def with_arm(self, arm: str | None) -> ModelClaimScenario:
        """This scenario under ``arm`` (None: as it is, ``fixed`` by default)."""
        if arm is None:
            return self
        if arm not in MODELCLAIM_ARMS:
            raise SettingError("--arm", _unknown_arm(arm))
        return replace(self, arm=arm)

    def arrivals_of(self, cycle: int) -> tuple[Arrival, ...]:
        """Cycle ``cycle``'s requests (1-based): the scenario's, their ids suffixed ``-c{cycle}`` after the first."""
        if cycle == 1:
            return self.arrivals
        return tuple(replace(a, request_id=f"{a.request_id}-c{cycle}") for a in self.arrivals)


def _unknown_arm(arm: object) -> str:
    return f"unknown arm {arm!r} for the ModelClaim scenarios; choose one of {', '.join(MODELCLAIM_ARMS)}"


def _arrivals(name: str) -> tuple[Arrival, ...]:
    return (
        Arrival(0.0, f"{name}-first", "interactive", WAKE_PHASE, 400, 16),
        Arrival(2.0, f"{name}-second", "interactive", WAKE_PHASE, 400, 16),
    )


MODELCLAIM_SCENARIOS: dict[str, ModelClaimScenario] = {
    s.name: s
    for s in (
        ModelClaimScenario("modelclaim-in-place", "in-place", 10, ModelClaimSetup("asleep"),
                           _arrivals("modelclaim-in-place")),
        ModelClaimScenario("modelclaim-make-room", "make-room", 20,
                           ModelClaimSetup("asleep", wake_reserve=False, neighbour_idle_s=120.0, room_on_own_pod=False),
                           _arrivals("modelclaim-make-room"), claims=(WAKE_CLAIM, NEIGHBOUR_CLAIM), sleep_after_s=None),
        ModelClaimScenario("modelclaim-move", "move", 30,
                           ModelClaimSetup("asleep", wake_reserve=False, neighbour_idle_s=5.0, room_on_own_pod=False,
                                           room_on_other_pod=True),
                           _arrivals("modelclaim-move"),
                           claims=(replace(WAKE_CLAIM, pods=("pod-1", "pod-2")), NEIGHBOUR_CLAIM),
                           pods=("pod-1", "pod-2"), sleep_after_s=None),
        ModelClaimScenario("modelclaim-cold-start", "cold-start", 10, ModelClaimSetup("not-started"),
                           _arrivals("modelclaim-cold-start")),
    )
}


def get_modelclaim_scenario(name: str) -> ModelClaimScenario:
    scenario = MODELCLAIM_SCENARIOS.get(name)
    if scenario is None:
        raise SettingError("SCENARIO", f"unknown ModelClaim scenario {name!r}; choose one of {', '.join(MODELCLAIM_SCENARIOS)}")
    return scenario


@dataclass(frozen=True, slots=True)
class ExpectedWake:
    """The decomposition a scenario must show (seconds after the first request; docs/analysis.md, wake episodes)."""

    wake_path: str
    #: The first answer's Retry-After (whole seconds), and its precise hint (the fixed table's
    #: value, or ``x-restorelens-retry-after-ms`` / 1000 of a calibrated gate): for a held first
    #: attempt, the hint it was held with.
    retry_after_s: float
    ready_s: float
    observed_s: float
    attempts: int
    #: From the engine's readiness to the moment the gate let the successful attempt through: its
    #: start, or the end of its hold.
    overshoot_s: float
    hint_s: float = math.nan
    #: How long the gate held the first attempt (the hold arm), else None.
    held_s: float | None = None
    #: Exact in virtual time. Live, each time value is off by the real HTTP round trips and
    #: scheduling delays, magnified by the scale: more of them than a MoFlux request meets (the
    #: lifecycle's wake call and health polls cross loopback too), so up to ~0.5 real seconds on a
    #: busy 2-core machine (0.3 s was exceeded once with three CPU hogs beside the test).
    live_slack_real_s: float = 0.5

    def __post_init__(self) -> None:
        if math.isnan(self.hint_s):
            object.__setattr__(self, "hint_s", self.retry_after_s)

    def live_tolerance_s(self, time_scale: float = 1.0, round_trip_s: float = 0.0) -> float:
        """Protocol seconds a live value may be off (at least 1 s: the lifecycle's 0.5-s readiness
        polls land on either side of a ready instant); ``round_trip_s``: see
        ``live_tolerance.live_tolerance_s``."""
        return max(1.0, live_tolerance_s(self.live_slack_real_s, time_scale, round_trip_s))

    @property
    def hint_error_s(self) -> float:
        return self.hint_s - self.ready_s

    @property
    def success_s(self) -> float:
        return self.ready_s + self.overshoot_s


def declared_durations(claim: ClaimShape) -> dict[str, float]:
    """What the deployment declares its engine takes (``[[modelclaim.claims]] expected``): the
    simulator preset's modelled durations, as an operator would declare a measured engine's. A
    start until ready; a wake from level-1 sleep until ready (the weights copied back, the KV cache
    reallocated); a level-1 sleep (the weights offloaded)."""
    from restorelens.sim import get_preset

    preset = get_preset(claim.preset)
    return {"start_s": preset.cold_start_s,
            "wake_s": preset.wake_s(weights_discarded=False) + preset.kv_cache_realloc_s,
            "sleep_s": preset.level1_offload_s()}


def expected_wake(scenario: ModelClaimScenario, *, seen: bool = False) -> ExpectedWake:
    """What the lifecycle, the gate and the scenario's client must do, from the presets' modelled durations.

    The wake is wanted at 0 s. In place: the engine wakes at once. Make room: the neighbour
    sleeps first (its level-1 offload), then the engine wakes. Move and cold start: a new engine
    loads (its cold start). A wake is observed at its ready time (the wake call answers once the
    engine is awake), a start at the first readiness poll at or after it (``PollSchedule``: fine
    around the start time the lifecycle expects).

    The client comes back when each answer says, until an attempt starts at or after that
    observation. The fixed arm answers the table's Retry-After. A calibrated gate predicts the
    wake: ``seen``, a wake of this path was seen before (a run's later cycles), as lasting as long
    as that one (path began -> observed; each scenario's path begins with its first request);
    before, as the claims' declared durations (``declared_durations``) say. It hints what is left
    of it plus ``HINT_MARGIN_S``, in whole milliseconds. The hold arm holds an attempt whose hint
    is at most ``hold_s`` until the model serves or ``hold_s`` ends (then 503 with a fresh hint);
    a wake predicted longer than ``hold_s`` is answered 503 with a hint ``hold_s / 2`` before its
    predicted end, and the retry is held.
    """
    from restorelens.gate.modelclaim import HINT_MARGIN_S, MIN_HINT_S, PollSchedule

    if not scenario.declare_durations and scenario.arm != FIXED:
        raise SettingError("declare_durations", "expected_wake derives only declared or fixed hints")
    declared = declared_durations(_claim(scenario, scenario.model))
    called_s = 0.0
    if scenario.wake_path in ("move", "cold-start"):
        ready_s = declared["start_s"]
        # the start is expected as declared, or once seen as long as that one was observed to take
        first_s = PollSchedule(scenario.poll_interval_s, ready_s).observed_s(0.0, ready_s)
        expected_call_s = first_s if seen else ready_s
        observed_s = PollSchedule(scenario.poll_interval_s, expected_call_s).observed_s(0.0, ready_s)
    else:
        if scenario.wake_path == "make-room":
            called_s = declared_durations(_claim(scenario, NEIGHBOUR_MODEL))["sleep_s"]
        ready_s = observed_s = called_s + declared["wake_s"]
    predicted_s = observed_s if seen else ready_s

    def hint(at_s: float) -> tuple[float, bool]:
        """The hint at ``at_s`` and whether the hold arm may hold on it."""
        if scenario.arm == FIXED:
            return float(scenario.expected_retry_after_s), True
        ready_in_s = max(0.0, predicted_s - at_s)
        if scenario.arm == HOLD and ready_in_s > scenario.hold_s:
            return _ms(max(MIN_HINT_S, ready_in_s - scenario.hold_s / 2)), False
        return _ms(max(MIN_HINT_S, ready_in_s + HINT_MARGIN_S)), True

    first_hint_s = hint(0.0)[0]
    at_s, attempts, held_s = 0.0, 0, None
    while at_s < observed_s:
        attempts += 1
        wait_s, may_hold = hint(at_s)
        if scenario.arm == HOLD and may_hold and wait_s <= scenario.hold_s:
            held = min(observed_s, at_s + scenario.hold_s) - at_s
            held_s = held if attempts == 1 else held_s  # the first attempt's hold (the episode's hold_s)
            at_s += held
            if at_s >= observed_s:
                return ExpectedWake(scenario.wake_path, float(math.ceil(first_hint_s)), ready_s, observed_s, attempts,
                                    at_s - ready_s, first_hint_s, held_s)
            wait_s = hint(at_s)[0]
        at_s += wait_s
    return ExpectedWake(scenario.wake_path, float(math.ceil(first_hint_s)), ready_s, observed_s, attempts + 1,
                        at_s - ready_s, first_hint_s, held_s)


def _ms(wait_s: float) -> float:
    """A hint as the gate sends it: whole milliseconds, rounded up."""
    return math.ceil(wait_s * 1000 - 1e-6) / 1000


def _claim(scenario: ModelClaimScenario, model: str) -> ClaimShape:
    return next(c for c in scenario.claims if c.model == model)
