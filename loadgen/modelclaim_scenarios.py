"""ModelClaim wake scenarios as data (DESIGN.md story B, reference/engines.md section 1).

Each scenario is the first request(s) to a model that is not ready, plus the deployment state that
decides which wake path the lifecycle takes and which Retry-After the gateway answers with:

| scenario | state before the first request | wake path | first answer |
|---|---|---|---|
| ``modelclaim-wake-reserved`` | asleep, wake reserve kept (room on its GPU) | in-place | 503, Retry-After 10 |
| ``modelclaim-wake-no-reserve`` | asleep with ``noWakeReserveWhileAsleep``; an idle neighbour fills the GPU | make-room | 503, Retry-After 20 |
| ``modelclaim-move`` | asleep, no room on its pod, room on another pod | move | 503, Retry-After 30 |
| ``modelclaim-cold-start`` | not started | cold-start | 503, Retry-After 10 |

The lifecycle core builds the deployment from ``setup``; the client side is the arrivals.
"""

from __future__ import annotations

from dataclasses import dataclass

from restorelens.errors import SettingError
from restorelens.loadgen.workloads import Arrival

__all__ = ["MODELCLAIM_SCENARIOS", "ModelClaimScenario", "get_modelclaim_scenario"]

WAKE_MODEL = "qwen3-0.6b"
NEIGHBOUR_MODEL = "llama-3-8b"


@dataclass(frozen=True, slots=True)
class ModelClaimSetup:
    """The deployment before the first request."""

    model_state: str  # "asleep" or "not-started"
    wake_reserve: bool = True  # False: noWakeReserveWhileAsleep
    neighbour_idle_s: float | None = None  # an idle neighbour that must sleep to make room
    room_on_own_pod: bool = True
    room_on_other_pod: bool = False


@dataclass(frozen=True, slots=True)
class ModelClaimScenario:
    name: str
    wake_path: str
    expected_retry_after_s: int
    setup: ModelClaimSetup
    #: The first request at 0 s and a second client arriving during the wake.
    arrivals: tuple[Arrival, ...]
    model: str = WAKE_MODEL


def _arrivals(name: str) -> tuple[Arrival, ...]:
    return (
        Arrival(0.0, f"{name}-first", "interactive", "wake", 400, 16),
        Arrival(2.0, f"{name}-second", "interactive", "wake", 400, 16),
    )


MODELCLAIM_SCENARIOS: dict[str, ModelClaimScenario] = {
    s.name: s
    for s in (
        ModelClaimScenario("modelclaim-wake-reserved", "in-place", 10, ModelClaimSetup("asleep"),
                           _arrivals("modelclaim-wake-reserved")),
        ModelClaimScenario("modelclaim-wake-no-reserve", "make-room", 20,
                           ModelClaimSetup("asleep", wake_reserve=False, neighbour_idle_s=120.0, room_on_own_pod=False),
                           _arrivals("modelclaim-wake-no-reserve")),
        ModelClaimScenario("modelclaim-move", "move", 30,
                           ModelClaimSetup("asleep", wake_reserve=False, room_on_own_pod=False, room_on_other_pod=True),
                           _arrivals("modelclaim-move")),
        ModelClaimScenario("modelclaim-cold-start", "cold-start", 10, ModelClaimSetup("not-started"),
                           _arrivals("modelclaim-cold-start")),
    )
}


def get_modelclaim_scenario(name: str) -> ModelClaimScenario:
    scenario = MODELCLAIM_SCENARIOS.get(name)
    if scenario is None:
        raise SettingError("SCENARIO", f"unknown ModelClaim scenario {name!r}; choose one of {', '.join(MODELCLAIM_SCENARIOS)}")
    return scenario
