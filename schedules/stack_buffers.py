"""Small scratch buffers of CPU functions on the stack (lowering for x86).

A schedule that copies each plane (a padded copy, the short-rows layout) allocates the copy
inside the parallel loop over planes. TVM's LowerTVMBuiltin puts a constant-size buffer on the
stack only below 1024 bytes; anything larger becomes a ``TVMBackendAllocWorkspace`` /
``TVMBackendFreeWorkspace`` pair per plane. GoogLeNet's 3x3 s1 p1 max over 14x14 planes copies
16x16 floats, exactly 1024 bytes: 3,840 allocations per call at batch 8, and two threads ran
slower than one (x86, AVX-512: 0.32 ms at 2 threads, 0.25 ms at 1; stock TVM 0.31 ms).

This pass marks such buffers up to ``limit`` bytes ``disable_lower_builtin``: LowerTVMBuiltin
leaves them alone and TVM's LLVM codegen allocates them once, at the entry of the parallel
loop's body function (one per thread). Measured at 2 threads, interleaved with the workspace
version: 8x480x14x14 3x3 s1 p1 max 0.32 -> 0.25 ms, 1x480x14x14 0.045 -> 0.035 ms, Inception's
3x3 s1 p1 averages 1x768x17x17 0.089 -> 0.069 ms and 1x192x35x35 0.069 -> 0.064 ms.

It runs after TVM's TIR pipeline and before its host finalization (where LowerTVMBuiltin is),
chosen per target by ``tvm_pool.schedules.tir_pipeline`` for CPU families whose
``stack_buffer_bytes`` is set (:class:`.cpu_config.CpuConfig`). It leaves alone the kernels a
non-pooling tuning record scheduled (:mod:`.pipelines`, ``AS_MEASURED``): their records were
measured with TVM's workspace buffers, and on the stack LLVM may split a tuned convolution's
accumulator tile into registers and spill them (MobileNetV3-Large's 1x1 convolution, 0.084 ms as
measured, took 0.46-0.53 ms).
"""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

__all__ = ["stack_buffers_pass", "DISABLE_LOWER_BUILTIN"]

DISABLE_LOWER_BUILTIN = "disable_lower_builtin"  # TVM's tirx::transform::kDisableLowerTVMBuiltin


def _constant_bytes(buffer) -> int | None:
    size = 1
    for dim in buffer.shape:
        if not isinstance(dim, tirx.IntImm):
            return None
        size *= int(dim)
    dtype = tvm.runtime.DataType(str(buffer.dtype))
    return size * ((dtype.bits * dtype.lanes + 7) // 8)


def _on_stack(limit: int):
    def rewrite(node):
        buffer = node.buffer
        size = _constant_bytes(buffer)
        if size is None or size > limit or buffer.scope() != "global":
            return node
        annotations = dict(node.annotations) if node.annotations is not None else {}
        if DISABLE_LOWER_BUILTIN in annotations:
            return node
        annotations[DISABLE_LOWER_BUILTIN] = tirx.IntImm("bool", 1)
        return tirx.AllocBuffer(buffer, annotations)

    return rewrite


def stack_buffers_pass(limit: int) -> tvm.transform.Pass:
    """A pass putting every constant-size global scratch buffer of at most ``limit`` bytes of
    each PrimFunc on the stack (see the module docstring)."""
    rewrite = _on_stack(limit)

    def _pass(func, _mod, _ctx):
        return tvm_ffi.structural_map(func, (tirx.AllocBuffer, rewrite))

    return tirx.transform.prim_func_pass(_pass, opt_level=0, name="tvm_pool.StackBuffers")
