"""x86-64 CPUs: the facts the shared CPU schedule (:mod:`.cpu`) needs.

AVX-512 / AVX2 / SSE register widths from the target's mcpu/mattr. The schedule itself (one
dlight rule for every pooling PrimFunc, fused or not) is :mod:`.cpu`, shared with aarch64.
"""

from __future__ import annotations

import tvm
from tvm.target import Target

from . import cpu
from .cpu import FULL, NO_VECTOR, PARALLEL_ONLY, choose_lanes, schedule_block, schedule_function, schedule_pass_chain

__all__ = ["FAMILY", "Pool", "is_x86", "vector_bits", "FULL", "NO_VECTOR", "PARALLEL_ONLY", "choose_lanes",
           "schedule_block", "schedule_function", "schedule_pass_chain"]


def is_x86(target: Target) -> bool:
    if target.kind.name != "llvm":
        return False
    triple = str(target.attrs.get("mtriple", "") or "")
    if triple:
        return triple.startswith(("x86_64", "i686", "i386", "x86"))
    cpu_name = str(target.attrs.get("mcpu", "") or "")
    if cpu_name.startswith(("cortex", "apple", "neoverse", "carmel", "kryo", "thunderx")):
        return False
    try:
        return "x86" in str(tvm.target.codegen.llvm_get_system_triple())
    except Exception:  # pylint: disable=broad-except
        return True


def vector_bits(target: Target, dtype: str = "float32") -> int:  # pylint: disable=unused-argument
    """512 with AVX-512F, 256 with AVX2, else 128 (SSE), whatever the dtype."""
    has = tvm.target.codegen.target_has_features
    try:
        if has("avx512f", target):
            return 512
        if has("avx2", target):
            return 256
    except Exception:  # pylint: disable=broad-except
        pass
    return 128


FAMILY = cpu.register_family(cpu.CpuFamily("x86", is_x86, vector_bits))


class Pool(cpu.Pool):
    """The shared CPU rule on x86 targets."""

    family = FAMILY
