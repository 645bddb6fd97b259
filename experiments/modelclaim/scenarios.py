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

Both runners (``modelclaim.virtual``, ``modelclaim.live``) build the same lifecycle core from this.
``expected_wake`` derives the decomposition the scenario must show from the engine presets, so
tests assert the analysis against numbers that are not read back from the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from restorelens.errors import SettingError
from restorelens.loadgen.workloads import Arrival
from restorelens.spans import ARRIVAL_PHASE_WAKE

__all__ = [
    "ClaimShape",
    "ExpectedWake",
    "MODELCLAIM_SCENARIOS",
    "ModelClaimScenario",
    "ModelClaimSetup",
    "WAKE_PHASE",
    "WAKE_WORKLOAD",
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
    retry_policy: str = "honour-retry-after"
    max_attempts: int = 10
    deadline_s: float = 300.0
    #: The lifecycle's readiness polling (virtual time: a start observed at the first poll after ready).
    poll_interval_s: float = 0.5
    #: Idle sleep of an Active engine; None: never (allowed only without the wake reserve).
    sleep_after_s: float | None = 600.0
    stream: bool = True
    arm: str = "lifecycle"
    labels: dict[str, str] = field(default_factory=dict)

    kind = "modelclaim"

    @property
    def workload_name(self) -> str:
        return WAKE_WORKLOAD

    def with_arm(self, arm: str | None) -> ModelClaimScenario:
        if arm not in (None, "lifecycle"):
            raise SettingError("--arm", f"ModelClaim scenarios have no arms (got {arm!r})")
        return self


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
    retry_after_s: float
    ready_s: float
    observed_s: float
    attempts: int
    overshoot_s: float
    #: Exact in virtual time. Live, each time value is off by the real HTTP round trips and
    #: scheduling delays, magnified by the scale: more of them than a MoFlux request meets (the
    #: lifecycle's wake call and health polls cross loopback too), so up to ~0.5 real seconds on a
    #: busy 2-core machine (0.3 s was exceeded once with three CPU hogs beside the test).
    live_slack_real_s: float = 0.5

    def live_tolerance_s(self, time_scale: float = 1.0, round_trip_s: float = 0.0) -> float:
        """Protocol seconds a live value may be off (at least 1 s: the lifecycle's 0.5-s readiness
        polls land on either side of a ready instant); ``round_trip_s``: see
        ``scenarios.live_tolerance_s``."""
        from restorelens.experiments.scenarios import live_tolerance_s

        return max(1.0, live_tolerance_s(self.live_slack_real_s, time_scale, round_trip_s))

    @property
    def hint_error_s(self) -> float:
        return self.retry_after_s - self.ready_s

    @property
    def success_s(self) -> float:
        return self.ready_s + self.overshoot_s


def expected_wake(scenario: ModelClaimScenario) -> ExpectedWake:
    """What the lifecycle and an honouring client must do, from the presets' modelled durations.

    The wake is wanted at 0 s. In place: the engine wakes at once. Make room: the neighbour
    sleeps first (its level-1 offload), then the engine wakes. Move and cold start: a new engine
    loads (its cold start). A wake is observed at its ready time (the wake call answers once the
    engine is awake), a start at the first readiness poll at or after it; the client retries
    every Retry-After until an attempt starts at or after that observation.
    """
    from restorelens.sim import get_preset

    wake = get_preset(_claim(scenario, scenario.model).preset)
    if scenario.wake_path in ("move", "cold-start"):
        ready_s = wake.cold_start_s
        observed_s = math.ceil(ready_s / scenario.poll_interval_s - 1e-9) * scenario.poll_interval_s
    else:
        ready_s = observed_s = wake.wake_s(weights_discarded=False) + wake.kv_cache_realloc_s
        if scenario.wake_path == "make-room":
            neighbour = get_preset(_claim(scenario, NEIGHBOUR_MODEL).preset)
            ready_s = observed_s = ready_s + neighbour.level1_offload_s()
    hint = scenario.expected_retry_after_s
    attempts = math.ceil(observed_s / hint - 1e-9) + 1
    return ExpectedWake(scenario.wake_path, float(hint), ready_s, observed_s, attempts, (attempts - 1) * hint - ready_s)


def _claim(scenario: ModelClaimScenario, model: str) -> ClaimShape:
    return next(c for c in scenario.claims if c.model == model)
