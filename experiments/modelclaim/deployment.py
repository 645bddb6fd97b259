"""A ModelClaim scenario's deployment: its ``[modelclaim]`` table and the steps that set it up.

``deployment_table`` is the same table a user puts in the gate's TOML file, so both runners build
the lifecycle core through the gate's own config path (``modelclaim.config.build_core``).

``SetupDirector`` is sans-I/O: it watches each model's (phase, since) and says when to put the
model to sleep and when the first request is due (t0). The virtual runner feeds it the core's
status after every lifecycle event; the live runner feeds it ``GET /modelclaim/status`` polls and
sends the sleep through the bearer-token control endpoint. Times come from the lifecycle's own
``since_s`` stamps, so both shells derive t0 from the same instants.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from restorelens.experiments.modelclaim.scenarios import NEIGHBOUR_MODEL, ModelClaimScenario, declared_durations

__all__ = ["SetupDirector", "deployment_table"]

ACTIVE, SLEEPING = "Active", "Sleeping"


def deployment_table(scenario: ModelClaimScenario, calibration_path: Path | None = None) -> dict[str, Any]:
    """The scenario's ``[modelclaim]`` table (byte quantities as integers), with its arm's hint
    settings (``retry_after_mode``, ``hold_s``) and, when given, where the lifecycle keeps what it
    learnt from its wakes across restarts (``calibration_path``). Each claim declares its engine's
    modelled durations (``expected``): what a calibrated gate hints before it has seen a wake."""
    policy: dict[str, Any] = {}
    if scenario.sleep_after_s is not None:
        policy["sleepAfterSeconds"] = scenario.sleep_after_s
    if not scenario.setup.wake_reserve:
        policy["noWakeReserveWhileAsleep"] = True
    kept = {} if calibration_path is None else {"calibration_path": str(calibration_path)}
    return {
        **scenario.hint_settings(),
        **kept,
        "policy": policy,
        "poll_interval_s": scenario.poll_interval_s,
        "pods": [{"name": pod, "gpus": [scenario.gpu_bytes]} for pod in scenario.pods],
        "claims": [
            {
                "model": claim.model,
                "perGPU": {"maximumFootprint": claim.max_footprint_bytes, "kvFloor": claim.kv_floor_bytes},
                "weights": claim.weight_bytes,
                "sleeping_footprint": claim.sleeping_footprint_bytes,
                "pods": list(claim.pods),
                **({"expected": declared_durations(claim)} if scenario.declare_durations else {}),
            }
            for claim in scenario.claims
        ],
    }


@dataclass
class SetupDirector:
    """What to do next to bring the deployment into the scenario's state before t0."""

    scenario: ModelClaimScenario
    started_s: float | None = None
    wake_active_s: float | None = None
    sleep_sent: bool = False
    sleeping_since_s: float | None = None
    neighbour_active_s: float | None = None

    @property
    def has_neighbour(self) -> bool:
        return self.scenario.setup.neighbour_idle_s is not None

    def observe(self, states: Mapping[str, tuple[str, float]], now_s: float) -> None:
        """Take in each model's (phase, since_s) as the lifecycle reports it at ``now_s``."""
        if self.started_s is None:
            self.started_s = now_s
        phase, since_s = states[self.scenario.model]
        if self.wake_active_s is None and phase == ACTIVE:
            self.wake_active_s = since_s
        if self.sleep_sent and self.sleeping_since_s is None and phase == SLEEPING:
            self.sleeping_since_s = since_s
        if self.has_neighbour and self.neighbour_active_s is None:
            n_phase, n_since_s = states.get(NEIGHBOUR_MODEL, ("", 0.0))
            if n_phase == ACTIVE:
                self.neighbour_active_s = n_since_s

    def sleep_due_s(self) -> float | None:
        """When to put the model to sleep (once), or None."""
        if self.scenario.setup.model_state != "asleep" or self.sleep_sent or self.wake_active_s is None:
            return None
        return self.wake_active_s + self.scenario.setup.sleep_after_ready_s

    def t0_s(self) -> float | None:
        """When the first request goes out, once the setup has reached the scenario's state."""
        setup = self.scenario.setup
        if setup.model_state == "not-started":
            return self.started_s
        if self.has_neighbour:
            assert setup.neighbour_idle_s is not None
            return None if self.neighbour_active_s is None else self.neighbour_active_s + setup.neighbour_idle_s
        return None if self.sleeping_since_s is None else self.sleeping_since_s + setup.asleep_for_s
