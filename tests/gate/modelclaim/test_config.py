"""The [modelclaim] table: what it builds, and errors that name the TOML key path."""

from __future__ import annotations

import tomllib

import pytest

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.config import build_core, build_router
from restorelens.gate.modelclaim.process_backend import ProcessBackend
from restorelens.gate.modelclaim.router import ModelClaimRouter
from restorelens.gate.modelclaim.vllm_backend import VllmSleepBackend
from restorelens.gate.routing import ModelRouter

GIB = 2**30
EXAMPLE = """
[modelclaim]
retry_after = { not_ready_s = 5, waiting_for_room_s = 15, moving_s = 45 }
policy = { sleepAfterSeconds = 60, noWakeReserveWhileAsleep = true, sleepToMakeRoomAfterSeconds = 20 }
host_ram_limits = { node-a = "64Gi" }

[[modelclaim.pods]]
name = "pod-1"
node = "node-a"
gpus = ["24Gi", "24Gi"]

[[modelclaim.claims]]
model = "attached"
perGPU = { maximumFootprint = "10Gi", kvFloor = "4Gi" }
weights = "8Gi"
engine_url = "http://127.0.0.1:9"

[[modelclaim.claims]]
model = "started"
perGPU = { maximumFootprint = "10Gi", kvFloor = "4Gi" }
command = ["python", "-m", "restorelens", "sim", "--port", "{port}"]
engine_args = { max-num-seqs = "4" }

[[modelclaim.claims]]
model = "simulated"
perGPU = { maximumFootprint = "2Gi", kvFloor = "1Gi" }
simulated = { cold_start_s = 1, wake_s = 0.5 }

[[modelclaim.claims]]
model = "no-pergpu"
simulated = {}
"""


def test_builds_a_router_with_a_backend_per_claim() -> None:
    router = build_router(tomllib.loads(EXAMPLE)["modelclaim"], admin_token="secret-token")
    assert isinstance(router, ModelClaimRouter) and isinstance(router, ModelRouter)
    assert list(router.models()) == ["attached", "started", "simulated", "no-pergpu"]
    backends = router.backend.backends  # type: ignore[attr-defined]
    assert type(backends["attached"]) is VllmSleepBackend and isinstance(backends["started"], ProcessBackend)
    command = backends["started"].commands["started"]
    assert command.render(host="127.0.0.1", port=8123, model="started")[-4:] == ["--port", "8123", "--max-num-seqs", "4"]
    core = router.core
    assert core.policy.sleep_to_make_room_after_s == 20
    assert core.answers.retry_after_s("Moving") == 45
    assert core.ledger.host_ram_limit_bytes == {"node-a": 64 * GIB}
    assert core.pods["pod-1"].gpu_memory_bytes == (24 * GIB, 24 * GIB)
    core.start(0.0)
    assert (core.status("no-pergpu").phase, core.status("no-pergpu").reason) == ("Pending", "InvalidPerGPU")


@pytest.mark.parametrize(
    ("edit", "setting"),
    [
        (lambda t: t.update(colour="red"), "modelclaim.colour"),
        (lambda t: t["pods"][0].update(gpus=["24 gigs"]), "modelclaim.pods[0].gpus[0]"),
        (lambda t: t["pods"][0].update(gpus=[]), "modelclaim.pods[0].gpus"),
        (lambda t: t["claims"][0]["perGPU"].update(kvFloor="lots"), "modelclaim.claims[0].perGPU.kvFloor"),
        (lambda t: t["claims"][0]["perGPU"].update(maxFootprint="1Gi"), "modelclaim.claims[0].perGPU.maxFootprint"),
        (lambda t: t["claims"][1].update(engine_url="http://x"), "modelclaim.claims[1]"),
        (lambda t: t["claims"][2].update(pods=["pod-9"]), "modelclaim.claims[2].pods[0]"),
        (lambda t: t["claims"][2]["simulated"].update(wake_s=-1), "modelclaim.claims[2].simulated.wake_s"),
        (lambda t: t["policy"].update(sleepToMakeRoomAfterSeconds=90), "modelclaim.policy.sleepToMakeRoomAfterSeconds"),
        (lambda t: t["policy"].update(sleepAfter=1), "modelclaim.policy.sleepAfter"),
        (lambda t: t["retry_after"].update(moving_s=0), "modelclaim.retry_after.moving_s"),
        (lambda t: t["host_ram_limits"].update({"node-z": "1Gi"}), "modelclaim.host_ram_limits.node-z"),
        (lambda t: t["claims"].append(dict(t["claims"][0])), "modelclaim.claims"),
        (lambda t: t["claims"][2]["simulated"].update(wake_s=float("nan")), "modelclaim.claims[2].simulated.wake_s"),
        (lambda t: t["retry_after"].update(moving_s=float("inf")), "modelclaim.retry_after.moving_s"),
        (lambda t: t.update(poll_interval_s=float("nan")), "modelclaim.poll_interval_s"),
        (lambda t: t["policy"].update(sleepAfterSeconds=float("nan")), "modelclaim.policy.sleepAfterSeconds"),
    ],
)
def test_errors_name_the_key_path(edit, setting: str) -> None:  # noqa: ANN001
    table = tomllib.loads(EXAMPLE)["modelclaim"]
    edit(table)
    with pytest.raises(SettingError) as info:
        build_core(table) if setting.startswith("modelclaim.policy") else build_router(table)
    assert info.value.setting == setting
