"""Per-target TensorIR schedules for tvm_pool's pooling PrimFuncs (installed as tvm_pool.schedules).

Schedules know nothing of ONNX: they find pooling blocks by the block annotations the computes
set (``tvm_pool.kind``, see tvm_pool/compute/common.py) and TOPI's ``meta_schedule.pool_*``.

One dlight-style rule per target family, its settings as data:

- :mod:`.cpu`   the CPU rule, shared by every CPU family (its config in :mod:`.cpu_config`,
                window reductions in :mod:`.cpu_reduction`, separable passes in :mod:`.cpu_passes`,
                exact plane tilings over short rows in :mod:`.cpu_short_rows`; lowering passes
                :mod:`.strided_loads` and :mod:`.stack_buffers` in :mod:`.pipelines`, chosen by
                :func:`tir_pipeline`)
- :mod:`.x86`   x86-64 CPUs: AVX2 / AVX-512 widths, x86's knobs
- :mod:`.arm`   aarch64: 128-bit NEON, native fp16 with +fullfp16, FMAX / -0.0 rewrites, its knobs
- :mod:`.cuda`  NVIDIA GPUs (verified without a GPU, see its docstring)

Two x86 rules schedule kernels that are not pools, and stay out of the pooling records' rules
stamp (``tuning.logs.rules_stamp``): :mod:`.winograd` (the Winograd transforms of
``tvm_pool.winograd``) and :mod:`.injective` (elementwise kernels without a tuning record).
``lowering.schedule_passes`` runs them before and after the pooling rule.

Every rule has the same face: ``config(target)`` (a frozen dataclass of facts and thresholds),
``knobs()`` (the tuning design space: ``(label, config overrides)``, hand-written first),
``schedule(base_schedule, config)`` (the one path: ``compile``, tuning candidates and the
MetaSchedule custom rules all go through it), and the function rewrites ``prepare`` (before
scheduling; applied when fusing, so tuning workloads carry it) and ``finish`` (after
scheduling, whichever path scheduled). To add a family: a module with its rule, then an entry in
:func:`.families.rules`. :mod:`.meta_schedule` registers the rules as MetaSchedule custom rules.
"""

from __future__ import annotations

import tvm

from . import analysis, cpu, decline, strided_loads
from .decline import ScheduleDeclined
from .families import rule_for, rules_for
from .pipelines import register_after_default


def prepare_pass(target: tvm.target.Target) -> tvm.transform.Pass:
    """A module pass that applies the target family's rewrites of a pooling PrimFunc *before*
    it is scheduled (aarch64: the NaN-propagating max as FMAX, a global average as one
    reduction). ``lowering.fusion_passes`` ends with it, so tuning tasks (their workloads), the
    tuning-log lookup and the hand-written schedules all see the same function."""
    return _function_pass(target, "prepare", lambda func: analysis.has_pool_units(func) and not scheduled(func))


def finish_pass(target: tvm.target.Target, scheduled_only: bool = True) -> tvm.transform.Pass:
    """A module pass that applies the target family's rewrites of a *scheduled* pooling PrimFunc
    (aarch64: float sums started at -0.0), whichever path scheduled it: the hand-written rule,
    a tuning record, or a candidate being measured while tuning. In a module, scheduled
    functions are those marked ``tirx.is_scheduled``; a tuning candidate carries no mark, so the
    builder, all of whose functions are scheduled, passes ``scheduled_only=False``."""
    return _function_pass(target, "finish",
                          lambda func: (scheduled(func) or not scheduled_only) and analysis.has_pool_blocks(func))


def scheduled(func) -> bool:
    """Whether the PrimFunc ``func`` is marked ``tirx.is_scheduled`` (by a rule or a tuning record)."""
    return bool(func.attrs is not None and func.attrs.get("tirx.is_scheduled", False))


def _function_pass(target, which: str, applies) -> tvm.transform.Pass:
    rule = rule_for(target)
    rewrite = getattr(rule, which, None)
    if rewrite is not None and which == "finish" and getattr(type(rule), which) is cpu.Pool.finish:
        rewrite = None  # the family keeps the CPU rule's no-op: no function need be looked at

    @tvm.transform.module_pass(opt_level=0, name=f"tvm_pool.{which}")
    def _apply(mod, _ctx):
        if rewrite is None:
            return mod
        updates = {}
        for gv, func in mod.functions_items():
            if isinstance(func, tvm.tirx.PrimFunc) and applies(func):
                new = rewrite(func)
                if not new.same_as(func):
                    updates[gv] = new
        if updates:
            mod = tvm.IRModule({**dict(mod.functions_items()), **updates}, attrs=mod.attrs)
        return mod

    return _apply


def schedule_pass(target: tvm.target.Target) -> tvm.transform.Pass:
    """Schedule every not-yet-scheduled PrimFunc that the target's rule takes, then apply the
    family's ``finish`` to every scheduled pooling PrimFunc (tuned ones included)."""
    rules = rules_for(target)
    if not rules:
        return tvm.transform.Sequential([], name="tvm_pool.no_schedule")
    return tvm.transform.Sequential([_apply_rules(rules), finish_pass(target)], name="tvm_pool.schedule")


def _apply_rules(rules: list) -> tvm.transform.Pass:
    """dlight's ApplyDefaultSchedule (the first rule that returns a schedule wins; the function
    is marked ``tirx.is_scheduled``), with each function's name given to the rules, which name it
    when they decline it (:mod:`.decline`)."""

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.ApplySchedules")
    def _apply(mod, _ctx):
        updates = {}
        for gv, func in mod.functions_items():
            if not isinstance(func, tvm.tirx.PrimFunc) or scheduled(func):
                continue
            if analysis.computes_nothing(func) and analysis.has_pool_units(func):  # the cheap walk first
                # an empty output (a batch of 0): no loop to schedule, no kernel to launch
                updates[gv] = func.with_body(tvm.tirx.Evaluate(0)).with_attr("tirx.is_scheduled", True)
                continue
            target = func.attrs.get("target") if func.attrs is not None else None
            target = target or tvm.target.Target.current(allow_none=False)
            with decline.naming(gv.name_hint):
                sch = next((s for s in (rule.apply(func, target, False) for rule in rules) if s is not None), None)
            if sch is not None:
                updates[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True)
        if updates:
            mod = tvm.IRModule({**dict(mod.functions_items()), **updates}, attrs=mod.attrs)
        return mod

    return _apply


def channel_last_taps(target: tvm.target.Target) -> bool:
    """Whether computes built for ``target`` let channel-last windows take one expression of
    every tap (``compute.forms.CHANNEL_LAST_FORMS``): the family rule's ``CHANNEL_LAST_TAPS``
    (True for a rule that does not say, and for a target no rule takes)."""
    rule = rule_for(target)
    return bool(getattr(rule, "CHANNEL_LAST_TAPS", True))


def clamped_taps(target: tvm.target.Target) -> bool:
    """Whether computes built for ``target`` read a channel-last max's taps clamped, with the
    ordered-pairs NaN test (``compute.forms.clamped_taps``): the family rule's
    ``CLAMPED_TAPS`` (False for a rule that does not say, and for a target no rule takes)."""
    return bool(getattr(rule_for(target), "CLAMPED_TAPS", False))


def tir_pipeline(target: tvm.target.Target) -> str:
    """The name of the TIR lowering pipeline for ``target``: TVM's default, plus, for CPU
    families, the rewrite of strided vector loads (:mod:`.strided_loads`, families with
    de-interleaving loads instead of gathers), the NaN-propagating max as two plain maxima ORed
    (:mod:`.nan_max`, families with ``nan_max_or_bits``) and small scratch buffers on the stack
    (:mod:`.stack_buffers`, families with ``stack_buffer_bytes``)."""
    rule = rule_for(target)
    if not isinstance(rule, cpu.Pool):
        return "default"
    config = rule.config(target)
    if not config.stack_buffer_bytes and not config.nan_max_or_bits:
        return strided_loads.register_pipeline() if config.deinterleaving_loads else "default"
    return _register_cpu_pipeline(config.deinterleaving_loads, config.stack_buffer_bytes, config.nan_max_or_bits)


def _register_cpu_pipeline(strided: bool, stack_bytes: int, or_bits: int) -> str:
    """TVM's default TIR pipeline followed by tvm_pool's CPU lowering passes, registered once."""
    from .nan_max import or_max_pass  # pylint: disable=import-outside-toplevel
    from .stack_buffers import stack_buffers_pass  # pylint: disable=import-outside-toplevel

    passes = ([strided_loads.strided_loads_pass] if strided else []) + ([or_max_pass(or_bits)] if or_bits else [])
    passes += [stack_buffers_pass(stack_bytes)] if stack_bytes else []
    name = f"tvm_pool.cpu.strided{int(strided)}.stack{stack_bytes}" + (f".or_max{or_bits}" if or_bits else "")
    return register_after_default(name, passes)


def register_meta_schedule_rules() -> list[str]:
    """Register the schedules as MetaSchedule custom rules; returns the global names."""
    from . import meta_schedule  # pylint: disable=import-outside-toplevel

    return meta_schedule.register()
