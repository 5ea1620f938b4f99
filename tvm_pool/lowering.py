"""tvm_pool's lowering: Relax pooling ops -> tvm_pool computes -> per-target schedules -> build.

``compile`` is a drop-in for ``tvm.compile`` on Relax modules. Modules from any road (tvm_pool's
ONNX frontend, TVM's PyTorch frontend, hand-built Relax using ``relax.op.nn.max_pool2d`` and
friends) get the same treatment: TVM's own pooling ops are legalized to tvm_pool's computes,
then every PrimFunc that carries a tvm_pool block (fused or not) gets the target's schedule.
"""

from __future__ import annotations

import contextlib
import functools
import logging

import tvm
from tvm import relax
from tvm.ir import Op

from . import adaptive_legalize, compute, vector_exp, winograd
from .canonicalize import constants_last, drop_dropout, fold_batch_norm, fold_constants, lift_clips
from .channel_last import channel_last_fixups
from .compute import forms
from .legalize_layouts import emit_in_layout, pool_layouts
from .targets import is_x86, resolve_target

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
    from .schedules import injective, winograd as winograd_rule  # pylint: disable=import-outside-toplevel

    if not is_x86(target):
        return [schedule_pass(target)]
    # the Winograd transforms first (tvm_pool.winograd rewrites convolutions on x86 only), the
    # pools, then the untuned elementwise kernels TVM's CPU pipeline leaves serial
    return [tvm.s_tir.dlight.ApplyDefaultSchedule(winograd_rule.Transforms()), schedule_pass(target),
            tvm.s_tir.dlight.ApplyDefaultSchedule(injective.Elementwise())]


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


# The layouts a model's 2-D convolutions can be compiled in (``conv_layout``): as the model has
# them (NCHW data, OIHW weights), or channel-last (NHWC data, HWIO weights: each output
# channel's vector reads contiguous weights and one input value, whatever the stride). Relax's
# ConvertLayout carries the layout through the elementwise ops and pools between convolutions.
# On x86 channel-last tunes far better. On an Intel Emerald Rapids (2 threads, onnxruntime's time
# in the same process), ResNet-18 took 32.9 ms (ORT 17.1) with the NCHW records and 24.6 ms
# (ORT 16.6) after 18 minutes of tuning NHWC. In its kernels, the stride-2 convolutions went
# 2.5 -> 0.8 ms and the 7x7 stem 4.8 -> 1.8 ms. ResNet-50: 104.9 ms (ORT 40.3) against 61.5 ms
# (ORT 39.2) after 16 minutes. Which layout ``compile`` takes: choose_conv_layout.
CONV_LAYOUTS = {"NCHW": None, "NHWC": ["NHWC", "HWIO"]}


# Ops TVM 0.27's ConvertLayout fails on ("Expected nested to match tuple": a tuple output it
# infers no layout for), leaving a Relax BlockBuilder open as it raises: a dropout whose mask is used
# (canonicalize.drop_dropout removes the others).
_NO_CONVERT_LAYOUT = ("relax.nn.dropout",)


def calls_op(mod: tvm.IRModule, *names: str) -> bool:
    """Whether a Relax function of ``mod`` calls one of the ops ``names``."""
    ops = [Op.get(name) for name in names]
    found = []

    def visit(expr):
        if isinstance(expr, relax.Call) and any(expr.op.same_as(op) for op in ops):
            found.append(expr)

    for func in mod.functions.values():
        if isinstance(func, relax.Function) and not found:
            relax.analysis.post_order_visit(func, visit)
    return bool(found)


def converts_layout(mod: tvm.IRModule, conv_layout: str) -> bool:
    """Whether Relax's ConvertLayout takes ``mod`` to ``conv_layout``."""
    if CONV_LAYOUTS[conv_layout] is None:
        return True
    mod = tvm.transform.Sequential(_canonical_passes("NCHW"))(mod)  # the graph fusion_passes converts
    if calls_op(mod, *_NO_CONVERT_LAYOUT):
        return False
    try:
        _convert_layout(conv_layout)(mod)
    except (RuntimeError, ValueError) as err:  # TVM raises InternalError, a RuntimeError
        logger.info("conv_layout %s: ConvertLayout fails (%s); the model keeps NCHW", conv_layout, err)
        return False
    return True


def choose_conv_layout(mod, target, dirs=None, *, shipped: bool = True, prefer: str = "NCHW") -> str:
    """The layout ``compile`` gives the 2-D convolutions of the Relax module ``mod``
    (:data:`CONV_LAYOUTS`): on x86, the one whose kernels (by FLOPs) the tuning logs of ``dirs``
    (and the shipped ones) cover more: by the records of any CPU model first (to 1% of the
    FLOPs); between layouts covered alike, NHWC (:data:`RECORDED_LAYOUT_FIRST`), then the one
    this CPU model's records cover more; ``prefer`` when nothing covers either (compile: the
    model's own NCHW, so an untuned model builds as before; tune, starting a log: NHWC, which
    tunes better). On other targets, for a model without 2-D convolutions and one
    ConvertLayout fails on, NCHW."""
    from .tuning.logs import log_stamp  # pylint: disable=import-outside-toplevel

    target = resolve_target(target)
    if not is_x86(target) or not calls_op(mod, "relax.nn.conv2d"):
        return "NCHW"
    key = (str(target), tuple((str(d), log_stamp(str(d))) for d in dirs or ()), shipped, prefer)
    for known, known_key, layout in _CHOSEN:  # compile, and the CLI's coverage line, ask for the same module
        if known is mod and known_key == key:
            return layout
    if not converts_layout(mod, "NHWC"):
        layout = "NCHW"
    elif not dirs and not shipped:
        layout = prefer
    else:
        scores = {}
        # the layout that comes first is scored first: covered all over, no other can beat it, and
        # the model is fused in one layout only (ResNet-50: about 1 s a layout)
        for candidate in (RECORDED_LAYOUT_FIRST, *(l for l in CONV_LAYOUTS if l != RECORDED_LAYOUT_FIRST)):
            here, anywhere = _covered(mod, target, dirs, shipped, candidate)
            # untuned kernels run 10-50x slower, so coverage by any CPU's records comes first (to
            # 1%: a tiny untuned kernel does not outweigh the other layout's records), then
            # channel-last where both are covered, then this CPU's records
            first = anywhere > 0 and candidate == RECORDED_LAYOUT_FIRST
            scores[candidate] = (round(anywhere, 2), first, here)
            if first and anywhere == 1.0:
                break
        layout = max(scores, key=lambda l: (scores[l], l == prefer))  # equals: ``prefer``
    _CHOSEN[:] = [(mod, key, layout), *_CHOSEN[:3]]
    return layout


# Between two layouts whose convolutions the logs cover alike, this one, whichever CPU model
# measured its records: on the znver4, with NCHW records measured there (eighth session) and NHWC
# records measured on an Intel Emerald Rapids (fourteenth to twentieth), the NHWC build was the
# faster one on every model tried, ms at 2 threads, NCHW -> NHWC (onnxruntime): ResNet-18 25.5 ->
# 13.8 (17.2), ResNet-50 59.5 -> 38.5 (39.6), Inception-v3 110 -> 58.6 (55.8), VGG-16 195 -> 95
# (149), DenseNet-121 39.8 -> 31.7 (30.9), MobileNetV3-Large 7.0 -> 5.8 (4.5), EfficientNet-B0
# 11.7 -> 11.75 (8.4). On the Intel machine its own NHWC records were already chosen.
RECORDED_LAYOUT_FIRST = "NHWC"


# The last few choices of choose_conv_layout: (module, its key, layout). A model's choice fuses it in
# both layouts (ResNet-50: about 1 s each), and compile and the coverage line both ask.
_CHOSEN: list = []


def _covered(mod, target, dirs, shipped, layout) -> tuple[float, float]:
    """(share of the non-pooling FLOPs with a record measured on this CPU model, share with any)
    when ``mod``'s convolutions are in ``layout``."""
    from tvm.s_tir.analysis import estimate_tir_flops  # pylint: disable=import-outside-toplevel

    from .schedules import injective, winograd as winograd_rule  # pylint: disable=import-outside-toplevel
    from .tuning.logs import cpu_model, is_pooling  # pylint: disable=import-outside-toplevel

    cpu = cpu_model(target)
    total = here = anywhere = 0.0
    elementwise = injective.Elementwise()
    for task, record, _ in task_records(mod, target, dirs, shipped, layout):
        if is_pooling(task.dispatched[0]) or winograd_rule.takes(task.dispatched[0]):
            continue  # tvm_pool's own schedules
        if record is None and elementwise.apply(task.dispatched[0]["main"], target, False) is not None:
            continue  # an untuned elementwise kernel: tvm_pool's schedule (DenseNet's batch norms after a concat)
        flops = float(estimate_tir_flops(task.dispatched[0])) * int(task.weight)
        total += flops
        if record is not None:
            anywhere += flops
            here += flops if cpu_model(record.target) == cpu else 0.0
    return (here / total, anywhere / total) if total else (0.0, 0.0)


def task_records(mod, target, dirs=None, shipped: bool = True, layout: str | None = None):
    """``(task, its best record or None, the log it came from)`` for each task ``compile``
    would build from the Relax module ``mod`` with the tuning logs of ``dirs`` (and the shipped
    ones), its convolutions in ``layout`` (by default the one :func:`choose_conv_layout` gives)."""
    # pylint: disable=import-outside-toplevel
    from tvm.s_tir import meta_schedule as ms

    from .tuning.logs import load_with_sources, tvm_ffi_key

    # pylint: enable=import-outside-toplevel
    target = resolve_target(target)
    layout = layout or choose_conv_layout(mod, target, dirs, shipped=shipped)
    database, sources = load_with_sources(target, dirs, shipped)
    with database if database is not None else contextlib.nullcontext():  # Winograd's "auto" asks it
        tasks = ms.relax_integration.extract_tasks(fuse(mod, target, layout), target)
    for task in tasks:
        task_mod = task.dispatched[0]
        record = None
        if database is not None and database.has_workload(task_mod):
            top = database.get_top_k(database.commit_workload(task_mod), 1)
            record = top[0] if top else None
        yield task, record, sources.get(tvm_ffi_key(task_mod), "?")


def fusion_passes(target: tvm.target.Target, conv_layout: str = "NCHW", winograd_mode: str = "auto") -> list:
    """The passes ``pipeline`` runs before scheduling: tvm_pool's legalization, TVM's library
    dispatch and legalization up to fusion (FuseOps / FuseTIR), then the target family's
    rewrites of pooling functions (``schedules.prepare_pass``). Tuning extracts its tasks from
    the module these produce, so tuned workloads are the PrimFuncs ``compile`` schedules.
    ``conv_layout``: the 2-D convolutions' layout (:data:`CONV_LAYOUTS`). ``winograd_mode``: which
    channel-last 3x3 convolutions become Winograd kernels on x86 (:mod:`tvm_pool.winograd`;
    "auto": those whose product the current MetaSchedule database has a record for)."""
    if conv_layout not in CONV_LAYOUTS:
        raise ValueError(f"conv_layout must be one of {', '.join(CONV_LAYOUTS)}, got {conv_layout!r}")
    backend = _backend(target)
    legalize = list(backend.legalize_passes(target))
    first_default = next((i for i, p in enumerate(legalize) if _is_default_schedule(p)), len(legalize))
    passes = _canonical_passes(conv_layout)
    passes.append(fold_constants())  # the folded and transposed weights, without a kernel build each
    if is_x86(target) and CONV_LAYOUTS[conv_layout] is not None:
        passes.append(winograd.rewrite(winograd_mode, covered=functools.partial(_product_recorded, target)))
    passes.append(relax.transform.LegalizeOps(customize_legalize_map=legalize_map(target)))
    passes += backend.library_dispatch_passes(target)
    passes += legalize[:first_default]
    # the family's rewrites of a pooling function before scheduling (aarch64: FMAX, whole-plane
    # sums): tuned workloads, their log lookup and the hand-written rule all see them
    from .schedules import prepare_pass  # pylint: disable=import-outside-toplevel

    passes.append(prepare_pass(target))
    return passes


def _canonical_passes(conv_layout: str) -> list:
    """One graph for every road first (tvm_pool.canonicalize): torch.export and both ONNX
    exporters then give the same kernels, which the shipped logs cover; then the convolutions'
    layout."""
    passes = [drop_dropout(), fold_batch_norm(), constants_last()]
    if CONV_LAYOUTS[conv_layout] is not None:
        # clips as ops ConvertLayout carries; NCHW keeps the kernels its shipped records tuned
        passes += [lift_clips(), _convert_layout(conv_layout), channel_last_fixups()]
    return passes


def _convert_layout(conv_layout: str) -> tvm.transform.Pass:
    return relax.transform.ConvertLayout({"relax.nn.conv2d": CONV_LAYOUTS[conv_layout]})


def fuse(mod: tvm.IRModule, target, conv_layout: str = "NCHW", winograd_mode: str = "auto") -> tvm.IRModule:
    """``mod`` after :func:`fusion_passes`: the PrimFuncs tuning sees and compile schedules."""
    target = resolve_target(target)
    with target:
        return tvm.transform.Sequential(fusion_passes(target, conv_layout, winograd_mode))(mod)


@functools.lru_cache(maxsize=64)
def _product_workload(target_str: str, v_shape: tuple, u_shape: tuple) -> tvm.IRModule:
    """The MetaSchedule workload of a Winograd product of these operand shapes, as compile
    fuses it (a matmul alone in its function)."""
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    bb = relax.BlockBuilder()
    v = relax.Var("v", relax.TensorType(v_shape, "float32"))
    u = relax.Var("u", relax.TensorType(u_shape, "float32"))
    with bb.function("main", [v, u]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.matmul(v, u))
        bb.emit_func_output(out)
    target = tvm.target.Target(target_str)
    (task,) = ms.relax_integration.extract_tasks(fuse(bb.get(), target, winograd_mode="never"), target)
    return task.dispatched[0]


def _product_recorded(target: tvm.target.Target, v_shape: tuple, u_shape: tuple) -> bool:
    """Whether the current MetaSchedule database has a record for that Winograd product."""
    from tvm.s_tir import meta_schedule as ms  # pylint: disable=import-outside-toplevel

    database = ms.database.Database.current()
    if database is None:
        return False
    workload = _product_workload(str(target), tuple(v_shape), tuple(u_shape))
    return bool(database.has_workload(workload))


def pipeline(
    target: tvm.target.Target, *, schedule: bool = True, database=None, conv_layout: str = "NCHW",
    winograd_mode: str = "auto",
) -> tvm.transform.Pass:
    """The Relax pipeline ``compile`` runs: TVM's own passes for the target, with tvm_pool's
    legalization first and, right after fusion, the tuning records of ``database`` (a
    MetaSchedule database, see :mod:`tvm_pool.tuning.logs`) then tvm_pool's schedules (ahead of
    TVM's generic dlight schedules, which then skip the PrimFuncs already scheduled)."""
    backend = _backend(target)
    legalize = list(backend.legalize_passes(target))
    first_default = next((i for i, p in enumerate(legalize) if _is_default_schedule(p)), len(legalize))
    passes = fusion_passes(target, conv_layout, winograd_mode)
    if database is not None:
        passes.append(_apply_records(target))
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


def _apply_records(target: tvm.target.Target) -> tvm.transform.Pass:
    """MetaSchedule's ApplyDatabase (the current database's records): tuned PrimFuncs get
    ``tirx.is_scheduled``, so the schedule passes after it leave them alone, and those that are
    not pools get ``AS_MEASURED``, so tvm_pool's TIR lowering passes leave them as their records
    were measured (:mod:`tvm_pool.schedules.pipelines`)."""
    from .schedules import analysis  # pylint: disable=import-outside-toplevel
    from .schedules import scheduled as marked  # pylint: disable=import-outside-toplevel
    from .schedules.pipelines import AS_MEASURED  # pylint: disable=import-outside-toplevel

    with target:  # the pass reads the current target when it is made
        apply = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)

    def scheduled(func) -> bool:
        return isinstance(func, tvm.tirx.PrimFunc) and marked(func)

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.ApplyRecords")
    def _apply(mod, _ctx):
        before = {gv.name_hint for gv, func in mod.functions_items() if scheduled(func)}
        mod = apply(mod)
        updates = {gv: func.with_attr(AS_MEASURED, True) for gv, func in mod.functions_items()
                   if scheduled(func) and gv.name_hint not in before and not analysis.has_pool_blocks(func)}
        if updates:
            mod = tvm.IRModule({**dict(mod.functions_items()), **updates}, attrs=mod.attrs)
        return mod

    return _apply


def compile(  # pylint: disable=redefined-builtin
    mod: tvm.IRModule,
    target="llvm",
    *,
    schedule: bool = True,
    tuning_logs=None,
    shipped_logs: bool = True,
    tir_pipeline="default",
    conv_layout: str = "auto",
    winograd: str = "auto",
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
    ``conv_layout``: the 2-D convolutions' layout (:data:`CONV_LAYOUTS`); "auto" takes the one
    whose kernels the logs cover best, NCHW when they tie (:func:`choose_conv_layout`).
    ``winograd``: which channel-last 3x3 stride-1 convolutions run as Winograd F(4x4, 3x3) on
    x86 (:mod:`tvm_pool.winograd`): "auto", those whose batched product has a tuning record;
    "always", every eligible one; "never".
    """
    target = resolve_target(target)
    database = None
    if schedule:
        from .tuning import logs  # pylint: disable=import-outside-toplevel

        database = logs.load_logs(target, tuning_logs, shipped=shipped_logs)
    if conv_layout == "auto":
        conv_layout = choose_conv_layout(mod, target, tuning_logs, shipped=shipped_logs)
    if schedule and tir_pipeline == "default":
        from .schedules import tir_pipeline as target_tir_pipeline  # pylint: disable=import-outside-toplevel

        tir_pipeline = target_tir_pipeline(target)
    return tvm.compile(
        mod,
        target=target,
        relax_pipeline=pipeline(target, schedule=schedule, database=database, conv_layout=conv_layout,
                                winograd_mode=winograd),
        tir_pipeline=tir_pipeline,
    )
