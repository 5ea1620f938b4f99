"""Facts about a scheduled CUDA function, from TVM's own lowering: the shared memory a block
allocates (:func:`shared_bytes`, the rule's shared-memory limit) and every vector access with
whether it is provably aligned (:func:`vector_accesses`, the rule's alignment proof). The tests
and the benchmark report them too."""

from __future__ import annotations

import tvm
import tvm_ffi
from tvm import s_tir, sym, tirx

from . import analysis


def buf_type(buf):
    """The buffer type of a buffer (0.27's Var with the buffer's shape as its ``ty``)."""
    return buf.ty if hasattr(buf, "ty") and hasattr(buf.ty, "shape") else buf


def elem_bytes(ty) -> int:
    return max(tvm.runtime.DataType(str(ty.dtype)).bits // 8, 1)


def _scope(buf) -> str:
    if hasattr(buf, "scope"):
        return str(buf.scope())
    return str(getattr(buf_type(buf), "storage_scope", "global") or "global")


def _compacted(func: tirx.PrimFunc, *then) -> tvm.IRModule:
    """``func`` through TVM's lowering up to buffer compaction (the per-block regions that
    allocations and indices then have), then the passes ``then``."""
    passes = [
        s_tir.transform.LowerCrossThreadReduction(),
        s_tir.transform.LowerInitBlock(),
        s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
        s_tir.transform.ConvertBlocksToOpaque(),
        s_tir.transform.CompactBufferAllocation(),
    ]
    return tvm.transform.Sequential(passes + list(then))(tvm.IRModule({"main": func}))


def shared_bytes(func: tirx.PrimFunc) -> int:
    """Shared memory per block the scheduled ``func`` allocates (after TVM compacts buffers)."""
    mod = _compacted(func)
    total = 0

    def visit(node):
        nonlocal total
        for buf in node.alloc_buffers:
            ty = buf_type(buf)
            if _scope(buf).startswith("shared"):
                n = analysis.product([int(d) if isinstance(d, tirx.IntImm) else None for d in ty.shape])
                total += (n or 1 << 30) * elem_bytes(ty)

    tvm_ffi.structural_walk(mod["main"].body, [(s_tir.SBlock, visit)], order="post")
    return total


def flattened(func: tirx.PrimFunc) -> tvm.IRModule:
    """The scheduled ``func`` as TVM lowers it up to flat buffers and vectorized loops (thread
    bindings as ``thread_extent`` attributes): what :func:`vector_accesses` and the tests'
    coalescing check read."""
    # (simplified before flattening, as TVM's own pipeline does: FlattenBuffer divides by zero
    # on some compacted int64 indices left unsimplified, e.g. a channel-last thread per plane)
    return _compacted(func, tirx.transform.StmtSimplify(), s_tir.transform.LowerOpaqueBlock(),
                      tirx.transform.FlattenBuffer(), tirx.transform.StmtSimplify(), tirx.transform.VectorizeLoop(True))


def vector_accesses(func: tirx.PrimFunc) -> list[tuple[str, int, bool]]:
    """Every vector load and store of the scheduled ``func`` once TVM has flattened its buffers
    and vectorized its loops: (buffer, lanes, whether the access is provably aligned to its
    width). Aligned: a unit-stride ramp whose first element index is a multiple of ``lanes``
    (TVM's modular-set analysis, over every value the thread and loop variables can take), in a
    buffer that starts aligned to the access (a parameter at offset 0 of a ``data_alignment``
    allocation, or a local/shared array, which TVM declares ``alignas(64)``)."""
    mod = flattened(func)
    ana = sym.Analyzer()
    found = []

    def check(buf, indices):
        if len(indices) != 1 or not isinstance(indices[0], tirx.Ramp):
            return
        ramp = indices[0]
        lanes = int(ramp.lanes)
        ty = buf_type(buf)
        size = elem_bytes(ty)
        base = ana.modular_set(ramp.base)
        aligned = (
            isinstance(ramp.stride, tirx.IntImm) and int(ramp.stride) == 1
            and base.coeff % lanes == 0 and base.base % lanes == 0
            and int(getattr(ty, "data_alignment", 0) or 0) % (lanes * size) == 0
            and isinstance(ty.elem_offset, tirx.IntImm) and int(ty.elem_offset) == 0
        )
        found.append((str(buf.name), lanes, bool(aligned)))

    tvm_ffi.structural_walk(
        mod["main"].body,
        [(tvm.ir.TensorLoad, lambda n: check(n.source, list(n.indices))),  # 0.27's BufferLoad
         (tirx.BufferStore, lambda n: check(n.buffer, list(n.indices)))],
        order="post",
    )
    return found


def all_aligned(func: tirx.PrimFunc) -> bool:
    """Whether every vector access of the scheduled ``func`` is provably aligned."""
    return all(aligned for _, _, aligned in vector_accesses(func))
