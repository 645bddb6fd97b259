"""The MoFlux scenarios: the lending protocol's workload plus the system it runs against (gate policy, engine shape).

A scenario is data; the runner (live or virtual) builds the servers or the cores from it, so both
shells run exactly the same experiment. ``restorelens run SCENARIO`` finds them by name through
``experiments.catalog``.

MoFlux arms (the benchmark's ``demo/VLLM-CONTENTION.md``; docs/experiments.md): ``fcfs`` and
``priority`` go straight to the engine (its arrival order; vLLM priority 0/10, set by the client),
``static`` (floors 3/1) and ``lend`` (the MoFlux arm: same floors, two interactive slots lendable,
one never lent) through the gate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from restorelens.errors import SettingError
from restorelens.experiments.live_tolerance import live_tolerance_s
from restorelens.gate import DEFAULT_POLICY, DEFAULTS, POLICIES, policy_named
from restorelens.loadgen import Workload, moflux_workload

__all__ = ["SCENARIOS", "MofluxScenario"]

#: Arms that go straight to the engine (their "policy" is the engine's own scheduling).
DIRECT_ARMS = frozenset({"fcfs", "priority"})

#: Balanced never neared KV pressure on the M1 (peak 3.11 %): give the engine a large pool.
BALANCED_KV_BLOCKS = 1_600


@dataclass(frozen=True)
class MofluxScenario:
    """The 105-s lending protocol for one profile and one arm."""

    name: str
    profile: str
    #: A policy's name or alias (``gate.policies.registry``): the gate's policy, or the engine's own
    #: scheduling for the ``DIRECT_ARMS``.
    arm: str = DEFAULT_POLICY
    engine_preset: str = "qwen2.5-1.5b-m1"
    stream: bool = True
    #: Client retry policy for 429s from the gate (the study's client did not retry: max 1 attempt).
    retry_policy: str = "honour-retry-after"
    max_attempts: int = 1
    #: Only arrivals before this many seconds (None: the whole protocol); for smoke runs.
    until_s: float | None = None
    #: Only arrivals from this many seconds on, moved so the run starts with them (a short run of
    #: a later part of the protocol, e.g. batch borrowing from 25 s).
    from_s: float = 0.0
    #: Live, a request's times differ from virtual time by real costs virtual time does not have:
    #: four loopback hops (client -> gate -> engine and back), the gate's and the engine's event
    #: loops, and the knock-on of a late request on the engine's steps (up to ~0.3 real seconds on
    #: a busy 2-core machine, as for the wake scenarios), magnified by the time scale.
    live_slack_real_s: float = 0.3
    #: The lend arm's controller period (``LendPolicy.control_period_s``); 0: the floor comes back
    #: the moment demand returns.
    control_period_s: float = DEFAULTS["control_period_s"]
    #: The restoration budget of the budget-aware arms (``lend-budget``, ``lend-preempt``): what a
    #: loan may cost to give back, in seconds (docs/gate.md).
    restore_budget_s: float = DEFAULTS["restore_budget_s"]
    #: Per traffic class, seconds a request may wait in the gate's queue, for every gated arm (the
    #: study's arms included): an ablation of the lenders' own queues. Empty: the study's pool, no
    #: queue (the lenders keep theirs).
    queue_s: tuple[tuple[str, float], ...] = ()

    kind = "moflux"

    def live_tolerance_s(self, time_scale: float = 1.0, round_trip_s: float = 0.0) -> float:
        """How far (protocol seconds) a live run's times may be from the virtual run's: the real
        slack, or ``LIVE_SLACK_ROUND_TRIPS`` loopback round trips of ``round_trip_s`` (measured on
        the machine at the time) when that is more, times the scale."""
        return live_tolerance_s(self.live_slack_real_s, time_scale, round_trip_s)

    def with_arm(self, arm: str | None) -> MofluxScenario:
        if arm is None:
            return self
        policy_named(arm, "--arm")
        return replace(self, arm=arm)

    @property
    def gate_policy(self) -> str:
        return policy_named(self.arm, "--arm").name

    @property
    def direct(self) -> bool:
        """The arm sends its requests straight to the engine, as the study's vllm-fcfs and
        vllm-priority arms did: no gate, the engine's own scheduler decides."""
        return self.gate_policy in DIRECT_ARMS

    def client_priority(self, traffic_class: str) -> int | None:
        """The vLLM priority the client itself puts on a request (the direct priority arm)."""
        from restorelens.gate import VLLM_PRIORITY

        return VLLM_PRIORITY.get(traffic_class) if self.direct and self.gate_policy == "priority" else None

    def workload(self, seed: int) -> Workload:
        workload = moflux_workload(self.profile, seed)
        if self.until_s is None and self.from_s == 0:
            return workload
        return workload.between(self.from_s, workload.duration_s if self.until_s is None else self.until_s)

    def engine_config(self, seed: int = 0) -> Any:
        from restorelens.sim import get_preset

        config = get_preset(self.engine_preset)
        shape = self.workload(seed).engine
        changes: dict[str, Any] = {
            "max_num_seqs": shape.max_num_seqs,
            "block_size": shape.block_size,
            "num_blocks": shape.num_gpu_blocks or BALANCED_KV_BLOCKS,
            "max_model_len": shape.max_model_len,
        }
        if POLICIES[self.gate_policy].engine_priority:
            changes["scheduling_policy"] = "priority"
        return config.replace(**changes)

    def adjust_policy(self, policy: Any) -> Any:
        """The gate's policy as this scenario runs it: ``queue_s`` replaces its queue per class."""
        if self.queue_s:  # the classes it names; a lender keeps its own queue for the others
            policy.class_wait_s = {**policy.class_wait_s, **dict(self.queue_s)}
        return policy

    def gate_settings(self, upstream_url: str, model: str) -> Any:
        from restorelens.gate import GateSettings

        # The study's pool has no admission queue (maxQueuePerAgent 0): a request over its class's
        # limit is answered 429 at once, and its client does not retry (max_attempts 1).
        # The budget-aware lenders are told the engine's KV pool, as an operator gives --kv-blocks.
        config = self.engine_config()
        return GateSettings(upstreams={model: upstream_url}, policy=self.gate_policy, wait_timeout_s=0.0,
                            control_period_s=self.control_period_s, restore_budget_s=self.restore_budget_s,
                            kv_blocks=config.num_blocks, block_size=config.block_size)


SCENARIOS: dict[str, MofluxScenario] = {
    "moflux-balanced": MofluxScenario("moflux-balanced", "balanced"),
    "moflux-long-context": MofluxScenario("moflux-long-context", "long-context"),
    # The study's stack restored the floor through grant revisions; its 250-ms sampling measured the
    # restoration 0.26-0.52 s after demand returned, one or two such cycles (docs/experiments.md).
    "moflux-fixed-burst": MofluxScenario("moflux-fixed-burst", "fixed-burst", control_period_s=0.25),
}

