"""Strided vector loads as one contiguous load and a shuffle (lowering for CPUs without gathers).

A TVM-vectorised tap of a strided window reads ``buf[Ramp(base, s, n)]``: every s-th element.
TVM's LLVM codegen scalarises such a load (n scalar loads and lane inserts). NEON has no gather,
but it has de-interleaving loads (LD2/LD3/LD4): LLVM's InterleavedAccess pass makes one from a
contiguous ``<s*n>`` load whose lanes are picked with stride s by a shufflevector. This pass
rewrites each such load into that form, after TVM's lowering pipeline (the loads are final
there):

    buf[Ramp(base, s, n)]  ->  Shuffle(buf[Ramp(base - r, 1, s * n)], [r, r + s, ..., r + s(n-1)])

The contiguous load reads up to s - 1 elements the strided one skips, so it is made only where
it provably stays inside the buffer (loop ranges and let bindings known to the arithmetic
analyser); anything else is left as it is. ``r`` is the base's residue modulo s where that is
known, so the taps of one window (base, base + 1, ...) share one load, which LLVM turns into one
LD2/LD3 whose registers are the taps. ResNet's 3x3 s2 p1 max over 64x112x112 (cortex-a72
target, one thread, emulated, ``bench/arm_instructions.py``): with the stride-2 pass row
TVM-vectorised through this rewrite instead of left to LLVM's loop vectoriser (unaligned loads,
UZP shuffles and a scalar tail), 4.88 -> 3.83 instructions per output.

It runs after TVM's TIR pipeline (:func:`register_pipeline`), chosen per target by
``tvm_pool.schedules.tir_pipeline`` for CPU families with ``deinterleaving_loads`` (aarch64).
The expression mutator is tvm_ffi's ``structural_map``.
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

__all__ = ["rewrite_function", "strided_loads_pass", "register_pipeline", "MAX_STRIDE"]

# LLVM's AArch64 InterleavedAccess lowering handles factors 2-4 (LD2/LD3/LD4).
MAX_STRIDE = 4


def _flat_size(buffer):
    size = 1
    for dim in buffer.shape:
        if not isinstance(dim, tirx.IntImm):
            return None
        size *= int(dim)
    return size


def _is_int(expr) -> bool:
    ty = getattr(expr, "ty", None)  # a PrimType for scalar expressions, else a pointer/buffer type
    return isinstance(ty, tvm.ir.PrimType) and str(ty).startswith(("int", "uint"))


def _scope(func) -> tvm.sym.Analyzer:
    """An analyser that knows every loop's range and every let binding of ``func``."""
    analyzer = tvm.sym.Analyzer()

    def visit(node):
        if isinstance(node, tirx.For):
            analyzer.bind(node.loop_var, tvm.ir.Range.from_min_extent(node.min, node.extent))
        elif isinstance(node, (tirx.Bind, tirx.LetStmt)) and _is_int(node.value):
            analyzer.bind(node.var, node.value)

    tvm_ffi.structural_walk(func, visit, order="pre")
    return analyzer


def _rewrite_load(load, analyzer):
    if len(load.indices) != 1 or not isinstance(load.indices[0], tirx.Ramp):
        return load
    ramp = load.indices[0]
    stride, lanes = ramp.stride, int(ramp.lanes)
    if not isinstance(stride, tirx.IntImm) or not 2 <= int(stride) <= MAX_STRIDE or lanes < 2:
        return load
    buffer = load.source
    size = _flat_size(buffer)
    if size is None:
        return load
    s, base = int(stride), ramp.base
    mod = analyzer.modular_set(base)
    first = int(mod.base) % s if int(mod.coeff) % s == 0 else 0
    for r in [first] + [r for r in range(s) if r != first]:
        start = base - r if r else base
        if analyzer.can_prove(start >= 0) and analyzer.can_prove(start + s * lanes <= size):
            wide = tirx.BufferLoad(buffer, [tirx.Ramp(start, 1, s * lanes)])
            picked = [tirx.IntImm("int32", r + s * i) for i in range(lanes)]
            return tirx.Shuffle([wide], picked)
    return load


def rewrite_function(func):
    """``func`` with its provably in-bounds strided vector loads as contiguous loads + shuffles."""
    analyzer = _scope(func)
    return tvm_ffi.structural_map(func, (type(_probe_load()), lambda load: _rewrite_load(load, analyzer)))


def _probe_load():
    buf = tirx.decl_buffer((1,), "float32", name="probe")
    return tirx.BufferLoad(buf, [tirx.IntImm("int32", 0)])


@tvm.transform.module_pass(opt_level=0, name="tvm_pool.StridedLoadsAsShuffles")
def strided_loads_pass(mod, _ctx):
    updates = {gv: rewrite_function(f) for gv, f in mod.functions_items() if isinstance(f, tirx.PrimFunc)}
    for gv, f in updates.items():
        mod[gv] = f
    return mod


PIPELINE = "tvm_pool.deinterleave"


def register_pipeline() -> str:
    """Register (once) TVM's default TIR pipeline followed by :func:`strided_loads_pass`, under
    the name returned; ``tvm.compile(..., tir_pipeline=NAME)`` uses it."""
    from tvm.tirx import compilation_pipeline  # pylint: disable=import-outside-toplevel

    if PIPELINE not in compilation_pipeline.PIPELINE_MAP:
        def factory():
            pipeline, finalize_host, finalize_device = compilation_pipeline.get_tir_pipeline("default")
            return tvm.transform.Sequential([pipeline, strided_loads_pass]), finalize_host, finalize_device

        compilation_pipeline.register_tir_pipeline(PIPELINE, factory)
    return PIPELINE
