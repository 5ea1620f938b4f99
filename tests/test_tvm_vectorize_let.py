"""Why tvm_pool's CPU schedules do not TVM-vectorise the (value, index) reduction of MaxPool
with Indices (issue 23's vectorised argmax): TVM 0.27's VectorizeLoop scalarises a loop whose
body calls isnan (or if_then_else on a vector condition), and in doing so it hoists the
reduction's let-bound (value, index) pair out of the scalar loops it makes, then stores a
fresh, undefined variable (the results are whatever the registers held: wrong here, and right
by chance in one CI run, so the first test reads the lowered code, not the numbers). These
tests pin the behaviour: the first fails once TVM is fixed (then the vectorised argmax can use
it); the second shows the same reduction vectorised and right without isnan (integer inputs),
so it is the scalarisation, not the schedule."""

import numpy as np
import tvm
from tvm import s_tir, te, tirx

from tvm_pool import compute


def _schedule(dtype: str):
    x = te.placeholder((1, 1, 8, 16), dtype, name="x")
    outs = compute.max_pool(x, [1, 3], [1, 2], return_indices=True)
    func = te.create_prim_func([x, *outs])
    sch = s_tir.Schedule(func)
    block = sch.get_child_blocks(sch.get_sblock("root"))[-1]
    _, _, _, col, r0, r1 = sch.get_loops(block)
    tile, lane = sch.split(col, [None, 7])
    sch.reorder(tile, r0, r1, lane)
    for stage in [sch.cache_write(block, i, "local") for i in (0, 1)]:
        sch.reverse_compute_at(stage, tile)
    sch.vectorize(lane)
    sch.decompose_reduction(block, r0)
    return func, sch


def _lowered(dtype: str) -> str:
    """The scheduled argmax through TVM's lowering up to and including VectorizeLoop."""
    _, sch = _schedule(dtype)
    passes = [s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
              s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
              s_tir.transform.LowerOpaqueBlock(), tirx.transform.FlattenBuffer(), tirx.transform.VectorizeLoop(True)]
    return tvm.transform.Sequential(passes)(sch.mod)["main"].script()


def _vectorised_argmax(dtype: str):
    func, sch = _schedule(dtype)
    data = (np.random.default_rng(0).random((1, 1, 8, 16)) * 4).astype(dtype)
    results = []
    for mod in (sch.mod, tvm.IRModule({"main": func})):
        lib = tvm.compile(mod, target="llvm")
        lib = lib.mod if hasattr(lib, "mod") else lib
        args = [tvm.runtime.tensor(data), tvm.runtime.tensor(np.zeros((1, 1, 8, 7), dtype)),
                tvm.runtime.tensor(np.zeros((1, 1, 8, 7), "int64"))]
        lib["main"](*args)
        results.append([a.numpy() for a in args[1:]])
    return results


def test_tvm_vectorize_loop_still_breaks_a_float_argmax():
    text = _lowered("float32")
    assert "v_max_pool_v0 = T.float32()" in text and "T.let[T.float32x7]" not in text, (
        "TVM's VectorizeLoop now keeps let-bound values when it scalarises isnan: "
        "the argmax can be TVM-vectorised (issue 23)")


def test_the_same_argmax_vectorises_correctly_without_isnan():
    assert "T.let[T.int32x7]" in _lowered("int32")
    (vec_values, vec_index), (values, index) = _vectorised_argmax("int32")
    np.testing.assert_array_equal(vec_values, values)
    np.testing.assert_array_equal(vec_index, index)
