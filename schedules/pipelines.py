"""TIR lowering pipelines of the schedules' families: TVM's default pipeline followed by
tvm_pool's own lowering passes (:mod:`.strided_loads`, :mod:`.stack_buffers`), registered under
a name that ``tvm.compile(..., tir_pipeline=NAME)`` takes (``tvm_pool.schedules.tir_pipeline``
chooses it per target).

Those passes are tvm_pool's lowering of its own schedules (and of TVM's untuned defaults). A
kernel scheduled by a MetaSchedule tuning record of anything but a pool carries
:data:`AS_MEASURED` (``lowering`` marks it as the records are applied): the passes leave it as
TVM's default pipeline lowered it, which is how its record was measured
(``tuning.measure.build_candidate``). Measured on the Intel Emerald Rapids: a tuned 1x1
convolution of MobileNetV3-Large whose record read 0.084 ms took 0.46-0.53 ms with its 10.7 KB
accumulator tile moved to the stack; the whole model with its channel-last records went from
8.8 to 7.4 ms built as measured (one process, interleaved)."""

from __future__ import annotations

import tvm

AS_MEASURED = "tvm_pool.as_measured"  # a PrimFunc attribute (see the module docstring)


def register_after_default(name: str, passes: list) -> str:
    """Register (once) TVM's default TIR pipeline followed by ``passes`` under ``name``, before
    the host and device finalization; returns ``name``."""
    from tvm.tirx import compilation_pipeline  # pylint: disable=import-outside-toplevel

    if name not in compilation_pipeline.PIPELINE_MAP:
        def factory():
            pipeline, finalize_host, finalize_device = compilation_pipeline.get_tir_pipeline("default")
            return tvm.transform.Sequential([pipeline, _except_as_measured(passes)]), finalize_host, finalize_device

        compilation_pipeline.register_tir_pipeline(name, factory)
    return name


def as_measured(func) -> bool:
    """Whether the PrimFunc ``func`` is built as its tuning record was measured (:data:`AS_MEASURED`)."""
    return bool(func.attrs is not None and func.attrs.get(AS_MEASURED, False))


def _except_as_measured(passes: list) -> tvm.transform.Pass:
    """``passes`` over the PrimFuncs of a module that are not :func:`as_measured`."""
    sequence = tvm.transform.Sequential(passes)

    @tvm.transform.module_pass(opt_level=0, name="tvm_pool.LoweringPasses")
    def _run(mod, _ctx):
        kept = {gv.name_hint: (gv, func) for gv, func in mod.functions_items()
                if isinstance(func, tvm.tirx.PrimFunc) and as_measured(func)}
        if not kept:
            return sequence(mod)
        rest = tvm.IRModule({gv: func for gv, func in mod.functions_items() if gv.name_hint not in kept},
                            attrs=mod.attrs)
        return tvm.IRModule({**dict(sequence(rest).functions_items()), **dict(kept.values())}, attrs=mod.attrs)

    return _run
