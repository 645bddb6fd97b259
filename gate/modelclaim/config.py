"""Build the lifecycle from the ``[modelclaim]`` table of the gate's TOML file.

Example::

    [modelclaim]
    retry_after = { not_ready_s = 10, waiting_for_room_s = 20, moving_s = 30 }
    retry_after_mode = "calibrated"               # default "fixed": the table above, as AIBrix
    calibration_path = "wakes.json"               # what calibrated hints learnt, kept across restarts
    hold_s = 30                                   # optional: hold a request up to 30 s while its model wakes
    max_hint_s = 120                              # the longest hint sent (the OpenAI SDK's limit)
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
    readiness = "auto"                            # what says it serves (restorelens/readiness.py)
    expected = { start_s = 45, wake_s = 4 }       # optional: what its engine takes; the first wake's hint
    # or: command = ["python", "-m", "restorelens", "sim", "--port", "{port}"]   (process backend)
    #     engine_tracing = "auto"                 # give a started engine the wake's trace: auto | env | off

Errors raise ``SettingError`` naming the key path (``modelclaim.claims[0].perGPU.kvFloor``): unknown
keys, wrong types, unparsable quantities, and every value that would only fail once the gate runs
(a URL that is not one, a command template that cannot be filled in, a Retry-After that is not
whole seconds, an engine URL missing for a candidate pod). A declaration that parses but cannot run
by AIBrix's rules (no or non-positive ``perGPU``, a reserved engine flag, too large for every GPU)
is kept: the claim stays Pending with AIBrix's reason and the gate answers 503 without Retry-After,
as AIBrix does. ``simulated`` (an in-process engine) is refused: its engines serve no HTTP, so a
live gate would route every request to nothing; in-process engines are for virtual-time runs
(``VirtualLifecycle`` with an ``InProcessBackend``, docs/modelclaim.md).
"""

from __future__ import annotations

import math
import string
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from restorelens.clock import Clock
from restorelens.errors import SettingError
from restorelens.gate.modelclaim.backends import BackendByModel, EngineBackend
from restorelens.gate.modelclaim.calibration_file import read_calibration_text
from restorelens.gate.modelclaim.core import ModelClaimCore
from restorelens.gate.modelclaim.engine_tracing import AUTO, ENGINE_TRACING_MODES
from restorelens.gate.modelclaim.estimates import DeclaredDurations, parse_expected
from restorelens.gate.modelclaim.hints import FIXED, HINT_MODES, MAX_HINT_S, RetryHints
from restorelens.gate.modelclaim.phases import AnswerTable
from restorelens.gate.modelclaim.placement import ClaimSpec, Pod, parse_quantity
from restorelens.gate.modelclaim.policy import parse_pool_policy
from restorelens.gate.modelclaim.process_backend import EngineCommand, ProcessBackend
from restorelens.gate.modelclaim.router import ModelClaimRouter
from restorelens.gate.modelclaim.vllm_backend import VllmSleepBackend
from restorelens.readiness import parse_readiness
from restorelens.settings import http_url_problem, require_keys

__all__ = ["build_core", "build_router", "check_table", "load_calibration"]

ROOT = "modelclaim"
TOP_KEYS = {"pods", "claims", "policy", "retry_after", "host_ram_limits", "poll_interval_s", "health_interval_s",
            "start_timeout_s", "retry_after_mode", "hold_s", "calibration_path", "max_hint_s"}
POD_KEYS = {"name", "node", "gpus"}
#: ``simulated`` is known so that it is refused with its reason, not as a typo (``_backend``).
CLAIM_KEYS = {"model", "perGPU", "weights", "sleeping_footprint", "tensor_parallel", "pods", "engine_args",
              "engine_url", "engine_urls", "command", "env", "simulated", "readiness",
              "engine_tracing", "expected"}
PER_GPU_KEYS = {"maximumFootprint", "kvFloor"}
RETRY_KEYS = {"not_ready_s", "waiting_for_room_s", "moving_s"}
#: What ``EngineCommand.render`` fills into a ``command`` item.
COMMAND_PLACEHOLDERS = ("host", "port", "model")


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


def _bytes(value: Any, where: str, *, signed: bool = False) -> int:
    """A quantity; negative only when ``signed`` (``perGPU``, whose non-positive figures AIBrix keeps
    as ``InvalidPerGPU``): a negative size would make the memory ledger's sums meaningless."""
    try:
        size = parse_quantity(value)
    except (TypeError, ValueError) as exc:
        raise SettingError(where, str(exc)) from None
    except OverflowError:  # TOML's inf
        raise SettingError(where, f"not a quantity: {value!r}") from None
    if size < 0 and not signed:
        raise SettingError(where, f"must not be negative, got {value!r}")
    return size


def _whole_seconds(value: Any, where: str) -> int:
    # Retry-After is whole seconds (RFC 9110 delay-seconds): 2.7 would have been sent as 2.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingError(where, f"must be a whole number of seconds >= 1 (Retry-After has no fractions), got {value!r}")
    return value


def _command_item(item: Any, where: str, model: str) -> str:
    """One ``command`` item, checked the way ``EngineCommand.render`` will format it at every start."""
    text = _str(item, where)
    if "\0" in text:
        raise SettingError(where, "holds a NUL character, which no program argument can")
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(text) if name is not None]
    except ValueError as exc:  # "Single '}' encountered in format string", "expected '}' before end of string"
        raise SettingError(where, f"{text!r} is not a valid template ({exc}); write {{{{ and }}}} for literal braces") from None
    for name in fields:
        if name not in COMMAND_PLACEHOLDERS:
            known = ", ".join(f"{{{p}}}" for p in COMMAND_PLACEHOLDERS)
            shown = f"{{{name}}}" if name else "{}"
            raise SettingError(where, f"unknown placeholder {shown} in {text!r}; use {known} (or {{{{ }}}} for braces)")
    try:  # a conversion or format spec the values cannot take (e.g. {model:d})
        text.format(host="127.0.0.1", port=8000, model=model)
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as exc:
        raise SettingError(where, f"{text!r} cannot be filled in: {exc}") from None
    return text


def _env(value: Any, where: str) -> dict[str, str]:
    env = _str_map(value, where)
    for key, item in env.items():
        # What the process start would refuse (ValueError from exec), at every attempt.
        if not key or "=" in key or "\0" in key:
            raise SettingError(f"{where}.{key}", "is not an environment variable name")
        if "\0" in item:
            raise SettingError(f"{where}.{key}", "holds a NUL character, which no environment value can")
    return env


def _url(value: Any, where: str) -> str:
    url = _str(value, where)
    problem = http_url_problem(url)
    if problem is not None:
        raise SettingError(where, problem)
    return url


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
        max_footprint_bytes=None if footprint is None else _bytes(footprint, f"{where}.perGPU.maximumFootprint", signed=True),
        kv_floor_bytes=None if kv_floor is None else _bytes(kv_floor, f"{where}.perGPU.kvFloor", signed=True),
        weight_bytes=_bytes(table.get("weights", 0), f"{where}.weights"),
        sleeping_footprint_bytes=_bytes(table.get("sleeping_footprint", 0), f"{where}.sleeping_footprint"),
        tensor_parallel=tensor_parallel,
        pods=pods,
        engine_args=_str_map(table.get("engine_args", {}), f"{where}.engine_args"),
    )


def _backend(
    raw: Mapping[str, Any], spec: ClaimSpec, pods: Sequence[str], where: str, options: dict[str, Any],
    otlp_traces_endpoint: str | None = None,
) -> EngineBackend:
    """The claim's backend; ``pods`` are the pod names declared."""
    if "simulated" in raw:
        # An in-process engine answers the lifecycle but serves no HTTP: the claim would go Active
        # and every request would get a 502. The virtual-time runners build their own backends.
        raise SettingError(f"{where}.simulated", "in-process engines are only for virtual-time experiments "
                                                 "(VirtualLifecycle); in a live gate use engine_url, or command = "
                                                 "[\"python\", \"-m\", \"restorelens\", \"sim\", \"--port\", \"{port}\"]")
    kinds = [k for k in ("engine_url", "engine_urls", "command") if k in raw]
    if len(kinds) != 1:
        raise SettingError(where, "give exactly one of engine_url, engine_urls, command")
    kind = kinds[0]
    for key in ("env", "engine_tracing"):
        if key in raw and kind != "command":
            raise SettingError(f"{where}.{key}", "only a started engine (command) takes this")
    if "readiness" in raw:
        options = {**options, "readiness": parse_readiness(raw["readiness"], f"{where}.readiness")}
    if kind == "engine_url":
        return VllmSleepBackend({spec.model: _url(raw[kind], f"{where}.engine_url")}, **options)
    if kind == "engine_urls":
        table = _table(raw[kind], f"{where}.engine_urls")
        urls = {pod: _url(url, f"{where}.engine_urls.{pod}") for pod, url in table.items()}
        for pod in urls:
            if pod not in pods:
                raise SettingError(f"{where}.engine_urls.{pod}", "no pod of this name is declared")
        # Placement may pick any candidate pod: one without a URL would fail every start there.
        for pod in spec.pods if spec.pods is not None else pods:
            if pod not in urls:
                raise SettingError(f"{where}.engine_urls", f"no URL for candidate pod {pod!r}; add it, or list the "
                                                           "claim's pods")
        return VllmSleepBackend({(spec.model, pod): url for pod, url in urls.items()}, **options)
    items = _list(raw[kind], f"{where}.command")
    if not items:
        raise SettingError(f"{where}.command", "must name a program")
    argv = tuple(_command_item(a, f"{where}.command[{i}]", spec.model) for i, a in enumerate(items))
    if not any(name == "port" for a in argv for _, name, _, _ in string.Formatter().parse(a)):
        # The lifecycle picks the port and polls /health there; an engine told no port is never found.
        raise SettingError(f"{where}.command", "has no {port}: the engine must listen on the port the lifecycle "
                                               "picks (e.g. \"--port\", \"{port}\")")
    env = _env(raw.get("env", {}), f"{where}.env")
    tracing = raw.get("engine_tracing", AUTO)
    if tracing not in ENGINE_TRACING_MODES:
        raise SettingError(f"{where}.engine_tracing", f"must be one of {', '.join(ENGINE_TRACING_MODES)}, "
                                                      f"got {tracing!r}")
    options = {**options, "otlp_traces_endpoint": otlp_traces_endpoint}
    return ProcessBackend({spec.model: EngineCommand(argv, env, spec.engine_args, tracing)}, **options)


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
    answers = AnswerTable(**{k: _whole_seconds(v, f"{ROOT}.retry_after.{k}") for k, v in retry.items()})
    mode = table.get("retry_after_mode", FIXED)
    if mode not in HINT_MODES:
        raise SettingError(f"{ROOT}.retry_after_mode", f"must be one of {', '.join(HINT_MODES)}, got {mode!r}")
    hold_s = None if "hold_s" not in table else _number(table["hold_s"], f"{ROOT}.hold_s", minimum=0.001)
    # What each claim declares its engine takes (start, wake, sleep): the first wake's estimate.
    declared = {c.model: parse_expected(raw["expected"], f"{ROOT}.claims[{i}].expected")
                for i, (c, raw) in enumerate(zip(claims, raw_claims, strict=True)) if "expected" in raw}
    max_hint_s = _whole_seconds(table.get("max_hint_s", MAX_HINT_S), f"{ROOT}.max_hint_s")
    hints = RetryHints(answers, mode, hold_s, priors=(DeclaredDurations(declared),), max_hint_s=max_hint_s)
    nodes = {p.node_name for p in pods}
    limits = {}
    for node, value in _table(table.get("host_ram_limits", {}), f"{ROOT}.host_ram_limits").items():
        if node not in nodes:
            raise SettingError(f"{ROOT}.host_ram_limits.{node}", "no pod is on this node")
        limits[node] = _bytes(value, f"{ROOT}.host_ram_limits.{node}")
    core = ModelClaimCore(pods, claims, policy, host_ram_limit_bytes=limits, hints=hints)
    return core, {c.model: raw for c, raw in zip(claims, raw_claims, strict=True)}


def build_router(
    table: Mapping[str, Any],
    *,
    tracer_provider: TracerProvider | None = None,
    clock: Clock | None = None,
    admin_token: str | None = None,
) -> ModelClaimRouter:
    """A live ``ModelClaimRouter`` from the ``[modelclaim]`` table; call ``start()`` in the app lifespan."""
    core, backends, health_interval_s = _parse(table, clock, traces_endpoint(tracer_provider))
    return ModelClaimRouter(
        core, BackendByModel(backends), clock=clock, tracer_provider=tracer_provider, admin_token=admin_token,
        health_interval_s=health_interval_s, calibration_path=_calibration_path(table),
    )


def check_table(table: Mapping[str, Any]) -> None:
    """Validate ``[modelclaim]`` as ``build_router`` would (``SettingError`` naming the key path).

    Nothing is started: backends only keep their settings until the router's ``start()``.
    """
    _parse(table, None)


def _calibration_path(table: Mapping[str, Any]) -> Path | None:
    if "calibration_path" not in table:
        return None
    return Path(_str(table["calibration_path"], f"{ROOT}.calibration_path"))


def load_calibration(core: ModelClaimCore, path: Path) -> None:
    """Take in what an earlier run learnt (``calibration_path``); a missing or empty file is a first run."""
    if not path.parent.is_dir():
        raise SettingError(f"{ROOT}.calibration_path {path}", f"its directory {path.parent} does not exist")
    text = read_calibration_text(path)
    if text is not None:
        core.calibration.load_json(text, str(path))


def traces_endpoint(tracer_provider: TracerProvider | None) -> str | None:
    """The OTLP/HTTP traces URL the provider exports to (None for a file, memory or no exporter)."""
    exporter = getattr(tracer_provider, "restorelens_exporter", None)
    while exporter is not None and not isinstance(getattr(exporter, "endpoint", None), str):
        exporter = getattr(exporter, "inner", None)  # a counting or shared wrapper
    return exporter.endpoint if exporter is not None else None


def _parse(
    table: Mapping[str, Any], clock: Clock | None, otlp_traces_endpoint: str | None = None,
) -> tuple[ModelClaimCore, dict[str, EngineBackend], float]:
    core, raw_claims = build_core(table)
    path = _calibration_path(table)
    if path is not None:
        load_calibration(core, path)
    options: dict[str, Any] = {"clock": clock}
    for key in ("poll_interval_s", "start_timeout_s"):
        if key in table:
            options[key] = _number(table[key], f"{ROOT}.{key}", minimum=0.001)
    health_interval_s = _number(table.get("health_interval_s", 2.0), f"{ROOT}.health_interval_s", minimum=0.01)
    backends = {}
    for i, (model, raw) in enumerate(raw_claims.items()):
        backends[model] = _backend(raw, core.claims_view()[model].spec, list(core.pods), f"{ROOT}.claims[{i}]", options,
                                   otlp_traces_endpoint)
    return core, backends, health_interval_s
