"""Build the lifecycle from the ``[modelclaim]`` table of the gate's TOML file.

Example::

    [modelclaim]
    retry_after = { not_ready_s = 10, waiting_for_room_s = 20, moving_s = 30 }
    policy = { sleepAfterSeconds = 60, noWakeReserveWhileAsleep = true }
    host_ram_limits = { node-a = "64Gi" }        # optional; refuse level-1 sleep past it

    [[modelclaim.pods]]
    name = "pod-1"
    node = "node-a"                               # default: the pod's name
    gpus = ["24Gi"]                               # memory per GPU

    [[modelclaim.claims]]
    model = "qwen-small"
    perGPU = { maximumFootprint = "10Gi", kvFloor = "4Gi" }
    weights = "8Gi"                               # host RAM a level-1 sleep takes
    engine_url = "http://127.0.0.1:8001"          # attach to a running engine (vLLM sleep API)
    # or: command = ["python", "-m", "restorelens", "sim", "--port", "{port}"]   (process backend)
    # or: simulated = { cold_start_s = 30, wake_s = 4 }                           (in-process engine)

Syntax errors (unknown keys, wrong types, unparsable quantities) raise ``SettingError`` naming the
key path (``modelclaim.claims[0].perGPU.kvFloor``). A declaration that parses but cannot run (no or
non-positive ``perGPU``, a reserved engine flag, too large for every GPU) is kept: the claim stays
Pending with AIBrix's reason and the gate answers 503 without Retry-After, as AIBrix does.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from restorelens.clock import Clock
from restorelens.errors import SettingError
from restorelens.gate.modelclaim.backends import BackendByModel, EngineBackend, FixedLatencyEngine, InProcessBackend
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.phases import AnswerTable
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod, parse_quantity
from restorelens.gate.modelclaim.policy import parse_pool_policy
from restorelens.gate.modelclaim.process_backend import EngineCommand, ProcessBackend
from restorelens.gate.modelclaim.router import ModelClaimRouter
from restorelens.gate.modelclaim.vllm_backend import VllmSleepBackend
from restorelens.settings import require_keys

__all__ = ["build_core", "build_router", "check_table"]

ROOT = "modelclaim"
TOP_KEYS = {"pods", "claims", "policy", "retry_after", "host_ram_limits", "poll_interval_s", "health_interval_s",
            "start_timeout_s"}
POD_KEYS = {"name", "node", "gpus"}
CLAIM_KEYS = {"model", "perGPU", "weights", "sleeping_footprint", "tensor_parallel", "pods", "engine_args",
              "engine_url", "engine_urls", "command", "env", "simulated"}
PER_GPU_KEYS = {"maximumFootprint", "kvFloor"}
SIMULATED_KEYS = {"cold_start_s", "wake_s", "sleep_s"}
RETRY_KEYS = {"not_ready_s", "waiting_for_room_s", "moving_s"}


def _table(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SettingError(where, "must be a table")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise SettingError(where, "must be an array")
    return value


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise SettingError(where, f"must be a non-empty string, got {value!r}")
    return value


def _number(value: Any, where: str, *, minimum: float = 0.0) -> float:
    # TOML has nan and inf: nan passes every comparison, inf overflows int() in retry_after.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < minimum:
        raise SettingError(where, f"must be a finite number >= {minimum:g}, got {value!r}")
    return float(value)


def _bytes(value: Any, where: str) -> int:
    try:
        return parse_quantity(value)
    except (TypeError, ValueError) as exc:
        raise SettingError(where, str(exc)) from None


def _str_map(value: Any, where: str) -> dict[str, str]:
    table = _table(value, where)
    for key, item in table.items():
        if not isinstance(item, str):
            raise SettingError(f"{where}.{key}", f"must be a string, got {item!r}")
    return dict(table)


def _pod(raw: Any, where: str) -> Pod:
    table = _table(raw, where)
    require_keys(table, POD_KEYS, where)
    gpus = _list(table.get("gpus"), f"{where}.gpus")
    if not gpus:
        raise SettingError(f"{where}.gpus", "declare at least one GPU (its memory, e.g. \"24Gi\")")
    memory = tuple(_bytes(g, f"{where}.gpus[{i}]") for i, g in enumerate(gpus))
    node = table.get("node", "")
    return Pod(_str(table.get("name"), f"{where}.name"), memory, _str(node, f"{where}.node") if node else "")


def _claim(raw: Any, where: str, pod_names: set[str]) -> ClaimSpec:
    table = _table(raw, where)
    require_keys(table, CLAIM_KEYS, where)
    per_gpu = _table(table.get("perGPU", {}), f"{where}.perGPU")
    require_keys(per_gpu, PER_GPU_KEYS, f"{where}.perGPU")
    footprint = per_gpu.get("maximumFootprint")
    kv_floor = per_gpu.get("kvFloor")
    pods = None
    if "pods" in table:
        pods = tuple(_str(p, f"{where}.pods[{i}]") for i, p in enumerate(_list(table["pods"], f"{where}.pods")))
        for i, name in enumerate(pods):
            if name not in pod_names:
                raise SettingError(f"{where}.pods[{i}]", f"no pod named {name!r} is declared")
    tensor_parallel = table.get("tensor_parallel", 1)
    if isinstance(tensor_parallel, bool) or not isinstance(tensor_parallel, int):
        raise SettingError(f"{where}.tensor_parallel", f"must be an integer, got {tensor_parallel!r}")
    return ClaimSpec(
        model=_str(table.get("model"), f"{where}.model"),
        max_footprint_bytes=None if footprint is None else _bytes(footprint, f"{where}.perGPU.maximumFootprint"),
        kv_floor_bytes=None if kv_floor is None else _bytes(kv_floor, f"{where}.perGPU.kvFloor"),
        weight_bytes=_bytes(table.get("weights", 0), f"{where}.weights"),
        sleeping_footprint_bytes=_bytes(table.get("sleeping_footprint", 0), f"{where}.sleeping_footprint"),
        tensor_parallel=tensor_parallel,
        pods=pods,
        engine_args=_str_map(table.get("engine_args", {}), f"{where}.engine_args"),
    )


def _backend(raw: Mapping[str, Any], spec: ClaimSpec, where: str, options: dict[str, Any]) -> EngineBackend:
    kinds = [k for k in ("engine_url", "engine_urls", "command", "simulated") if k in raw]
    if len(kinds) != 1:
        raise SettingError(where, "give exactly one of engine_url, engine_urls, command, simulated")
    kind = kinds[0]
    if kind == "engine_url":
        return VllmSleepBackend({spec.model: _str(raw[kind], f"{where}.engine_url")}, **options)
    if kind == "engine_urls":
        urls = _str_map(raw[kind], f"{where}.engine_urls")
        return VllmSleepBackend({(spec.model, pod): url for pod, url in urls.items()}, **options)
    if kind == "command":
        argv = tuple(_str(a, f"{where}.command[{i}]") for i, a in enumerate(_list(raw[kind], f"{where}.command")))
        if not argv:
            raise SettingError(f"{where}.command", "must name a program")
        env = _str_map(raw.get("env", {}), f"{where}.env")
        return ProcessBackend({spec.model: EngineCommand(argv, env, spec.engine_args)}, **options)
    sim = _table(raw[kind], f"{where}.simulated")
    require_keys(sim, SIMULATED_KEYS, f"{where}.simulated")
    latencies = {k: _number(v, f"{where}.simulated.{k}") for k, v in sim.items()}
    return InProcessBackend(lambda model, pod: FixedLatencyEngine(**latencies))


def build_core(table: Mapping[str, Any]) -> tuple[ModelClaimCore, dict[str, Mapping[str, Any]]]:
    """The core from ``[modelclaim]``, and each claim's raw table (for its backend)."""
    table = _table(table, ROOT)
    require_keys(table, TOP_KEYS, ROOT)
    pods = [_pod(p, f"{ROOT}.pods[{i}]") for i, p in enumerate(_list(table.get("pods"), f"{ROOT}.pods"))]
    if not pods:
        raise SettingError(f"{ROOT}.pods", "declare at least one pod")
    names = [p.name for p in pods]
    if len(set(names)) != len(names):
        raise SettingError(f"{ROOT}.pods", "pod names must be unique")
    raw_claims = _list(table.get("claims"), f"{ROOT}.claims")
    claims = [_claim(c, f"{ROOT}.claims[{i}]", set(names)) for i, c in enumerate(raw_claims)]
    if len({c.model for c in claims}) != len(claims):
        raise SettingError(f"{ROOT}.claims", "model names must be unique")
    policy = parse_pool_policy(_table(table.get("policy", {}), f"{ROOT}.policy"), f"{ROOT}.policy")
    retry = _table(table.get("retry_after", {}), f"{ROOT}.retry_after")
    require_keys(retry, RETRY_KEYS, f"{ROOT}.retry_after")
    answers = AnswerTable(**{k: int(_number(v, f"{ROOT}.retry_after.{k}", minimum=1)) for k, v in retry.items()})
    nodes = {p.node_name for p in pods}
    limits = {}
    for node, value in _table(table.get("host_ram_limits", {}), f"{ROOT}.host_ram_limits").items():
        if node not in nodes:
            raise SettingError(f"{ROOT}.host_ram_limits.{node}", "no pod is on this node")
        limits[node] = _bytes(value, f"{ROOT}.host_ram_limits.{node}")
    core = ModelClaimCore(pods, claims, policy, host_ram_limit_bytes=limits, answers=answers)
    return core, {c.model: raw for c, raw in zip(claims, raw_claims, strict=True)}


def build_router(
    table: Mapping[str, Any],
    *,
    tracer_provider: TracerProvider | None = None,
    clock: Clock | None = None,
    admin_token: str | None = None,
) -> ModelClaimRouter:
    """A live ``ModelClaimRouter`` from the ``[modelclaim]`` table; call ``start()`` in the app lifespan."""
    core, backends, health_interval_s = _parse(table, clock)
    return ModelClaimRouter(
        core, BackendByModel(backends), clock=clock, tracer_provider=tracer_provider, admin_token=admin_token,
        health_interval_s=health_interval_s,
    )


def check_table(table: Mapping[str, Any]) -> None:
    """Validate ``[modelclaim]`` as ``build_router`` would (``SettingError`` naming the key path).

    Nothing is started: backends only keep their settings until the router's ``start()``.
    """
    _parse(table, None)


def _parse(table: Mapping[str, Any], clock: Clock | None) -> tuple[ModelClaimCore, dict[str, EngineBackend], float]:
    core, raw_claims = build_core(table)
    options: dict[str, Any] = {"clock": clock}
    for key in ("poll_interval_s", "start_timeout_s"):
        if key in table:
            options[key] = _number(table[key], f"{ROOT}.{key}", minimum=0.001)
    health_interval_s = _number(table.get("health_interval_s", 2.0), f"{ROOT}.health_interval_s", minimum=0.01)
    backends = {}
    for i, (model, raw) in enumerate(raw_claims.items()):
        backends[model] = _backend(raw, core.claims_view()[model].spec, f"{ROOT}.claims[{i}]", options)
    return core, backends, health_interval_s
