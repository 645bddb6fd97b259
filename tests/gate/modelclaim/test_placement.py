"""Quantities, held-back reasons and best-fit GPU placement."""

from __future__ import annotations

import pytest

from restorelens.gate.modelclaim.placement import (
    ClaimSpec,
    GpuSlot,
    MemoryLedger,
    Pod,
    held_back_reason,
    parse_quantity,
)

GIB = 2**30


def test_parse_quantity() -> None:
    assert parse_quantity("16Gi") == 16 * GIB
    assert parse_quantity("1.5G") == 1_500_000_000
    assert parse_quantity(1024) == 1024
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity("16 gigs")


def test_held_back_reasons() -> None:
    pods = [Pod("p1", (24 * GIB, 24 * GIB))]
    assert held_back_reason(ClaimSpec("m", 10 * GIB, 4 * GIB), pods) is None
    assert held_back_reason(ClaimSpec("m", 10 * GIB, 4 * GIB, tensor_parallel=2), pods) is None
    assert held_back_reason(ClaimSpec("m", 10 * GIB, 4 * GIB, tensor_parallel=3), pods) == "TooLargeForAnyCard"
    assert held_back_reason(ClaimSpec("m", 22 * GIB, 4 * GIB), pods) == "TooLargeForAnyCard"
    assert held_back_reason(ClaimSpec("m", 10 * GIB, 4 * GIB, pods=("elsewhere",)), pods) == "TooLargeForAnyCard"
    assert held_back_reason(ClaimSpec("m", None, 4 * GIB), pods) == "InvalidPerGPU"
    assert held_back_reason(ClaimSpec("m", 10 * GIB, 0), pods) == "InvalidPerGPU"
    assert held_back_reason(ClaimSpec("m", 10 * GIB, 4 * GIB, engine_args={"served-model-name": "x"}), pods) == (
        "InvalidEngineConfig"
    )
    assert held_back_reason(ClaimSpec("m", 10 * GIB, 4 * GIB, engine_args={"Bad Flag": ""}), pods) == (
        "InvalidEngineConfig"
    )


def test_best_fit_keeps_the_emptiest_gpu_free() -> None:
    pod = Pod("p1", (24 * GIB, 24 * GIB))
    ledger = MemoryLedger([pod])
    ledger.charge("x", [GpuSlot("p1", 1)], 8 * GIB)
    assert ledger.find_gpus(ClaimSpec("m", 10 * GIB, 4 * GIB), pod) == (GpuSlot("p1", 1),)
    assert ledger.find_gpus(ClaimSpec("m", 14 * GIB, 4 * GIB), pod) == (GpuSlot("p1", 0),)
    assert ledger.find_gpus(ClaimSpec("m", 13 * GIB, 4 * GIB, tensor_parallel=2), pod) is None
    assert ledger.free_bytes(GpuSlot("p1", 1)) == 16 * GIB
