"""The same schedules as MetaSchedule custom rules (CPU under keys ``cpu`` and ``arm_cpu``, CUDA
under ``cuda`` and ``gpu``).

MetaSchedule's ``ApplyCustomRule`` reads a block's ``schedule_rule`` annotation and calls the
global function ``s_tir.meta_schedule.<target key>.<annotation>`` (target key ``cpu`` for llvm)
with ``(schedule, block)``; it must return a list of schedules (the design space). tvm_pool's
blocks are annotated ``tvm_pool.<kind>``; TOPI's ``meta_schedule.pool_max`` / ``pool_avg``.

Each registered rule schedules a window-reduction block with :func:`.cpu.schedule_block` and
returns one schedule per point of the pooling design space (:data:`KNOBS`, the hand-written
choice first); elementwise stages (``*_finalize``, the first passes of a separable reduction)
return the schedule unchanged: the reduction's rule (its last pass's, for a separable one)
places them.

The design space: :data:`KNOBS` lists the hand-written schedule (cpu.py's choices) and one
variant per knob: threads (one, all, rows in parallel), vector width (TVM vectors off, 256-bit,
128-bit tiles), unroll (taps rolled), padding (copied per plane vs bounds checks inlined), last
pass (gathered TVM vectors vs LLVM's vectoriser) and tile (pass rows cut in 128-lane chunks).
:func:`pool_candidates` schedules a whole pooling PrimFunc at every point (duplicates dropped):
``tvm_pool.tune`` measures them all (pooling tasks are searched exhaustively), so a tuned pool
is never slower than the hand-written one it was measured against. The knobs are the CPU schedule's own
constants and target facts (schedules/cpu.py), overridden while one candidate is scheduled (:func:`knobs`).
"""

from __future__ import annotations

import contextlib

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
    "pad", "widen",  # the padded copy and bf16 widening: placed by the reduction's rule
)
# MetaSchedule looks the rule up under each key of the target: "cpu" for x86, "arm_cpu" (then
# "cpu") for aarch64. The same functions serve both: the family comes from Target.current().
CPU_KEYS = ("cpu", "arm_cpu")
# MetaSchedule tries the target's keys in order: a cuda target has keys ("cuda", "gpu").
GPU_KEYS = ("cuda", "gpu")


_HUGE = 1 << 62

# (label, schedule level, overrides of cpu.py's constants and target facts); the first entry is
# the hand-written schedule, every other one moves one knob away from it.
KNOBS = (
    ("hand-written", cpu.FULL, {}),
    ("vector: TVM vectors off (LLVM's vectoriser only)", cpu.NO_VECTOR, {}),
    ("vector: 256-bit tiles", cpu.FULL, {"vector_bits": lambda _t, _dtype="float32": 256}),
    ("vector: 128-bit tiles", cpu.FULL, {"vector_bits": lambda _t, _dtype="float32": 128}),
    ("unroll: taps rolled", cpu.FULL, {"_MAX_UNROLLED_TAPS": 0}),
    ("padding: copied per plane", cpu.FULL, {"_PLANE_COPY_BYTES": _HUGE}),
    ("padding: bounds checks inlined", cpu.FULL, {"_PLANE_COPY_BYTES": -1}),
    ("threads: one", cpu.FULL, {"_MIN_PARALLEL_BYTES": _HUGE}),
    ("threads: all", cpu.FULL, {"_MIN_PARALLEL_BYTES": 0}),
    ("threads: planes and rows in parallel", cpu.FULL, {"num_threads": lambda _t: 1 << 20}),
    ("threads: planes in parallel only", cpu.FULL, {"num_threads": lambda _t: 0}),
    ("last pass: LLVM's vectoriser", cpu.FULL, {"_IN_CACHE_BYTES": -1}),
    ("last pass: gathered TVM vectors", cpu.FULL, {"_IN_CACHE_BYTES": _HUGE}),
    ("tile: pass rows in 128-lane chunks", cpu.FULL, {"_MAX_VECTOR_ROW": 128}),
)


@contextlib.contextmanager
def knobs(overrides: dict):
    """Override cpu.py's module-level constants / target facts while scheduling one candidate."""
    saved = {name: getattr(cpu, name) for name in overrides}
    try:
        for name, value in overrides.items():
            setattr(cpu, name, value)
        yield
    finally:
        for name, value in saved.items():
            setattr(cpu, name, value)


def pool_candidates(mod: tvm.IRModule, target) -> list:
    """Every point of the design space for a pooling PrimFunc (``mod`` holds it as ``main``):
    ``[(label, schedule), ...]``, the hand-written schedule first, structural duplicates
    dropped (their labels joined). Empty when the function has no pooling block. A point cpu.py
    cannot schedule at its level falls back to the next level, as the dlight rule does."""
    probe = s_tir.Schedule(mod)
    if not analysis.main_blocks(probe) and not analysis.pass_chains(probe):
        return []
    found = []  # [(labels, schedule)]
    for label, level, overrides in KNOBS:
        sch = None
        with knobs(overrides):
            for lvl in range(level, cpu.PARALLEL_ONLY - 1, -1):
                attempt = s_tir.Schedule(mod)
                try:
                    cpu.schedule_function(attempt, target, lvl)
                except (Exception,):  # pylint: disable=broad-except
                    continue
                sch = attempt
                break
        if sch is None:
            continue
        same = next((f for f in found if tvm_ffi.structural_equal(f[1].mod, sch.mod)), None)
        if same is not None:
            same[0].append(label)
        else:
            found.append(([label], sch))
    return [(" = ".join(labels), sch) for labels, sch in found]


def _cpu_rule(sch: s_tir.Schedule, block) -> list:
    target = tvm.target.Target.current(allow_none=True) or tvm.target.Target({"kind": "llvm"})
    name = sch.get(block).name_hint
    chain = next((c for c in analysis.pass_chains(sch) if sch.get(c.passes[-1]).name_hint == name), None)
    if chain is None and not analysis.is_reduction(sch.get(block)):
        return [sch]
    spaces = []
    for _label, level, overrides in KNOBS:
        candidate = sch.copy()
        try:
            with knobs(overrides):
                if chain is not None:  # the last pass of a separable reduction schedules its chain
                    cpu.schedule_pass_chain(candidate, chain, target, level)  # rvs survive copy()
                else:
                    cpu.schedule_block(candidate, block, target, level)
        except (Exception,):
            continue
        if not any(tvm_ffi.structural_equal(c.mod, candidate.mod) for c in spaces):
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
