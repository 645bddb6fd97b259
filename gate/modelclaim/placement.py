"""Pods, GPUs, claims, and the memory the lifecycle accounts on them.

Placement trusts the declared ``perGPU`` figures, as AIBrix does: an instance occupies
``tensor_parallel`` GPUs of one pod and holds ``maximumFootprint + kvFloor`` on each while awake.
Asleep it holds the same (the *wake reserve*) unless the pool sets ``noWakeReserveWhileAsleep``;
then it is charged only ``sleeping_footprint_bytes`` (what the sleeping engine still keeps).

Host RAM is what AIBrix does not manage: level-1 sleep copies the weights (``weight_bytes``) into
the node's RAM. ``MemoryLedger`` accounts it per node and can refuse a level-1 sleep that would pass
the node's ``host_ram_limit_bytes``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from restorelens.gate.modelclaim.phases import (
    REASON_INVALID_ENGINE_CONFIG,
    REASON_INVALID_PER_GPU,
    REASON_TOO_LARGE_FOR_ANY_CARD,
)

__all__ = [
    "RESERVED_ENGINE_ARGS",
    "ClaimSpec",
    "GpuSlot",
    "MemoryLedger",
    "Pod",
    "held_back_reason",
    "parse_quantity",
]

#: Flags the lifecycle itself sets on an engine it starts; a claim may not override them.
RESERVED_ENGINE_ARGS = frozenset({"host", "port", "model", "served-model-name", "enable-sleep-mode"})

_QUANTITY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTPE]i?|[kmgtpe])?\s*$")
_SUFFIX = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_SUFFIX.update({f"{p}i": 1024 ** (i + 1) for i, p in enumerate("KMGTPE")})


def parse_quantity(value: int | float | str) -> int:
    """Bytes from a Kubernetes-style quantity (``"16Gi"``, ``"512M"``, ``1073741824``)."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return int(value)
    match = _QUANTITY.match(value)
    if match is None:
        raise ValueError(f"not a quantity: {value!r} (use bytes or a suffix such as Gi, Mi, G)")
    number, suffix = match.groups()
    return int(float(number) * _SUFFIX[suffix or ""])


@dataclass(frozen=True, slots=True)
class Pod:
    """A long-lived pod on ``node`` with GPUs of the given memory sizes (bytes)."""

    name: str
    gpu_memory_bytes: tuple[int, ...]
    node: str = ""

    @property
    def node_name(self) -> str:
        return self.node or self.name


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """One declared model. ``pods``: candidate pods in preference order (None: every pod)."""

    model: str
    max_footprint_bytes: int | None
    kv_floor_bytes: int | None
    weight_bytes: int = 0
    sleeping_footprint_bytes: int = 0
    tensor_parallel: int = 1
    pods: tuple[str, ...] | None = None
    engine_args: Mapping[str, str] = field(default_factory=dict)

    @property
    def per_gpu_bytes(self) -> int:
        return (self.max_footprint_bytes or 0) + (self.kv_floor_bytes or 0)


@dataclass(frozen=True, slots=True)
class GpuSlot:
    pod: str
    index: int


def held_back_reason(spec: ClaimSpec, pods: Sequence[Pod]) -> str | None:
    """The configuration reason that keeps a claim from ever running, or None when it can run."""
    bad_args = sorted(k for k in spec.engine_args if k in RESERVED_ENGINE_ARGS or not re.fullmatch(r"[a-z0-9-]+", k))
    if bad_args or spec.tensor_parallel < 1:
        return REASON_INVALID_ENGINE_CONFIG
    if spec.max_footprint_bytes is None or spec.max_footprint_bytes <= 0:
        return REASON_INVALID_PER_GPU
    if spec.kv_floor_bytes is None or spec.kv_floor_bytes <= 0:
        return REASON_INVALID_PER_GPU
    candidates = [p for p in pods if spec.pods is None or p.name in spec.pods]
    for pod in candidates:
        if sum(1 for size in pod.gpu_memory_bytes if size >= spec.per_gpu_bytes) >= spec.tensor_parallel:
            return None
    return REASON_TOO_LARGE_FOR_ANY_CARD


class MemoryLedger:
    """GPU bytes charged per (pod, gpu) and host-RAM bytes per node, by model."""

    def __init__(self, pods: Iterable[Pod], host_ram_limit_bytes: Mapping[str, int] | None = None) -> None:
        self.pods = {pod.name: pod for pod in pods}
        self.host_ram_limit_bytes = dict(host_ram_limit_bytes or {})
        self._gpu: dict[GpuSlot, dict[str, int]] = {
            GpuSlot(pod.name, i): {} for pod in self.pods.values() for i in range(len(pod.gpu_memory_bytes))
        }
        self._host: dict[str, dict[str, int]] = {pod.node_name: {} for pod in self.pods.values()}

    def capacity_bytes(self, slot: GpuSlot) -> int:
        return self.pods[slot.pod].gpu_memory_bytes[slot.index]

    def charged_bytes(self, slot: GpuSlot, *, excluding: str | None = None) -> int:
        return sum(b for model, b in self._gpu[slot].items() if model != excluding)

    def charges(self, slot: GpuSlot) -> Mapping[str, int]:
        return dict(self._gpu[slot])

    def free_bytes(self, slot: GpuSlot, *, excluding: str | None = None) -> int:
        return self.capacity_bytes(slot) - self.charged_bytes(slot, excluding=excluding)

    def charge(self, model: str, slots: Iterable[GpuSlot], per_gpu_bytes: int) -> None:
        for slot in slots:
            self._gpu[slot][model] = per_gpu_bytes

    def release(self, model: str, slots: Iterable[GpuSlot]) -> None:
        for slot in slots:
            self._gpu[slot].pop(model, None)

    def find_gpus(self, spec: ClaimSpec, pod: Pod, *, excluding: str | None = None) -> tuple[GpuSlot, ...] | None:
        """``tensor_parallel`` GPUs of ``pod`` with room for the claim now, fullest-fitting first."""
        fitting = [
            GpuSlot(pod.name, i)
            for i in range(len(pod.gpu_memory_bytes))
            if self.free_bytes(GpuSlot(pod.name, i), excluding=excluding) >= spec.per_gpu_bytes
        ]
        if len(fitting) < spec.tensor_parallel:
            return None
        # Best fit keeps the emptiest GPUs free for larger claims.
        fitting.sort(key=lambda s: (self.free_bytes(s, excluding=excluding), s.index))
        return tuple(sorted(fitting[: spec.tensor_parallel], key=lambda s: s.index))

    # --- host RAM -----------------------------------------------------------------------------

    def host_bytes(self, node: str) -> int:
        return sum(self._host[node].values())

    def host_room(self, node: str, extra_bytes: int) -> bool:
        limit = self.host_ram_limit_bytes.get(node)
        return limit is None or self.host_bytes(node) + extra_bytes <= limit

    def hold_host(self, model: str, node: str, nbytes: int) -> None:
        self._host[node][model] = nbytes

    def free_host(self, model: str, node: str) -> None:
        self._host[node].pop(model, None)

    def gpu_slots(self) -> list[GpuSlot]:
        return list(self._gpu)

    def nodes(self) -> list[str]:
        return list(self._host)
