"""Per-target TensorIR schedules for tvm_pool's pooling PrimFuncs (installed as tvm_pool.schedules).

Schedules know nothing of ONNX: they find pooling blocks by the block annotations the computes
set (``tvm_pool.kind``, see tvm_pool/compute/common.py) and TOPI's ``meta_schedule.pool_*``.
"""

from __future__ import annotations

import tvm
from tvm.s_tir import dlight


def rules_for(target: tvm.target.Target) -> list:
    """The dlight-style schedule rules for ``target`` (x86/aarch64 CPU, CUDA)."""
    return []


def schedule_pass(target: tvm.target.Target) -> tvm.transform.Pass:
    """A module pass that schedules every not-yet-scheduled PrimFunc that a rule matches."""
    rules = rules_for(target)
    if not rules:
        return tvm.transform.Sequential([], name="tvm_pool.no_schedule")
    return dlight.ApplyDefaultSchedule(*rules)
