"""tvm_pool's lowering: Relax pooling ops -> tvm_pool computes -> per-target schedules -> build.

``compile`` is a drop-in for ``tvm.compile`` on Relax modules. Modules from any road (tvm_pool's
ONNX frontend, TVM's PyTorch frontend, hand-built Relax using ``relax.op.nn.max_pool2d`` and
friends) get the same treatment: TVM's own pooling ops are legalized to tvm_pool's computes,
then every PrimFunc that carries a tvm_pool block (fused or not) gets the target's schedule.
"""

from __future__ import annotations

import contextlib
import logging

import tvm
from tvm import relax
from tvm.ir import Op

from . import adaptive_legalize, compute, vector_exp
from .canonicalize import constants_last, fold_batch_norm
from .compute import forms
from .legalize_layouts import emit_in_layout, pool_layouts
from .targets import resolve_target

logger = logging.getLogger(__name__)


def _tvm_legalize(call):
    return Op.get(call.op.name).get_attr("FLegalize")


def _pool_legalizer(kind: str, rank: int):
    """Legalize relax.nn.{max,avg}_pool{rank}d with tvm_pool's compute (channel-first or
    channel-last; another out_layout is a transpose after it)."""

    def legalize(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        attrs = call.attrs
        layouts = pool_layouts(call, rank)
        if layouts is None:
            return _tvm_legalize(call)(bb, call)
        args = dict(
            kernel_shape=[int(k) for k in attrs.pool_size],
            strides=[int(s) for s in attrs.strides],
            dilations=[int(d) for d in attrs.dilation],
            pads=[int(p) for p in attrs.padding],
            ceil_mode=bool(attrs.ceil_mode),
        )
        if kind == "max":
            fn, extra = compute.max_pool, {}
        else:
            fn, extra = compute.avg_pool, {"count_include_pad": bool(attrs.count_include_pad)}
        pooled = bb.call_te(fn, call.args[0], **args, **extra, layout=layouts[0],
                            primfunc_name_hint=f"tvm_pool_{kind}_pool{rank}d")
        return emit_in_layout(bb, pooled, *layouts)

    return legalize


def legalize_map(target: tvm.target.Target | None = None) -> dict:
    """customize_legalize_map entries for TVM's own Relax pooling ops; for a ``target`` whose
    schedule keeps channel-last windows as passes (``schedules.channel_last_taps``), their
    computes are built inside ``compute.forms.channel_last_passes``; for one whose rule reads a
    channel-last max's taps clamped (``schedules.clamped_taps``), inside
    ``compute.forms.clamped_taps``."""
    table = {}
    for rank in (1, 2, 3):
        table[f"relax.nn.max_pool{rank}d"] = _pool_legalizer("max", rank)
        table[f"relax.nn.avg_pool{rank}d"] = _pool_legalizer("avg", rank)
    table.update(adaptive_legalize.legalize_entries())  # relax.nn.adaptive_avg_pool{1,2,3}d
    if target is None:
        return table
    from .schedules import channel_last_taps, clamped_taps  # pylint: disable=import-outside-toplevel

    contexts = ([] if channel_last_taps(target) else [forms.channel_last_passes]) + (
        [forms.clamped_taps] if clamped_taps(target) else [])
    if not contexts:
        return table
    return {name: _within(fn, contexts) for name, fn in table.items()}


def _within(legalize, contexts):
    """``legalize`` building its computes inside every context manager of ``contexts``."""

    def within(bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
        with contextlib.ExitStack() as stack:
            for context in contexts:
                stack.enter_context(context())
            return legalize(bb, call)

    return within


def schedule_passes(target: tvm.target.Target) -> list:
    """Passes that attach tvm_pool's schedules (and shipped tuning records) for ``target``."""
    from .schedules import schedule_pass  # pylint: disable=import-outside-toplevel

    return [schedule_pass(target)]


# TVM 0.27's UnrollLoop pass decides whether to unroll a loop from ``extent * steps`` computed
# in a C++ int: a serial loop of 2^28 or more iterations over an unrolled body overflows it,
# passes the "small enough" test, and is unrolled in full (tens of GB and minutes to compile
# an axis of 2^28). Loops longer than this are split so no extent reaches that product; the
# outer part of a split is not innermost, which UnrollLoop never unrolls. Loops this long run
# for milliseconds at least, so the split costs nothing measurable.
MAX_SERIAL_EXTENT = 1 << 20


def split_long_serial_loops(func: tvm.tirx.PrimFunc) -> tvm.tirx.PrimFunc:
    """``func`` with every serial loop of constant extent above :data:`MAX_SERIAL_EXTENT` split."""
    from tvm import s_tir, tirx  # pylint: disable=import-outside-toplevel

    sch = s_tir.Schedule(func)
    try:
        blocks = sch.get_child_blocks(sch.get_sblock("root"))
    except s_tir.ScheduleError:
        return func  # not a block-level function (no root block): nothing scheduled to split
    changed, split_any = True, False
    while changed:
        changed = False
        for block in blocks:
            for loop in sch.get_loops(block):
                node = sch.get(loop)
                if (
                    node.kind == tirx.ForKind.SERIAL
                    and isinstance(node.extent, tirx.IntImm)
                    and int(node.extent) > MAX_SERIAL_EXTENT
                ):
                    sch.split(loop, [None, MAX_SERIAL_EXTENT])
                    changed = split_any = True
                    break
            if changed:
                break
    if not split_any:
        return func
    return sch.mod["main"]


_split_long_serial_loops = tvm.tirx.transform.prim_func_pass(
    lambda func, _mod, _ctx: split_long_serial_loops(func), opt_level=0, name="tvm_pool.SplitLongSerialLoops")


def _backend(target: tvm.target.Target):
    """TVM's per-backend pass lists (the module, since the CPU package does not re-export all)."""
    # pylint: disable=import-outside-toplevel
    if target.kind.name == "llvm":
        from tvm.relax.backend.cpu_generic import pipeline as backend
    elif target.kind.name == "cuda":
        from tvm.relax.backend.cuda import pipeline as backend
    else:
        from tvm.relax.backend.gpu_generic import pipeline as backend
    return backend


def _is_default_schedule(p) -> bool:
    return p.info.name == "ApplyDefaultSchedule"


def fusion_passes(target: tvm.target.Target) -> list:
    """The passes ``pipeline`` runs before scheduling: tvm_pool's legalization, TVM's library
    dispatch and legalization up to fusion (FuseOps / FuseTIR), then the target family's
    rewrites of pooling functions (``schedules.prepare_pass``). Tuning extracts its tasks from
    the module these produce, so tuned workloads are the PrimFuncs ``compile`` schedules."""
    backend = _backend(target)
    legalize = list(backend.legalize_passes(target))
    first_default = next((i for i, p in enumerate(legalize) if _is_default_schedule(p)), len(legalize))
    # one graph for every road first (tvm_pool.canonicalize): torch.export and both ONNX
    # exporters then give the same kernels, which the shipped logs cover
    passes = [fold_batch_norm(), constants_last(), relax.transform.LegalizeOps(customize_legalize_map=legalize_map(target))]
    passes += backend.library_dispatch_passes(target)
    passes += legalize[:first_default]
    # the family's rewrites of a pooling function before scheduling (aarch64: FMAX, whole-plane
    # sums): tuned workloads, their log lookup and the hand-written rule all see them
    from .schedules import prepare_pass  # pylint: disable=import-outside-toplevel

    passes.append(prepare_pass(target))
    return passes


def fuse(mod: tvm.IRModule, target) -> tvm.IRModule:
    """``mod`` after :func:`fusion_passes`: the PrimFuncs tuning sees and compile schedules."""
    target = resolve_target(target)
    with target:
        return tvm.transform.Sequential(fusion_passes(target))(mod)


def pipeline(
    target: tvm.target.Target, *, schedule: bool = True, database=None
) -> tvm.transform.Pass:
    """The Relax pipeline ``compile`` runs: TVM's own passes for the target, with tvm_pool's
    legalization first and, right after fusion, the tuning records of ``database`` (a
    MetaSchedule database, see :mod:`tvm_pool.tuning.logs`) then tvm_pool's schedules (ahead of
    TVM's generic dlight schedules, which then skip the PrimFuncs already scheduled)."""
    backend = _backend(target)
    legalize = list(backend.legalize_passes(target))
    first_default = next((i for i, p in enumerate(legalize) if _is_default_schedule(p)), len(legalize))
    passes = fusion_passes(target)
    if database is not None:
        # Tuned PrimFuncs get tirx.is_scheduled, so the dlight passes below leave them alone.
        with target:  # the pass reads the current target when it is made
            passes.append(relax.transform.MetaScheduleApplyDatabase(enable_warning=False))
    if schedule:
        passes += schedule_passes(target)
    passes += legalize[first_default:]
    passes.append(_split_long_serial_loops)
    if vector_exp.applies(target):
        passes.append(vector_exp.vector_exp_pass)  # after the records' lookup: their workloads keep exp
    passes += backend.dataflow_lower_passes(target)
    passes += backend.finalize_passes(target)

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.pipeline")
    def _pipeline(mod, _ctx):
        # MetaScheduleApplyDatabase reads Database.current()
        with target, (database if database is not None else contextlib.nullcontext()):
            return tvm.transform.Sequential(passes)(mod)

    return _pipeline


def compile(  # pylint: disable=redefined-builtin
    mod: tvm.IRModule,
    target="llvm",
    *,
    schedule: bool = True,
    tuning_logs=None,
    shipped_logs: bool = True,
    tir_pipeline="default",
) -> tvm.runtime.Executable:
    """Compile a Relax module with tvm_pool's lowering; returns what ``tvm.compile`` returns.

    ``target``: a ``tvm.target.Target``, a dict, or one of "host", "llvm", "x86", "arm", "cuda".
    ``schedule=False`` builds the unscheduled computes (the reference the schedules are tested
    against; no tuning records either).
    ``tuning_logs``: directories written by :func:`tvm_pool.tune` (MetaSchedule JSON databases)
    whose records are applied; ``shipped_logs``: also apply the logs shipped in
    ``tvm_pool.tuning_logs`` for the target's family. A log tuned for a target family or ISA
    this target lacks, or an unreadable one, gives a warning and is not used; a corrupt line
    gives a warning and the file's other records are used. A log never fails the build.
    ``tir_pipeline``: TVM's TIR pipeline name; "default" (scheduled) takes the target's
    (``schedules.tir_pipeline``: aarch64 adds the strided-load rewrite, schedules/strided_loads.py).
    """
    target = resolve_target(target)
    database = None
    if schedule:
        from .tuning import logs  # pylint: disable=import-outside-toplevel

        database = logs.load_logs(target, tuning_logs, shipped=shipped_logs)
    if schedule and tir_pipeline == "default":
        from .schedules import tir_pipeline as target_tir_pipeline  # pylint: disable=import-outside-toplevel

        tir_pipeline = target_tir_pipeline(target)
    return tvm.compile(
        mod,
        target=target,
        relax_pipeline=pipeline(target, schedule=schedule, database=database),
        tir_pipeline=tir_pipeline,
    )
