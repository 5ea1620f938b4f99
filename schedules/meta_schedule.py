"""The same schedules as MetaSchedule custom rules (CPU under keys ``cpu`` and ``arm_cpu``, CUDA
under ``cuda`` and ``gpu``), and the pooling design space tuning measures.

MetaSchedule's ``ApplyCustomRule`` reads a block's ``schedule_rule`` annotation and calls the
global function ``s_tir.meta_schedule.<target key>.<annotation>`` (target key ``cpu`` for llvm)
with ``(schedule, block)``; it must return a list of schedules (the design space). tvm_pool's
blocks are annotated ``tvm_pool.<kind>``; TOPI's ``meta_schedule.pool_max`` / ``pool_avg``.

There is one path: the registered function asks ``schedules.rule_for(target)`` for the
family's rule and returns :meth:`candidates` of it, the very ``rule.schedule(sch, config)``
that ``compile`` runs, once per knob of the family (``rule.knobs()``: each an override of the
family's config, the hand-written choice first), with every target-specific step and check it
has (aarch64's FMAX and whole-plane rewrites are in the tuned workload already, see
``schedules.prepare_pass``; its -0.0 sum start is applied to tuned functions by
``schedules.finish_pass``; CUDA's alignment proof and shared-memory limit are inside its
``schedule``). The rule schedules the whole function, so it acts once per function: on the
first pooling unit by name (:func:`_anchor`); every other block of the function (an earlier
pass, a finalize, another unit) returns the schedule as it is.

:func:`pool_candidates` gives the same design space for a whole pooling PrimFunc:
``tvm_pool.tune`` measures every point (pooling tasks are searched exhaustively), so a tuned
pool is never slower than the hand-written one it was measured against.
"""

from __future__ import annotations

import dataclasses

import tvm
import tvm_ffi
from tvm import s_tir

from . import analysis, decline
from .families import rule_for

CPU_KINDS = (
    "max", "max_index", "avg_sum", "lp_sum",
    "adaptive_max", "adaptive_max_index", "adaptive_avg_sum",
    "trt_max", "trt_avg_sum", "trt_lp_sum",
)
ELEMENTWISE_KINDS = (
    "max_pass", "avg_sum_pass", "lp_sum_pass", "trt_max_pass", "trt_avg_sum_pass", "trt_lp_sum_pass",
    "max_finalize", "trt_max_finalize", "max_index_finalize", "avg_finalize", "lp_finalize",
    "adaptive_max_index_finalize", "adaptive_avg_finalize", "trt_finalize",
    "pad", "widen",  # the padded copy and bf16 widening: placed by the reduction's rule
)
# MetaSchedule looks the rule up under each key of the target: "cpu" for x86, "arm_cpu" (then
# "cpu") for aarch64, ("cuda", "gpu") for CUDA. One function serves every key: the family comes
# from Target.current().
KEYS = ("cpu", "arm_cpu", "cuda", "gpu")


def pool_candidates(mod: tvm.IRModule, target) -> list:
    """Every point of the target family's design space for a pooling PrimFunc (``mod`` holds it
    as ``main``, as fused and prepared by ``lowering.fuse``): ``[(label, schedule), ...]``, the
    hand-written schedule first, structural duplicates dropped (their labels joined), each
    schedule's trace replaying on ``mod``. Empty when the function has no pooling block or the
    target no rule."""
    rule = rule_for(target)
    if rule is None or not analysis.has_pool_units(mod["main"]):
        return []
    return candidates(rule, s_tir.Schedule(mod), target)


def candidates(rule, base: s_tir.Schedule, target) -> list:
    """``[(label, schedule)]``: ``rule.schedule`` of a copy of ``base`` for each of the rule's
    knobs that schedules, structural duplicates joined (" = "), the hand-written one first."""
    config = rule.config(target)
    found = []  # [([labels], schedule)]
    for label, overrides in rule.knobs():
        knob = dataclasses.replace(config, **overrides)
        # a knob that does not apply gives None; one that fails is declined with a warning
        sch = decline.guarded(f"{rule.family} ({label})", base.mod["main"], lambda k=knob: rule.schedule(base, k),
                              warn_none=False)
        if sch is None:
            continue
        same = next((f for f in found if tvm_ffi.structural_equal(f[1].mod, sch.mod)), None)
        if same is not None:
            same[0].append(label)
        else:
            found.append(([label], sch))
    return [(" = ".join(labels), sch) for labels, sch in found]


def _anchor(sch: s_tir.Schedule) -> str | None:
    """The block the function's schedule is made from: the first pooling unit by name."""
    names = analysis.unit_anchors(sch)
    return min(names) if names else None


def _rule(sch: s_tir.Schedule, block) -> list:
    """The registered custom rule: the family's design space for the whole function, made when
    MetaSchedule reaches the anchor block; any other block leaves the schedule as it is."""
    target = tvm.target.Target.current(allow_none=True)
    rule = rule_for(target) if target is not None else None
    if rule is None or sch.get(block).name_hint != _anchor(sch):
        return [sch]
    return [s for _, s in candidates(rule, sch, target)] or [sch]


def _keep(sch: s_tir.Schedule, _block) -> list:
    return [sch]


_registered: list[str] = []


def register() -> list[str]:
    """Register the custom rules (idempotent); returns the registered global names."""
    if _registered:
        return list(_registered)
    names = []
    for prefix in [f"s_tir.meta_schedule.{key}." for key in KEYS]:
        reductions = [f"{prefix}tvm_pool.{k}" for k in CPU_KINDS]
        reductions += [prefix + r for r in analysis.TOPI_POOL_RULES]
        for name in reductions:
            tvm_ffi.register_global_func(name, _rule, override=True)
        elementwise = [f"{prefix}tvm_pool.{k}" for k in ELEMENTWISE_KINDS]
        for name in elementwise:
            tvm_ffi.register_global_func(name, _keep, override=True)
        names += reductions + elementwise
    _registered.extend(names)
    return list(names)
