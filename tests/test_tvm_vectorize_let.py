"""Why tvm_pool's MaxPool with Indices reduces packed int64 keys (``compute.argmax``) instead
of TVM-vectorising its (value, index) reduction, which it keeps for symbolic sizes and 64-bit
types only (unvectorised). The reduction's combiner is a let-bound
(value, index) pair. TVM 0.27's VectorizeLoop vectorises it, and right, when every op in the
body is vectorisable (tvm_pool marks isnan so, ``schedules.cpu``); but a window that reaches
into the padding reads through ``if_then_else`` on a per-lane condition, which makes
VectorizeLoop scalarise the loop, and in doing so it hoists the let-bound pair out of the
scalar loops it makes and stores a fresh, undefined variable: silently wrong results. So a
vectorised argmax must keep the padding out of its vector loops (interior columns, or a padded
copy first). The first test fails once TVM is fixed; the second is the way that works now."""

import numpy as np
import tvm
from tvm import s_tir, te, tirx

import tvm_pool.schedules  # noqa: F401  (marks tirx.isnan vectorisable, as compile does)
from tvm_pool.compute import argmax
from tvm_pool.compute.windows import windows_for


def _schedule(pads, lanes: int):
    x = te.placeholder((1, 1, 8, 16), "float32", name="x")
    outs = argmax._argmax_reduction(x, windows_for(x, [1, 3], [1, 2], pads=pads), "first", True)
    func = te.create_prim_func([x, *outs])
    sch = s_tir.Schedule(func)
    block = sch.get_child_blocks(sch.get_sblock("root"))[-1]
    _, _, _, col, r0, r1 = sch.get_loops(block)
    tile, lane = sch.split(col, [None, lanes])
    sch.reorder(tile, r0, r1, lane)
    for stage in [sch.cache_write(block, i, "local") for i in (0, 1)]:
        sch.reverse_compute_at(stage, tile)
    sch.vectorize(lane)
    sch.decompose_reduction(block, r0)
    return func, sch


def _lowered(sch) -> str:
    """The scheduled argmax through TVM's lowering up to and including VectorizeLoop."""
    passes = [s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
              s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
              s_tir.transform.LowerOpaqueBlock(), tirx.transform.FlattenBuffer(), tirx.transform.VectorizeLoop(True)]
    return tvm.transform.Sequential(passes)(sch.mod)["main"].script()


def test_tvm_vectorize_loop_still_breaks_an_argmax_that_reads_padding():
    _, sch = _schedule([0, 1, 0, 1], 8)
    text = _lowered(sch)
    assert "v_max_pool_v0 = T.float32()" in text, (
        "TVM's VectorizeLoop now keeps let-bound values when it scalarises a loop: the argmax can be "
        "TVM-vectorised over padded windows too (issue 23)")


def test_an_argmax_without_padding_vectorises_and_is_right():
    func, sch = _schedule([0, 0, 0, 0], 7)
    assert "T.let[T.float32x7]" in _lowered(sch)
    data = np.random.default_rng(0).integers(0, 4, (1, 1, 8, 16)).astype("float32")  # ties
    data[0, 0, 2, 5] = np.nan
    results = []
    for mod in (sch.mod, tvm.IRModule({"main": func})):
        lib = tvm.compile(mod, target="llvm")
        lib = lib.mod if hasattr(lib, "mod") else lib
        args = [tvm.runtime.tensor(data), tvm.runtime.tensor(np.zeros((1, 1, 8, 7), "float32")),
                tvm.runtime.tensor(np.zeros((1, 1, 8, 7), "int64"))]
        lib["main"](*args)
        results.append([a.numpy() for a in args[1:]])
    (vec_values, vec_index), (values, index) = results
    np.testing.assert_array_equal(vec_values, values)
    np.testing.assert_array_equal(vec_index, index)
