"""The backend's reports (ready, slept, failed) fed straight to the sans-I/O core, stale ones included."""

from __future__ import annotations

from restorelens.gate.modelclaim.actions import SleepEngine, StartEngine, StateInterval, WakeEngine, WakeRecord
from restorelens.gate.modelclaim.core import RESTART_BACKOFF_S, ModelClaimCore
from restorelens.gate.modelclaim.placement import ClaimSpec, GpuSlot, Pod
from restorelens.gate.modelclaim.policy import PoolPolicy

GIB = 2**30
T0 = 500.0


class Recorder:
    def __init__(self) -> None:
        self.wakes: list[WakeRecord] = []

    def on_state_interval(self, interval: StateInterval) -> None:
        pass

    def on_wake_finished(self, record: WakeRecord) -> None:
        self.wakes.append(record)


def started_core(*, restart_backoff_s: tuple[float, ...] = RESTART_BACKOFF_S) -> tuple[ModelClaimCore, Recorder]:
    recorder = Recorder()
    core = ModelClaimCore([Pod("p1", (24 * GIB,))], [ClaimSpec("m", 10 * GIB, 4 * GIB, weight_bytes=3 * GIB)],
                          PoolPolicy(sleep_after_s=60), listeners=[recorder], restart_backoff_s=restart_backoff_s)
    assert core.start(T0) == [StartEngine("m", 1, "p1", (0,))]
    return core, recorder


def test_ready_makes_the_model_active_with_the_backend_ready_time_and_the_observed_time() -> None:
    core, rec = started_core()
    assert core.on_engine_ready("m", 2, T0 + 30, ready_at_s=T0 + 29, url="http://stale") == []  # not its instance
    assert core.status("m").phase == "Loading"
    core.on_engine_ready("m", 1, T0 + 30, ready_at_s=T0 + 29, url="http://e1")
    status = core.status("m")
    assert (status.phase, status.upstream_url, status.idle_since_s) == ("Active", "http://e1", T0 + 30)
    assert (rec.wakes[-1].outcome, rec.wakes[-1].ready_s, rec.wakes[-1].observed_s) == ("ready", T0 + 29, T0 + 30)
    core.on_engine_ready("m", 1, T0 + 31, ready_at_s=T0 + 31)  # no start or wake in progress: stale
    assert len(rec.wakes) == 1


def test_slept_only_counts_for_a_sleep_in_progress_and_a_woken_engine_gives_back_host_ram() -> None:
    core, _ = started_core()
    core.on_engine_ready("m", 1, T0 + 30)
    core.on_engine_slept("m", 1, T0 + 35)  # no sleep was asked for
    assert core.status("m").phase == "Active"
    assert core.sleep("m", T0 + 40) == [SleepEngine("m", 1, "p1", 1)]
    assert core.ledger.host_bytes("p1") == 3 * GIB  # held from the sleep call
    core.on_engine_slept("m", 1, T0 + 41)
    _, actions = core.route("m", T0 + 50)
    assert actions == [WakeEngine("m", 1, "p1")]
    assert core.ledger.host_bytes("p1") == 3 * GIB  # until the wake completes
    core.on_engine_ready("m", 1, T0 + 54)
    assert (core.status("m").phase, core.ledger.host_bytes("p1")) == ("Active", 0)


def test_a_failed_wake_ends_it_failed_and_restarts_after_the_backoff_a_repeated_report_is_stale() -> None:
    core, rec = started_core()
    core.on_engine_ready("m", 1, T0 + 30)
    core.sleep("m", T0 + 40)
    core.on_engine_slept("m", 1, T0 + 41)
    core.route("m", T0 + 50)
    core.on_engine_failed("m", 1, T0 + 52, "wake_up answered 500")
    core.on_engine_failed("m", 1, T0 + 53, "again")  # the instance is already known crashed
    assert (rec.wakes[-1].outcome, rec.wakes[-1].error) == ("failed", "wake_up answered 500")
    status = core.status("m")
    assert (status.phase, status.reason, status.upstream_url) == ("Loading", "EngineFailed", None)
    assert core.ledger.host_bytes("p1") == 0
    assert core.next_deadline_s() == T0 + 54  # the first backoff, 2 s, counted from the first report
    assert core.advance(T0 + 54) == [StartEngine("m", 2, "p1", (0,))]
    assert core.status("m").restarts == 1


def test_past_the_restart_budget_the_claim_fails_and_frees_its_gpus() -> None:
    core, rec = started_core(restart_backoff_s=(1.0,))
    core.on_engine_failed("m", 1, T0 + 5, "exited")
    core.advance(T0 + 6)
    core.on_engine_failed("m", 2, T0 + 8, "exited again")
    status = core.status("m")
    assert (status.phase, status.reason, status.pod, status.restarts) == ("Failed", "EngineFailed", None, 1)
    assert core.ledger.charged_bytes(GpuSlot("p1", 0)) == 0
    assert [w.outcome for w in rec.wakes] == ["failed", "failed"]
    assert core.next_deadline_s() is None
