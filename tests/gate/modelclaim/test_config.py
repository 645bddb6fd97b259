"""The [modelclaim] table: what it builds, and errors that name the TOML key path."""

from __future__ import annotations

import string
import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from restorelens.errors import SettingError
from restorelens.gate.modelclaim.config import build_core, build_router, check_table
from restorelens.gate.modelclaim.process_backend import EngineCommand, ProcessBackend
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
model = "per-pod"
perGPU = { maximumFootprint = "2Gi", kvFloor = "1Gi" }
pods = ["pod-1"]
engine_urls = { pod-1 = "http://127.0.0.1:10" }

[[modelclaim.claims]]
model = "no-pergpu"
engine_url = "http://127.0.0.1:11"
"""


def test_builds_a_router_with_a_backend_per_claim() -> None:
    router = build_router(tomllib.loads(EXAMPLE)["modelclaim"], admin_token="secret-token")
    assert isinstance(router, ModelClaimRouter) and isinstance(router, ModelRouter)
    assert list(router.models()) == ["attached", "started", "per-pod", "no-pergpu"]
    backends = router.backend.backends  # type: ignore[attr-defined]
    assert type(backends["attached"]) is VllmSleepBackend and isinstance(backends["started"], ProcessBackend)
    assert backends["per-pod"].url_for("per-pod", "pod-1") == "http://127.0.0.1:10"
    command = backends["started"].commands["started"]
    assert command.render(host="127.0.0.1", port=8123, model="started")[-4:] == ["--port", "8123", "--max-num-seqs", "4"]
    core = router.core
    assert core.policy.sleep_to_make_room_after_s == 20
    assert core.answers.retry_after_s("Moving") == 45
    assert core.ledger.host_ram_limit_bytes == {"node-a": 64 * GIB}
    assert core.pods["pod-1"].gpu_memory_bytes == (24 * GIB, 24 * GIB)
    core.start(0.0)
    assert (core.status("no-pergpu").phase, core.status("no-pergpu").reason) == ("Pending", "InvalidPerGPU")
    assert (command.tracing, backends["started"].otlp_traces_endpoint) == ("auto", None)


def test_started_engines_export_where_the_gate_does() -> None:
    from restorelens.telemetry import build_tracer_provider

    table = tomllib.loads(EXAMPLE)["modelclaim"]
    table["claims"][1]["engine_tracing"] = "env"
    provider = build_tracer_provider("gate", "otlp", endpoint="http://127.0.0.1:4318/v1/traces")
    try:
        backend = build_router(table, tracer_provider=provider).backend.backends["started"]  # type: ignore[attr-defined]
    finally:
        provider.shutdown()
    assert backend.otlp_traces_endpoint == "http://127.0.0.1:4318/v1/traces"
    assert backend.commands["started"].tracing == "env"


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
        (lambda t: t["policy"].update(sleepToMakeRoomAfterSeconds=90), "modelclaim.policy.sleepToMakeRoomAfterSeconds"),
        (lambda t: t["policy"].update(sleepAfter=1), "modelclaim.policy.sleepAfter"),
        (lambda t: t["retry_after"].update(moving_s=0), "modelclaim.retry_after.moving_s"),
        (lambda t: t["host_ram_limits"].update({"node-z": "1Gi"}), "modelclaim.host_ram_limits.node-z"),
        (lambda t: t["claims"].append(dict(t["claims"][0])), "modelclaim.claims"),
        (lambda t: t["retry_after"].update(moving_s=float("inf")), "modelclaim.retry_after.moving_s"),
        (lambda t: t.update(poll_interval_s=float("nan")), "modelclaim.poll_interval_s"),
        (lambda t: t["policy"].update(sleepAfterSeconds=float("nan")), "modelclaim.policy.sleepAfterSeconds"),
        (lambda t: t["claims"][0].update(weights=-1), "modelclaim.claims[0].weights"),
        (lambda t: t["claims"][0].update(weights=float("inf")), "modelclaim.claims[0].weights"),
        (lambda t: t["pods"][0].update(gpus=[-1]), "modelclaim.pods[0].gpus[0]"),
    ],
)
def test_errors_name_the_key_path(edit, setting: str) -> None:  # noqa: ANN001
    table = tomllib.loads(EXAMPLE)["modelclaim"]
    edit(table)
    with pytest.raises(SettingError) as info:
        build_core(table) if setting.startswith("modelclaim.policy") else build_router(table)
    assert info.value.setting == setting


# Values that parse but would fail only once the gate runs: each is refused at load (which
# `restorelens gate --check` runs), with the setting and what is wrong (issue #17).
RUN_TIME_FAILURES = [
    # EngineCommand.render formats every item at each start: a stray brace or unknown placeholder
    # raised there, so the claim went from restart to restart to Failed.
    (lambda t: t["claims"][1].update(command=["vllm", "serve", "{model", "--port", "{port}"]),
     "modelclaim.claims[1].command[2]", "not a valid template"),
    (lambda t: t["claims"][1].update(command=["vllm", "serve", "--port", "{prot}"]),
     "modelclaim.claims[1].command[3]", "unknown placeholder {prot}"),
    (lambda t: t["claims"][1].update(command=["vllm", "serve", "--port", "{port}}"]),
     "modelclaim.claims[1].command[3]", "Single '}'"),
    (lambda t: t["claims"][1].update(command=["vllm", "serve", "{model:d}", "--port", "{port}"]),
     "modelclaim.claims[1].command[2]", "cannot be filled in"),
    (lambda t: t["claims"][1].update(command=["vllm", "serve", "{model}"]),
     "modelclaim.claims[1].command", "has no {port}"),
    (lambda t: t["claims"][1].update(env={"BAD=NAME": "1"}), "modelclaim.claims[1].env.BAD=NAME", "not an environment"),
    (lambda t: t["claims"][0].update(env={"A": "1"}), "modelclaim.claims[0].env", "only a started engine"),
    (lambda t: t["claims"][0].update(engine_tracing="auto"), "modelclaim.claims[0].engine_tracing",
     "only a started engine"),
    (lambda t: t["claims"][1].update(engine_tracing="yes"), "modelclaim.claims[1].engine_tracing",
     "must be one of auto, env, off"),
    # An engine URL that is no URL kept the claim Loading for the whole start timeout (600 s).
    (lambda t: t["claims"][0].update(engine_url="not a url at all"), "modelclaim.claims[0].engine_url", "not an http(s) URL"),
    (lambda t: t["claims"][0].update(engine_url="http://127.0.0.1:99999"), "modelclaim.claims[0].engine_url", "1-65535"),
    (lambda t: t["claims"][0].update(engine_url="http://:8000"), "modelclaim.claims[0].engine_url", "no host"),
    (lambda t: t["claims"][2]["engine_urls"].update({"pod-1": "localhost:8000"}),
     "modelclaim.claims[2].engine_urls.pod-1", "not an http(s) URL"),
    (lambda t: t["claims"][2]["engine_urls"].update({"pod-9": "http://x"}),
     "modelclaim.claims[2].engine_urls.pod-9", "no pod of this name"),
    (lambda t: t["claims"][2].pop("pods"), "modelclaim.claims[2].engine_urls", "no URL for candidate pod 'pod-2'"),
    # Retry-After is whole seconds: 2.7 was sent as 2.
    (lambda t: t["retry_after"].update(not_ready_s=2.7), "modelclaim.retry_after.not_ready_s", "whole number of seconds"),
    # In-process engines serve no HTTP: Active, and every request a 502.
    (lambda t: t["claims"][0].update(simulated={"cold_start_s": 1}), "modelclaim.claims[0].simulated",
     "only for virtual-time experiments"),
]


@pytest.mark.parametrize(("edit", "setting", "problem"), RUN_TIME_FAILURES)
def test_values_that_would_fail_at_run_time_are_refused_at_load(edit, setting: str, problem: str) -> None:  # noqa: ANN001
    table = tomllib.loads(EXAMPLE)["modelclaim"]
    table["pods"].append({"name": "pod-2", "gpus": ["24Gi"]})  # a candidate of claims without `pods`
    edit(table)
    with pytest.raises(SettingError) as info:
        check_table(table)
    assert info.value.setting == setting
    assert problem in info.value.problem and "\n" not in str(info.value)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="{}:!rsd0 .[]portmodelhx", min_size=1, max_size=12))
def test_a_command_item_is_refused_at_load_exactly_when_it_cannot_be_rendered(item: str) -> None:
    table = tomllib.loads(EXAMPLE)["modelclaim"]
    table["claims"][1]["command"] = ["engine", "--port", "{port}", item]
    try:
        EngineCommand(("engine", item)).render(host="127.0.0.1", port=8123, model="started")
    except (ValueError, KeyError, IndexError, AttributeError, TypeError):
        with pytest.raises(SettingError, match=r"modelclaim\.claims\[1\]\.command\[3\]"):
            check_table(table)
    else:
        if all(name in (None, "host", "port", "model") for _, name, _, _ in string.Formatter().parse(item)):
            check_table(table)  # renders: accepted
