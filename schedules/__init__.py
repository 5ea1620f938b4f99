"""Per-target TensorIR schedules for tvm_pool's pooling PrimFuncs (installed as tvm_pool.schedules).

Schedules know nothing of ONNX: they find pooling blocks by the block annotations the computes
set (``tvm_pool.kind``, see tvm_pool/compute/common.py) and TOPI's ``meta_schedule.pool_*``.

Layout: one module per target family, each with one dlight-style rule:

- :mod:`.cpu`   the CPU rule, shared by every CPU family (target-neutral)
- :mod:`.x86`   x86-64 CPUs: AVX2 / AVX-512 widths from the target's mcpu/mattr -- implemented
- :mod:`.arm`   aarch64: 128-bit NEON, native fp16 with +fullfp16              -- implemented
- :mod:`.cuda`  NVIDIA GPUs (verified without a GPU, see its docstring)         -- implemented

To add a CPU: write ``<family>.py`` with its :class:`.cpu.CpuFamily` facts and a
:class:`.cpu.Pool` subclass; another kind of target: a ``ScheduleRule`` of its own. Then add it
to :data:`_FAMILIES` below (a predicate on the target plus the rule factory). :mod:`.meta_schedule`
registers the same schedules as MetaSchedule custom rules (block annotation ``schedule_rule``).
"""

from __future__ import annotations

import tvm
from tvm.s_tir import dlight

from . import arm, cpu, cuda, strided_loads, x86


def _x86_rules(target):
    return [x86.Pool()]


def _cuda_rules(target):
    return [cuda.Pool()]


# (predicate on the target, rules factory), first match wins.
_FAMILIES = [
    (x86.is_x86, _x86_rules),
    (arm.is_arm, lambda t: [arm.Pool()]),
    (cuda.is_cuda, _cuda_rules),
]


def rules_for(target: tvm.target.Target) -> list:
    """The dlight-style schedule rules for ``target`` (x86, aarch64 and CUDA)."""
    for matches, rules in _FAMILIES:
        if matches(target):
            return rules(target)
    return []


def schedule_pass(target: tvm.target.Target) -> tvm.transform.Pass:
    """A module pass that schedules every not-yet-scheduled PrimFunc that a rule matches."""
    rules = rules_for(target)
    if not rules:
        return tvm.transform.Sequential([], name="tvm_pool.no_schedule")
    return dlight.ApplyDefaultSchedule(*rules)


def tir_pipeline(target: tvm.target.Target) -> str:
    """The name of the TIR lowering pipeline for ``target``: TVM's default, plus the rewrite of
    strided vector loads (:mod:`.strided_loads`) for CPU families that have de-interleaving
    loads instead of gathers."""
    family = cpu.family_of(target)
    if family is not None and family.deinterleaving_loads:
        return strided_loads.register_pipeline()
    return "default"


def register_meta_schedule_rules() -> list[str]:
    """Register the schedules as MetaSchedule custom rules; returns the global names."""
    from . import meta_schedule  # pylint: disable=import-outside-toplevel

    return meta_schedule.register()


def tuning_record_for(target: tvm.target.Target, mod: tvm.IRModule, tuning_logs=None, shipped: bool = True):
    """Which tuning record each PrimFunc of the Relax module ``mod`` gets (``inspect`` prints
    it): "NAME: TIME ms, N-step schedule from DIR" per tuned function, None when none is."""
    from .. import tuning  # pylint: disable=import-outside-toplevel

    found = [f"{name}: {rec}" for name, rec in tuning.records_for(mod, target, tuning_logs, shipped=shipped) if rec != "none"]
    return "; ".join(found) or None
