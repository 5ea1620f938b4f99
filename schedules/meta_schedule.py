"""The same schedules as MetaSchedule custom rules (CPU under keys ``cpu`` and ``arm_cpu``, CUDA
under ``cuda`` and ``gpu``).

MetaSchedule's ``ApplyCustomRule`` reads a block's ``schedule_rule`` annotation and calls the
global function ``s_tir.meta_schedule.<target key>.<annotation>`` (target key ``cpu`` for llvm)
with ``(schedule, block)``; it must return a list of schedules (the design space). tvm_pool's
blocks are annotated ``tvm_pool.<kind>``; TOPI's ``meta_schedule.pool_max`` / ``pool_avg``.

Each registered rule schedules a window-reduction block with :func:`.cpu.schedule_block` and
returns one schedule per vector-tile choice (a small design space tuning can start from);
elementwise stages (``*_finalize``, the first passes of a separable reduction) return the
schedule unchanged: the reduction's rule (its last pass's, for a separable one) places them.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir

from . import analysis, cpu, cuda

CPU_KINDS = (
    "max", "max_index", "avg_sum", "lp_sum",
    "adaptive_max", "adaptive_max_index", "adaptive_avg_sum",
    "trt_max", "trt_avg_sum", "trt_lp_sum",
)
ELEMENTWISE_KINDS = (
    "max_pass", "avg_sum_pass", "lp_sum_pass", "trt_max_pass", "trt_avg_sum_pass", "trt_lp_sum_pass",
    "max_index_finalize", "avg_finalize", "lp_finalize",
    "adaptive_max_index_finalize", "adaptive_avg_finalize", "trt_finalize",
)
# MetaSchedule looks the rule up under each key of the target: "cpu" for x86, "arm_cpu" (then
# "cpu") for aarch64. The same functions serve both: the family comes from Target.current().
CPU_KEYS = ("cpu", "arm_cpu")
# MetaSchedule tries the target's keys in order: a cuda target has keys ("cuda", "gpu").
GPU_KEYS = ("cuda", "gpu")


def _cpu_rule(sch: s_tir.Schedule, block) -> list:
    target = tvm.target.Target.current(allow_none=True) or tvm.target.Target({"kind": "llvm"})
    name = sch.get(block).name_hint
    chain = next((c for c in analysis.pass_chains(sch) if sch.get(c.passes[-1]).name_hint == name), None)
    if chain is None and not analysis.is_reduction(sch.get(block)):
        return [sch]
    spaces = []
    for level in (cpu.FULL, cpu.NO_VECTOR):
        candidate = sch.copy()
        try:
            if chain is not None:  # the last pass of a separable reduction schedules its chain
                cpu.schedule_pass_chain(candidate, chain, target, level)  # rvs survive copy()
            else:
                cpu.schedule_block(candidate, block, target, level)
        except (Exception,):
            continue
        spaces.append(candidate)
    return spaces or [sch]


def _keep(sch: s_tir.Schedule, _block) -> list:
    return [sch]


def _cuda_rule(sch: s_tir.Schedule, block) -> list:
    """The CUDA schedule of the whole function, from its window reduction (or a separable
    reduction's last pass); a block that is neither leaves the schedule as it is."""
    target = tvm.target.Target.current(allow_none=True)
    if target is None or not cuda.is_cuda(target):
        target = cuda.default_target()
    name = sch.get(block).name_hint
    chain = next((c for c in analysis.pass_chains(sch) if sch.get(c.passes[-1]).name_hint == name), None)
    if chain is None and not analysis.is_reduction(sch.get(block)):
        return [sch]
    spaces = []
    for staged in (True, False):
        candidate = sch.copy()
        try:
            cuda.schedule_function(candidate, target, staged=staged, warp=staged)
        except (Exception,):  # pylint: disable=broad-except
            continue
        spaces.append(candidate)
    return spaces or [sch]


_registered: list[str] = []


def register() -> list[str]:
    """Register the CPU and CUDA custom rules (idempotent); returns the registered global names."""
    if _registered:
        return list(_registered)
    names = []
    keys = [(key, _cpu_rule) for key in CPU_KEYS] + [(key, _cuda_rule) for key in GPU_KEYS]
    for prefix, rule in [(f"s_tir.meta_schedule.{key}.", fn) for key, fn in keys]:
        reductions = [f"{prefix}tvm_pool.{k}" for k in CPU_KINDS]
        reductions += [prefix + r for r in analysis.TOPI_POOL_RULES]
        for name in reductions:
            tvm_ffi.register_global_func(name, rule, override=True)
        elementwise = [f"{prefix}tvm_pool.{k}" for k in ELEMENTWISE_KINDS]
        for name in elementwise:
            tvm_ffi.register_global_func(name, _keep, override=True)
        names += reductions + elementwise
    _registered.extend(names)
    return list(names)
