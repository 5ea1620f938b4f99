"""The CUDA schedule of channel-last pools (NWC / NHWC / NDHWC; schedules/cuda_channel_last.py),
verified without a GPU as the channel-first one is (test_schedules_cuda.py):

1. Simulation (``cuda.Pool(simulate=True)``: every thread-bound loop serial, built for this CPU,
   every access bounds-checked, no block writing outside its buffer), equal to the unscheduled
   compute bit for bit, NaN included (tap-group sums to rounding): every op (max with indices,
   average, Lp, global, adaptive avg/max, TensorRT blend), ranks 1-3, float32/float16/int8
   (and bfloat16/uint8), C = 1 to 160 (small, chunked, not whole 16-byte pieces), a symbolic
   batch; and fused graphs (a producer, Add with a branch, Concat along C or rows, the result
   used twice, a pool of a pool, another output layout), through TVM's own channel-last Relax
   pools and tvm_pool's ops, and random ones.
2. CUDA builds: real-network layers for sm_80 by default, every case for sm_75 / sm_80 / sm_90
   with -m slow: every kernel passes VerifyGPUCode, no block writes outside its buffer, shared
   memory within the limit, and ptxas -v shows no spills and no stack frame.
3. Launch shapes of the real-network layers: whole warps per block, at most one thread per
   output (tap-group reductions: one per group), the minimum DRAM bytes (one kernel), and
   threads over C: each warp's global access touches the fewest 32-byte sectors (read from the
   lowered kernels; the check is shown to catch a warp reading across a plane); 16-byte loads
   (ld.global.nc.v4 in the PTX) exactly where C is whole pieces, every vector access provably
   aligned.
4. The design space (every knob of ``Pool.knobs()``) on every channel-last form, -m slow.
5. The GPU benchmark's channel-last rows (bench/cuda.py) on their CPU-only paths.
6. On a GPU (``gpu``-marked, skipped without one): every case against the unscheduled CPU
   build, and the benchmark's channel-last rows.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, s_tir, sym, te, tirx

import cuda_checks as cc
from helpers import needs_gpu
import tvm_pool
from tvm_pool import compute
from tvm_pool.schedules import cuda, cuda_channel_last
from tvm_pool.schedules.cuda_verify import buf_type, elem_bytes, flattened

SM80 = {"kind": "cuda", "arch": "sm_80"}
LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}


# ---------------------------------------------------------------------------------------------
# Channel-last pools as Relax functions (tvm_pool's computes, emitted with a layout)
# ---------------------------------------------------------------------------------------------


def _te(fn, *args, rank, name, **kwargs):
    return lambda bb, x: bb.emit_te(fn, x, *args, layout=LAST[rank], primfunc_name_hint=f"tvm_pool_{name}", **kwargs)


def maxp(k, s=None, p=None, d=None, ceil=False, **kw):
    return _te(compute.max_pool, list(k), s, d, p, "NOTSET", ceil, rank=len(k), name="max_pool", **kw)


def avgp(k, s=None, p=None, d=None, ceil=False, cip=False):
    return _te(compute.avg_pool, list(k), s, d, p, "NOTSET", ceil, rank=len(k), name="avg_pool",
               count_include_pad=cip)


def lpp(k, s=None, p=None, pw=2.0):
    return _te(compute.lp_pool, list(k), s, None, p, rank=len(k), name="lp_pool", p=pw)


def glob(kind, rank=2):
    return _te(compute.global_pool, kind, rank=rank, name=f"global_{kind}_pool")


def adaptive_avg(size):
    return _te(compute.adaptive_avg_pool, list(size), rank=len(size), name="adaptive_avg_pool")


def adaptive_max(size, index_dtype="int64"):
    return _te(compute.adaptive_max_pool, list(size), rank=len(size), name="adaptive_max_pool",
               index_dtype=index_dtype)


def trt(kind, k, s, pre, post, mode="EXPLICIT_ROUND_DOWN", blend=0.0, excl=True):
    return _te(compute.tensorrt_pool, kind, list(k), s, pre, post, mode, blend, excl, rank=len(k), name="trt_pool")


module = cc.module


def inputs_for(mod, seed=0, nan=True):
    """cuda_checks.inputs_for, with NaNs by default (every channel-last case tests them)."""
    return cc.inputs_for(mod, seed, nan)


def check_simulation(mod, exact, nan=True):
    """The simulated schedule (cuda_checks.simulate) against the unscheduled build; ``exact``
    per output (False: a sum across threads, to rounding)."""
    xs = inputs_for(mod, nan=nan)
    want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
    got = cc.run_cpu(cc.simulate(mod), *xs)
    exact = list(exact) if isinstance(exact, (list, tuple)) else [exact] * len(want)
    assert len(got) == len(want) == len(exact)
    for i, (g, w, e) in enumerate(zip(got, want, exact)):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        if e or g.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
        else:
            tol = 2e-3 if g.dtype == np.float16 else 2e-6
            np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=tol, atol=tol,
                                       err_msg=f"output {i}")


# (id, shape [N, *spatial, C], dtype, emit, exact): every op and its edge geometries, channel-last.
# ``exact`` False: sums across threads (a global average's tap groups) add in another order.
CASES = [
    ("max_3x3s2_staged", [1, 20, 20, 8], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1]), True),
    ("max_3x3s2_c3", [1, 20, 19, 3], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1]), True),
    ("max_3x3s1_c96_chunks", [1, 9, 10, 96], "float32", maxp([3, 3], [1, 1], [1, 1, 1, 1]), True),
    ("max_3x3s1_c100_misaligned_chunks", [1, 6, 7, 100], "float32", maxp([3, 3], [1, 1], [1, 1, 1, 1]), True),
    ("max_ceil", [1, 14, 13, 4], "float32", maxp([3, 3], [2, 2], [0, 0, 0, 0], ceil=True), True),
    ("max_2x2s2_vector", [1, 16, 16, 8], "float32", maxp([2, 2], [2, 2]), True),
    ("max_dilated_asym", [2, 13, 12, 3], "float32", maxp([3, 2], [2, 1], [1, 0, 2, 1], d=[2, 3], ceil=True), True),
    ("max_kernel_is_input", [1, 5, 7, 2], "float32", maxp([5, 7], [1, 1]), True),
    ("max_long_window", [1, 20, 20, 2], "float32", maxp([17, 3], [1, 2]), True),
    ("max_size1", [1, 1, 1, 1], "float32", maxp([1, 1], [1, 1]), True),
    ("max_1d_k4s4_vector", [2, 64, 8], "float32", maxp([4], [4]), True),
    ("max_1d_pad", [2, 17, 2], "float32", maxp([3], [2], [1, 1]), True),
    ("max_1d_long_pass_k32", [1, 100, 3], "float32", maxp([32], [1]), True),
    ("max_3d", [1, 6, 9, 9, 3], "float32", maxp([2, 3, 3], [1, 2, 2], [0, 1, 1, 1, 1, 1]), True),
    ("max_3d_all_axes", [1, 7, 8, 9, 2], "float32", maxp([3, 3, 3], [2, 1, 2], [1, 1, 1, 1, 1, 1]), True),
    ("max_3d_2x2x2_fp16", [1, 6, 8, 8, 8], "float16", maxp([2, 2, 2], [2, 2, 2]), True),
    ("avg_2x2s2_vector", [1, 16, 16, 8], "float32", avgp([2, 2], [2, 2]), True),
    ("avg_3x3s1_cip", [1, 10, 9, 5], "float32", avgp([3, 3], [1, 1], [1, 1, 1, 1], cip=True), True),
    ("avg_ceil_asym", [2, 12, 11, 4], "float32", avgp([3, 3], [2, 2], [1, 0, 2, 1], ceil=True), True),
    ("avg_window_in_padding", [1, 3, 3, 2], "float32", avgp([2, 2], [3, 3], [1, 1, 1, 1]), True),
    ("avg_1d_long_strided_k64", [1, 300, 2], "float32", avgp([64], [32]), True),
    ("avg_3d_ceil", [1, 6, 9, 9, 3], "float32", avgp([3, 3, 3], [2, 2, 2], [1, 1, 1, 1, 1, 1], ceil=True), True),
    ("lp1", [1, 9, 8, 4], "float32", lpp([3, 3], [2, 2], [1, 1, 1, 1], 1.0), True),
    ("lp2", [1, 9, 8, 4], "float32", lpp([3, 3], [2, 2], [1, 1, 1, 1], 2.0), False),  # fma contraction
    ("lp3", [1, 9, 8, 4], "float32", lpp([3, 3], [2, 2], [1, 1, 1, 1], 3.0), True),
    ("global_max_7x7", [2, 7, 7, 32], "float32", glob("max"), True),
    ("global_avg_7x7_c160_chunks", [1, 7, 7, 160], "float32", glob("avg"), True),
    ("global_lp_7x7", [1, 7, 7, 5], "float32", glob("lp"), True),
    ("global_avg_40x40_columns", [1, 40, 40, 9], "float32", glob("avg"), False),
    ("global_max_40x40_serial", [1, 40, 40, 5], "float32", glob("max"), True),
    ("global_lp_20x20_columns", [1, 20, 20, 3], "float32", glob("lp"), False),
    ("global_max_int8_32x32_columns", [1, 32, 32, 16], "int8", glob("max"), True),
    ("global_avg_1x1", [2, 1, 1, 5], "float32", glob("avg"), True),
    ("global_avg_1d", [1, 20, 3], "float32", glob("avg", rank=1), True),
    ("global_avg_3d", [1, 4, 9, 9, 4], "float32", glob("avg", rank=3), False),
    ("indices", [2, 9, 10, 3], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True), True),
    ("indices_2x2s2_vector", [1, 8, 16, 4], "float32", maxp([2, 2], [2, 2], return_indices=True), True),
    ("indices_plane_int32", [2, 9, 10, 3], "float32",
     maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True, index_scope="plane", index_dtype="int32"), True),
    ("indices_storage_order", [2, 9, 10, 3], "float32",
     maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True, storage_order=1), True),
    ("adaptive_avg", [1, 10, 7, 3], "float32", adaptive_avg([3, 4]), True),
    ("adaptive_avg_uniform_vector", [1, 12, 8, 8], "float32", adaptive_avg([3, 4]), True),
    ("adaptive_max_index", [1, 10, 7, 3], "float32", adaptive_max([3, 4]), True),
    ("adaptive_max_index_i32_3d", [1, 5, 6, 7, 2], "float32", adaptive_max([2, 3, 4], "int32"), True),
    ("adaptive_max_index_uniform_vector", [1, 8, 8, 4], "float32", adaptive_max([4, 4]), True),
    ("trt_max_caffe", [1, 10, 11, 3], "float32", trt("MAX", [3, 3], [2, 2], [1, 1], [1, 1], "CAFFE_ROUND_UP"), True),
    ("trt_avg_incl", [1, 10, 11, 3], "float32", trt("AVERAGE", [3, 3], [2, 2], [1, 1], [0, 1], excl=False), True),
    ("trt_blend", [1, 10, 11, 4], "float32", trt("MAX_AVERAGE_BLEND", [3, 3], [1, 1], [1, 1], [1, 1], blend=0.25), True),
    ("trt_blend_int8", [1, 10, 11, 16], "int8", trt("MAX_AVERAGE_BLEND", [2, 2], [2, 2], [0, 0], [0, 0], blend=0.5), True),
    ("trt_avg_int8_3d", [1, 5, 6, 7, 3], "int8", trt("AVERAGE", [2, 3, 3], [1, 2, 2], [0, 1, 1], [1, 1, 1]), True),
]


# ---------------------------------------------------------------------------------------------
# Coalescing, read from the lowered kernels
# ---------------------------------------------------------------------------------------------

SECTOR = 32  # bytes: the unit a warp's global access is served in


def _thread_vars(stmt) -> dict:
    """tag -> (the variables bound to it, its extent) in a flattened function (every kernel and
    every thread-bound loop of a kernel binds its own variable)."""
    found = {}

    def visit(node):
        if node.attr_key == "thread_extent":
            names, extent = found.get(str(node.node.thread_tag), (set(), 1))
            found[str(node.node.thread_tag)] = (names | {node.node.var.name}, max(extent, int(node.value)))

    tvm_ffi.structural_walk(stmt, [(tirx.AttrStmt, visit)], order="pre")
    return found


def _addresses(index, values: dict) -> list:
    """The element addresses ``index`` (a scalar or a Ramp) takes with ``values`` (by variable
    name) for its free variables; every other variable 0."""
    ana = sym.Analyzer()
    base, lanes = (index.base, int(index.lanes)) if isinstance(index, tirx.Ramp) else (index, 1)
    stride = int(index.stride) if isinstance(index, tirx.Ramp) else 0
    for var in tirx.analysis.undefined_vars(base, []):
        ana.bind(var, tirx.const(values.get(var.name, 0), str(var.ty)))
    start = ana.simplify(base)
    if not isinstance(start, tirx.IntImm):
        return []
    return [int(start) + k * stride for k in range(lanes)]


def _warp(threads: dict) -> list:
    """The variable values of the first warp's 32 threads (threadIdx.x fastest, then .y)."""
    xs, nx = threads.get("threadIdx.x", (set(), 1))
    ys, ny = threads.get("threadIdx.y", (set(), 1))
    warp = []
    for t in range(min(32, nx * ny)):
        values = dict.fromkeys(xs, t % nx)
        values.update(dict.fromkeys(ys, t // nx % ny))
        warp.append(values)
    return warp


def warp_sectors(func) -> list:
    """For every global load and store of the scheduled ``func``: (buffer, the 32-byte sectors
    the first warp of block 0 touches with one instruction, the fewest its bytes could fill),
    every loop at its first iteration. A coalesced access touches about the fewest."""
    mod = flattened(func)
    warp = _warp(_thread_vars(mod["main"].body))
    rows = []

    def check(buf, indices):
        if len(indices) != 1 or str(getattr(buf_type(buf), "storage_scope", "global") or "global") != "global":
            return
        size = elem_bytes(buf_type(buf))
        addresses = {a for values in warp for a in _addresses(indices[0], values)}
        if addresses:
            rows.append((str(buf.name), len({a * size // SECTOR for a in addresses}),
                         -(-len(addresses) * size // SECTOR)))

    tvm_ffi.structural_walk(mod["main"].body, [(tvm.ir.TensorLoad, lambda n: check(n.source, list(n.indices))),
                                               (tirx.BufferStore, lambda n: check(n.buffer, list(n.indices)))],
                            order="post")
    return rows


# ---------------------------------------------------------------------------------------------
# Fused graphs: TVM's own channel-last Relax pools (legalized to tvm_pool's computes) and
# tvm_pool's ops, with producers and consumers that FuseOps puts in the pool's PrimFunc
# ---------------------------------------------------------------------------------------------


def nn_pool(kind, k, s=None, p=None, d=None, ceil=False, cip=False, out_layout=None):
    """TVM's ``relax.op.nn.{max,avg}_pool{1,2,3}d`` in the channel-last layout."""
    rank = len(k)
    s, d, p = s or [1] * rank, d or [1] * rank, p or [0] * rank
    fn = getattr(relax.op.nn, f"{kind}_pool{rank}d")
    return lambda bb, x: bb.emit(fn(x, k, s, p + p, d, ceil, cip, layout=LAST[rank], out_layout=out_layout))


def nn_adaptive_avg(size):
    return lambda bb, x: bb.emit(relax.op.nn.adaptive_avg_pool2d(x, size, layout="NHWC"))


def values_of(emit):
    """The values of a pool with indices (its first output)."""
    return lambda bb, x: bb.emit(relax.TupleGetItem(emit(bb, x), 0))


def bias(c):
    """x + a per-channel constant (channel-last: broadcast along the last axis)."""
    return lambda x: relax.op.add(x, relax.const(np.linspace(-1, 1, c).astype("float32")))


def two_uses(y, b):
    return relax.op.concat([relax.op.nn.relu(y), relax.op.add(y, b)], axis=-1)


# (id, shape, emit, epilogue, prologue, branch): relu or a bias before, relu after, Add with a
# branch, Concat (along C or along rows; never attached to the pool's loops), the pool's result
# used twice, a pool of the pool, another output layout (a transpose), and tvm_pool's own ops.
FUSED = [
    ("relu_before_max", [1, 14, 14, 8], nn_pool("max", [3, 3], [2, 2], [1, 1]), None, relax.op.nn.relu, False),
    ("bias_avg_relu", [1, 14, 14, 8], nn_pool("avg", [3, 3], [1, 1], [1, 1]), relax.op.nn.relu, bias(8), False),
    ("max_add_branch", [1, 14, 14, 8], nn_pool("max", [3, 3], [2, 2], [1, 1]), relax.op.add, relax.op.nn.relu, True),
    ("avg_2x2_add_branch", [1, 16, 16, 8], nn_pool("avg", [2, 2], [2, 2]), relax.op.add, None, True),
    ("max_concat_channels", [1, 14, 14, 8], nn_pool("max", [3, 3], [2, 2], [1, 1]),
     lambda y, b: relax.op.concat([y, b], axis=3), None, True),
    ("avg_concat_rows", [1, 14, 14, 3], nn_pool("avg", [3, 3], [1, 1], [1, 1], cip=True),
     lambda y, b: relax.op.concat([b, y], axis=1), None, True),
    ("max_used_twice", [1, 14, 14, 8], nn_pool("max", [3, 3], [2, 2], [1, 1]), two_uses, None, True),
    ("max_2x2_used_twice", [1, 16, 16, 8], nn_pool("max", [2, 2], [2, 2]), two_uses, bias(8), True),
    # a piece of channels per thread, the bias after it loaded in pieces (store_pieces)
    ("relu_max_2x2_bias", [1, 16, 16, 8], nn_pool("max", [2, 2], [2, 2]), bias(8), relax.op.nn.relu, False),
    ("pool_of_pool", [1, 16, 16, 8], nn_pool("max", [3, 3], [1, 1], [1, 1]),
     lambda y: relax.op.nn.max_pool2d(y, [2, 2], [2, 2], layout="NHWC"), None, False),
    ("max_out_layout_nchw", [1, 14, 14, 8], nn_pool("max", [3, 3], [2, 2], [1, 1], out_layout="NCHW"),
     relax.op.nn.relu, None, False),
    ("max_1d_relu", [2, 30, 8], nn_pool("max", [3], [2], [1]), relax.op.nn.relu, relax.op.nn.relu, False),
    ("avg_3d_add_branch", [1, 6, 8, 8, 4], nn_pool("avg", [2, 3, 3], [1, 2, 2], [0, 1, 1]), relax.op.add, None, True),
    ("adaptive_avg_relu", [1, 13, 13, 8], nn_adaptive_avg([6, 6]), relax.op.nn.relu, None, False),
    ("global_avg_add", [1, 7, 7, 16], glob("avg"), relax.op.add, None, True),
    ("global_avg_large_relu", [1, 24, 24, 8], glob("avg"), relax.op.nn.relu, relax.op.nn.relu, False),
    ("indices_values_relu", [1, 14, 14, 8], values_of(maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True)),
     relax.op.nn.relu, None, False),
    ("lp_add_branch", [1, 9, 8, 4], lpp([3, 3], [2, 2], [1, 1, 1, 1], 2.0), relax.op.add, None, True),
    ("trt_blend_relu", [1, 10, 11, 4], trt("MAX_AVERAGE_BLEND", [3, 3], [2, 2], [1, 1], [1, 1], blend=0.25),
     relax.op.nn.relu, relax.op.nn.relu, False),
]


def fused_module(cases, dtype="float32"):
    """One Relax function with every ``(shape, emit, epilogue, prologue, branch)`` case."""
    bb = relax.BlockBuilder()
    params, outs = [], []
    with bb.function("main"):
        with bb.dataflow():
            for i, (shape, emit, epilogue, prologue, branch) in enumerate(cases):
                x = relax.Var(f"x{i}", relax.TensorType(shape, dtype))
                params.append(x)
                y = emit(bb, bb.emit(prologue(x)) if prologue else x)
                if epilogue is not None and branch:
                    b = relax.Var(f"b{i}", relax.TensorType([int(d) for d in y.ty.shape.values], dtype))
                    params.append(b)
                    y = bb.emit(epilogue(y, b))
                elif epilogue is not None:
                    y = bb.emit(epilogue(y))
                outs.append(y)
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out, params=params)
    return bb.get()


def check_fused(mod):
    """Every fused PrimFunc of ``mod`` the CUDA rule takes: simulated (checked: no write outside
    a buffer), built alone for this CPU with every access bounds-checked, equal to its
    unscheduled self (tests/primfunc_check.py); and the real schedule of each attaches no
    Concat to a pool's loops. Returns the functions checked."""
    from primfunc_check import check_pairs, lower_unscheduled  # pylint: disable=import-outside-toplevel

    lowered = lower_unscheduled(mod, "llvm")
    pairs, real = [], cc.CheckedPool()
    for gvar, func in lowered.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        sch = cc.CheckedPool(simulate=True).apply(func, tvm.target.Target({"kind": "llvm"}), False)
        if sch is None:
            continue
        pairs.append((gvar.name_hint, func, sch.mod["main"]))
        scheduled = real.apply(func, tvm.target.Target(SM80), False)
        assert scheduled is not None, gvar.name_hint
        concats = [n for n in _root_names(s_tir.Schedule(func)) if n.startswith("T_concat")]
        assert set(concats) <= set(_root_names(scheduled)), f"{gvar.name_hint}: a Concat attached to a pool"
    with cc.bounds_checked():
        report = check_pairs(pairs, "llvm")
    assert not report.mismatches, "\n".join(str(m) for m in report.mismatches)
    return report.checked


def _root_names(sch):
    from tvm_pool.schedules import analysis  # pylint: disable=import-outside-toplevel

    return [sch.get(rv).name_hint for rv in analysis.root_blocks(sch)]


# ---------------------------------------------------------------------------------------------
# 1. Simulation
# ---------------------------------------------------------------------------------------------

# Simulated by default: one case per form of the schedule (staged chain with 16-byte staging,
# small C, a pass loading pieces per thread, 1-D, 3-D float16, a window reduction loading a piece
# per tap, Lp, global: tap groups, serial and passes, int8, indices, adaptive, the TensorRT blend
# joining two reductions). Every case with -m slow (the argmax ones cost seconds each to build).
DEFAULT = {
    "max_3x3s2_staged", "max_3x3s2_c3", "max_2x2s2_vector", "max_1d_k4s4_vector", "max_3d_2x2x2_fp16",
    "avg_2x2s2_vector", "lp1", "global_avg_40x40_columns", "global_max_40x40_serial",
    "global_max_int8_32x32_columns", "global_max_7x7", "indices_2x2s2_vector", "adaptive_avg_uniform_vector",
    "adaptive_max_index_uniform_vector", "trt_blend", "trt_blend_int8",
}


def _outputs(case_id):
    return 2 if case_id.startswith("indices") or case_id.startswith("adaptive_max") else 1


@pytest.mark.parametrize("case", [pytest.param(c, marks=[] if c[0] in DEFAULT else [pytest.mark.slow]) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_simulation_ops(case):
    """Every op, scheduled with the rule simulated on the CPU (thread-bound loops serial, every
    buffer access bounds-checked, no block writing outside its buffer), equals the unscheduled
    compute: bit for bit, NaN included (tap-group sums to rounding)."""
    _, shape, dtype, emit, exact = case
    check_simulation(module(shape, dtype, emit), exact)


def dtype_cases(dtype):
    """Staged max, a piece of channels per thread, global max over passes and over taps (serial
    for floats, tap groups for integers); averages (passes, tap groups) for float types."""
    cases = [([2, 11, 13, 8], maxp([3, 3], [2, 2], [1, 1, 1, 1])), ([2, 12, 12, 16], maxp([2, 2], [2, 2])),
             ([1, 7, 7, 8], glob("max")), ([1, 33, 33, 8], glob("max"))]
    if dtype.startswith(("float", "bfloat")):
        cases += [([2, 11, 13, 8], avgp([3, 3], [1, 1], [1, 1, 1, 1])), ([1, 40, 40, 8], glob("avg"))]
    return [(shape, dtype, emit) for shape, emit in cases]


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int8", "uint8"])
def test_dtypes_simulated_and_built(dtype):
    """Every dtype through the forms: simulated equal to the unscheduled compute (the tap-group
    average to rounding), built for sm_80 (VerifyGPUCode; ptxas: no spills)."""
    cases = dtype_cases(dtype)
    mod = cc.batch_module(cases)
    xs = inputs_for(mod)
    want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
    got = cc.run_cpu(cc.simulate(mod), *xs)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = g.astype(np.float32), w.astype(np.float32)
        if i < 5:
            np.testing.assert_array_equal(g, w, err_msg=str(i))
        else:
            tol = 2e-2 if dtype == "bfloat16" else 2e-3
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=str(i))
    build = cc.cuda_build(mod, "sm_80")
    assert all(cc.verify_gpu(build).values())
    if cc.have_nvcc():
        assert not [r for r in cc.ptxas_report([build.source], archs=["sm_80"]) if r["spill_stores"] or r["stack"]]


def _dynamic_batch_module():
    bb = relax.BlockBuilder()
    n = tirx.Var("n", "int64")
    xs = [relax.Var("x0", relax.TensorType([n, 20, 20, 8], "float32")),
          relax.Var("x1", relax.TensorType([n, 16, 16, 8], "float32"))]
    with bb.function("main", xs):
        with bb.dataflow():
            outs = [maxp([3, 3], [2, 2], [1, 1, 1, 1])(bb, xs[0]), maxp([2, 2], [2, 2])(bb, xs[1])]
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.get()


def test_simulation_dynamic_batch():
    """A symbolic batch (N is a block loop of every channel-last tile): the staged chain and the
    16-byte pass are scheduled (as channel-first ones are, test_schedules_cuda.py), and equal the unscheduled
    compute."""
    mod = _dynamic_batch_module()
    xs = [cc.data([3, 20, 20, 8], "float32", nan=True), cc.data([3, 16, 16, 8], "float32", seed=1, nan=True)]
    want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
    for g, w in zip(cc.run_cpu(cc.simulate(mod), *xs), want):
        np.testing.assert_array_equal(g, w)
    funcs = [f for name, f in cc.scheduled_funcs(mod, SM80).items() if "tvm_pool" in name]
    assert len(funcs) == 2 and all('thread="blockIdx.x"' in f.script() for f in funcs)
    assert all(aligned for f in funcs for _, _, aligned in cuda.vector_accesses(f))


# Fused by default (the rest with -m slow): a producer, Add with a branch, Concat along C, the
# result used twice, a global average with Add, adaptive average with relu, a bias after.
DEFAULT_FUSED = {"relu_before_max", "max_add_branch", "max_concat_channels", "max_2x2_used_twice", "global_avg_add",
                 "adaptive_avg_relu", "relu_max_2x2_bias"}


@pytest.mark.parametrize("slow", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["default", "rest"])
def test_simulation_fused(slow):
    """Channel-last pools fused with producers and consumers (TVM's own Relax pools and
    tvm_pool's): every fused PrimFunc scheduled (simulated) equals its unscheduled self, and no
    Concat is attached to a pool's loops."""
    cases = [c for c in FUSED if (c[0] in DEFAULT_FUSED) != slow]
    checked = check_fused(fused_module([c[1:] for c in cases]))
    assert len(checked) >= len(cases) - 1, checked  # (a pool of a pool is one function)


def random_fused_case(seed):
    """A random channel-last graph around one of TVM's Relax pools: rank 1-3, C from 1 to 40,
    random window, stride, padding, dilation and ceil mode, a producer (none, relu, a bias) and
    a consumer (none, relu, Add with a branch, Concat along C, the result used twice, a pool of
    the pool)."""
    rng = np.random.default_rng(7000 + seed)
    rank = [1, 2, 2, 3][seed % 4]
    k = [int(v) for v in rng.integers(1, 4, rank)]
    s = [int(v) for v in rng.integers(1, 3, rank)]
    d = [int(v) for v in rng.integers(1, 3, rank)]
    p = [int(rng.integers(0, kk // 2 + 1)) for kk in k]
    c = int(rng.choice([1, 3, 4, 8, 12, 16, 40]))
    low = max((kk - 1) * dd + 1 for kk, dd in zip(k, d))
    shape = [int(rng.integers(1, 3))] + [int(v) for v in rng.integers(low, low + 9, rank)] + [c]
    kind = "max" if seed % 2 else "avg"
    emit = nn_pool(kind, k, s, p, d if kind == "max" else None, ceil=bool(rng.integers(0, 2)), cip=bool(seed % 3 == 0))
    prologue = [None, relax.op.nn.relu, bias(c)][int(rng.integers(0, 3))]
    epilogues = [(None, False), (relax.op.nn.relu, False), (relax.op.add, True), (two_uses, True),
                 (lambda y, b: relax.op.concat([y, b], axis=-1), True),
                 (lambda y: relax.op.nn.relu(_pool_again(y, rank)), False)]
    epilogue, branch = epilogues[int(rng.integers(0, len(epilogues)))]
    return shape, emit, epilogue, prologue, branch


def _pool_again(y, rank):
    """A 2-wide max pool (stride 1) of ``y``: a second pooling unit, not pointwise over the first.
    (A 1-tap pool would be, and is attached to the first unit's loops: the rule then declines
    the function, channel-first alike; TVM's own GPU rules schedule it.)"""
    spatial = [int(d) for d in y.ty.shape.values[1:-1]]
    return getattr(relax.op.nn, f"max_pool{rank}d")(y, [min(2, d) for d in spatial], layout=LAST[rank])


@pytest.mark.slow
@pytest.mark.parametrize("first", [0, 12])
def test_simulation_random_fused(first):
    """Random fused channel-last graphs: every fused PrimFunc, simulated, equals its
    unscheduled self."""
    cases = [random_fused_case(seed) for seed in range(first, first + 12)]
    assert len(check_fused(fused_module(cases))) >= 12


# ---------------------------------------------------------------------------------------------
# 2./3. CUDA builds, launch shapes, coalescing, 16-byte loads
# ---------------------------------------------------------------------------------------------

# Real-network channel-last layers (batch 1 unless said; every input shape distinct, which names
# each workload's PrimFunc in a batched build): one of every form at full size.
WORKLOADS = [
    ("resnet_maxpool", [1, 112, 112, 64], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1])),  # staged rows
    ("vgg_maxpool", [1, 224, 224, 64], "float32", maxp([2, 2], [2, 2])),  # a piece of channels per thread
    ("inception_avgpool", [1, 28, 28, 192], "float32", avgp([3, 3], [1, 1], [1, 1, 1, 1])),  # C in chunks
    ("resnet_gap_b8", [8, 7, 7, 2048], "float32", glob("avg")),  # passes over 1x1 planes
    ("gmp_b8", [8, 7, 7, 1024], "float32", glob("max")),
    ("se_gap", [1, 56, 56, 256], "float32", glob("avg")),  # tap groups, a cross-thread sum
    ("se_gmp", [1, 56, 56, 128], "float32", glob("max")),  # a thread per output (NaN max)
    ("video3d_maxpool", [1, 16, 56, 56, 64], "float32", maxp([1, 3, 3], [1, 2, 2], [0, 1, 1, 0, 1, 1])),
    ("tflite_avgpool_int8", [1, 56, 56, 64], "int8", avgp([3, 3], [2, 2], [0, 0, 1, 1])),
    ("maxpool_fp16", [1, 112, 112, 32], "float16", maxp([3, 3], [2, 2], [1, 1, 1, 1])),
    ("rgb_maxpool_c3", [1, 224, 224, 3], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1])),  # small C
    ("audio1d_maxpool", [1, 16000, 128], "float32", maxp([4], [4])),
    ("adaptive_avg", [1, 13, 13, 256], "float32", adaptive_avg([6, 6])),
    ("trt_blend_int8", [1, 56, 56, 32], "int8", trt("MAX_AVERAGE_BLEND", [3, 3], [2, 2], [1, 1], [1, 1], blend=0.5)),
    ("indices_2x2", [1, 112, 112, 16], "float32", maxp([2, 2], [2, 2], return_indices=True)),
    ("lp2_fp16", [1, 56, 56, 48], "float16", lpp([3, 3], [2, 2], [1, 1, 1, 1], 2.0)),
    ("c100_chunks", [1, 28, 28, 100], "float32", maxp([3, 3], [1, 1], [1, 1, 1, 1])),  # chunks of 50: misaligned
    ("fused_relu_pool_add", [2, 56, 56, 64], "float32", None),
    # unpadded: a piece of channels per thread, the Add's bias loaded in pieces (store_pieces)
    ("fused_relu_pool2x2_add", [2, 56, 56, 32], "float32", None),
]
# The workloads whose pool kernel loads 16 bytes at once (C = 3 and chunks of 50 channels are not
# whole pieces; the tap-group sum, the serial max and the joining blend load element by element;
# so do the windows that read through a bounds check: the adaptive bins, and the padded 3x3 s2
# maxima and 3x3 s1 average, whose taps, one expression read straight from the input, go through
# the padding's).
VECTOR_WORKLOADS = {w[0] for w in WORKLOADS} - {"rgb_maxpool_c3", "c100_chunks", "se_gap", "se_gmp", "trt_blend_int8",
                                                "adaptive_avg", "fused_relu_pool_add", "maxpool_fp16",
                                                "resnet_maxpool", "video3d_maxpool", "inception_avgpool"}
# Threads per output of the tap-group (global) reductions: the tap groups of a block.
TAP_GROUPS = {"se_gap": 32}
# 32-byte sectors a warp's access touches over the fewest it could: pixels of C = 100 floats (400
# bytes) start off sector boundaries; a thread's four int64 indices are 32 bytes, stored in two
# 16-byte pieces (each store fills half of each sector). The 3x3 s2 max over C = 3 reads its
# taps straight from the input (one expression of every tap, forms.all_taps_beat_passes): a
# warp's tap reads every other 12-byte pixel, about 2.25x the sectors of its bytes; the pixels
# it skips are the next column tap's, read from L1 (the DRAM bytes stay the minimum, above).
SECTOR_ALLOWANCE = {"rgb_maxpool_c3": 2.25, "c100_chunks": 1.25, "indices_2x2": 2.0}


def _workload_emit(w):
    if w[3] is not None:
        return w[3]
    pool = nn_pool("max", [2, 2], [2, 2]) if "2x2" in w[0] else nn_pool("max", [3, 3], [2, 2], [1, 1])

    def fused(bb, x):  # Relu -> TVM's NHWC MaxPool -> Add (a per-channel bias)
        y = pool(bb, bb.emit(relax.op.nn.relu(x)))
        return bb.emit(bias(int(w[1][-1]))(y))

    return fused


def _by_workload(build) -> dict:
    """Workload name -> its scheduled PrimFunc (found by its input's shape and dtype)."""
    found = {}
    for func in build.scheduled.values():
        shape = [int(d) for d in func.params[0].ty.shape]
        for name, wshape, dtype, _ in WORKLOADS:
            if shape == wshape and str(func.params[0].ty.dtype) == dtype:
                found[name] = func
    return found


def test_workloads_build_verify_coalesce():
    """Every workload builds for sm_80: every kernel passes VerifyGPUCode, writes only inside its
    buffers, launches whole warps, at most a thread per output (tap groups: one per group), moves
    the minimum DRAM bytes (one kernel); every warp's global access touches the fewest 32-byte
    sectors (threads over C); 16-byte loads (ld.global.nc.v4 in the PTX) exactly where expected,
    every vector access provably aligned; ptxas: no spills, no stack."""
    build = cc.cuda_build(cc.batch_module([(w[1], w[2], _workload_emit(w)) for w in WORKLOADS]), "sm_80")
    verdict = cc.verify_gpu(build)
    assert len(verdict) >= len(WORKLOADS) and all(verdict.values()), verdict
    funcs = _by_workload(build)
    assert sorted(funcs) == sorted(w[0] for w in WORKLOADS)
    rows = [_workload_row(name, func) for name, func in funcs.items()]
    print("\nworkload | blocks | threads/block | threads per output | DRAM / minimum | sectors / fewest | "
          "vector accesses | shared bytes")
    for r in rows:
        print(" | ".join(str(v) for v in r))
    if not cc.have_nvcc():
        pytest.skip("nvcc (CUDA toolkit) is not on PATH: the PTX 16-byte-load and ptxas checks did not run "
                    "(the build, VerifyGPUCode and the launch/DRAM rows did, and passed)")
    ptx = cc.ptx_kernels(build.source)
    for name, func in funcs.items():
        kernel = f"{func.attrs['global_symbol']}_kernel" if "global_symbol" in func.attrs else None
        loads = [text for k, text in ptx.items() if kernel is not None and k.startswith(kernel)]
        assert bool(loads and cc.PTX_VECTOR_LOAD.search(loads[0])) == (name in VECTOR_WORKLOADS), name
    bad = [r for r in cc.ptxas_report([build.source], archs=["sm_80"]) if r["spill_stores"] or r["spill_loads"]
           or r["stack"]]
    assert not bad, bad


def _workload_row(name, func):
    assert not cc.out_of_bounds_writes(func), name
    (kernel,) = cc.launch_report(func)
    assert kernel["threads_per_block"] % 32 == 0 and kernel["threads_per_block"] <= 256, (name, kernel)
    per_output = kernel["threads"] / kernel["elements_written"]
    assert per_output <= TAP_GROUPS.get(name, 1), (name, kernel)
    dram = (kernel["bytes_read"] + kernel["bytes_written"]) / cc.min_bytes(func)
    assert dram == 1.0, (name, dram)
    sectors = max(touched / fewest for _, touched, fewest in warp_sectors(func))
    assert sectors <= SECTOR_ALLOWANCE.get(name, 1.0), (name, warp_sectors(func))
    accesses = cuda.vector_accesses(func)
    assert all(aligned for _, _, aligned in accesses), (name, accesses)
    assert bool(accesses) == (name in VECTOR_WORKLOADS), (name, accesses)
    return (name, kernel["blocks"], kernel["threads_per_block"], f"{per_output:.2f}", f"{dram:.2f}",
            f"{sectors:.2f}", len(accesses), cuda.shared_bytes(func))


def test_coalescing_check_is_not_vacuous():
    """The sector count sees an uncoalesced access: a channel-last global average scheduled the
    channel-first way (a warp's lanes over one plane's taps, C apart) touches a sector per lane."""
    x = te.placeholder((1, 40, 40, 64), "float32", name="x")
    func = te.create_prim_func([x, compute.global_pool(x, "avg", layout="NHWC")])
    sch = s_tir.Schedule(func)
    block = sch.get_sblock("avg_pool_sum")
    *spatial, r0, r1 = sch.get_loops(block)
    plane, taps = sch.fuse(*spatial), sch.fuse(r0, r1)
    outer, lane = sch.split(taps, [None, 32])
    sch.reorder(lane, outer)
    sch.bind(plane, "blockIdx.x")
    sch.bind(lane, "threadIdx.x")
    loads = [r for r in warp_sectors(sch.mod["main"]) if r[0] == "x"]
    assert loads and all(touched == 32 and fewest == 4 for _, touched, fewest in loads), loads
    real = cuda.Pool().apply(func, tvm.target.Target(SM80), False)
    assert all(touched == fewest for _, touched, fewest in warp_sectors(real.mod["main"]))


@pytest.mark.parametrize("arch", [pytest.param(a, marks=pytest.mark.slow) for a in cc.ARCHS])
def test_every_case_builds_for_arch(arch):
    """Every case builds for the arch: no block writes outside its buffer, every kernel passes
    VerifyGPUCode, every vector access is provably aligned, the schedule stays within shared
    memory, and, with nvcc, ptxas shows no spills and no stack frame."""
    build = cc.cuda_build(cc.batch_module([c[1:4] for c in CASES]), arch)
    for name, func in build.scheduled.items():
        assert not cc.out_of_bounds_writes(func), name
        assert all(aligned for _, _, aligned in cuda.vector_accesses(func)), name
        assert cuda.shared_bytes(func) <= cuda.CudaConfig().shared_limit, name
        assert all(k["threads_per_block"] % 32 == 0 for k in cc.launch_report(func)), name
    verdict = cc.verify_gpu(build)
    assert len(verdict) >= len(CASES) and all(verdict.values()), [k for k, v in verdict.items() if not v]
    if cc.have_nvcc():
        rows = cc.ptxas_report([build.source], archs=[arch])
        assert len(rows) == len(verdict)
        assert not [r for r in rows if r["spill_stores"] or r["spill_loads"] or r["stack"]]


# One of every channel-last form, for the design space (Pool.knobs()).
KNOB_CASES = ["max_3x3s2_staged", "max_3x3s1_c96_chunks", "max_2x2s2_vector", "avg_2x2s2_vector",
              "global_avg_40x40_columns", "global_max_40x40_serial", "indices_2x2s2_vector",
              "adaptive_avg_uniform_vector", "trt_blend", "max_3d", "max_3x3s2_c3"]


@pytest.mark.slow
@pytest.mark.parametrize("knob", cuda.Pool().knobs(), ids=[label for label, _ in cuda.Pool().knobs()])
def test_knob_schedules_are_valid_and_exact(knob):
    """Each point of the design space on every channel-last form: simulated, equal to the
    unscheduled compute; built for sm_80, every kernel passes VerifyGPUCode within the knob's
    threads per block and shared memory, every vector access aligned."""
    _, overrides = knob
    cases = [c for c in CASES if c[0] in KNOB_CASES]
    mod = cc.batch_module([c[1:4] for c in cases])
    xs = inputs_for(mod)
    want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
    got = cc.run_cpu(cc.simulate(mod, overrides=overrides), *xs)
    exact = [c[4] for c in cases for _ in range(_outputs(c[0]))]
    for i, (g, w, e) in enumerate(zip(got, want, exact)):
        if e:
            np.testing.assert_array_equal(g, w, err_msg=str(i))
        else:
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=2e-6, err_msg=str(i))
    build = cc.cuda_build(mod, "sm_80", overrides=overrides)
    assert all(cc.verify_gpu(build).values())
    config = dataclasses.replace(cuda.CudaConfig(), **overrides)
    for name, func in build.scheduled.items():
        assert cuda.shared_bytes(func) <= config.shared_limit, name
        assert all(aligned for _, _, aligned in cuda.vector_accesses(func)), name
        assert all(k["threads_per_block"] <= config.max_threads for k in cc.launch_report(func)), name


# ---------------------------------------------------------------------------------------------
# The tiles, as data
# ---------------------------------------------------------------------------------------------


def test_tile_sizes():
    """rows x cols x channels per CUDA block: C whole up to 64 (then as many pixels of a row as
    fill 256 threads), chunks that divide a wider C in whole 16-byte pieces, several planes when
    the tile covers whole ones, more channels over 1x1 planes, a symbolic batch a block loop,
    and shrinking for shared memory (rows, then columns, then channels)."""
    config = cuda.CudaConfig()
    tile = cuda_channel_last.tile_sizes
    assert tile([1, 56, 56, 64], config) == [1, 1, 4, 64]
    assert tile([1, 112, 112, 3], config) == [1, 1, 56, 3]  # C = 3: a row of 56 pixels, contiguous
    assert tile([1, 10, 10, 8], config) == [1, 2, 10, 8]  # tiles that divide the axes
    assert tile([1, 28, 28, 192], config) == [1, 1, 4, 64]  # 192 = 3 chunks of 64
    assert tile([1, 9, 10, 96], config) == [1, 1, 5, 48]
    assert tile([1, 28, 28, 100], config) == [1, 1, 4, 50]  # no chunk of whole pieces divides 100
    assert tile([4, 1, 1, 32], config) == [4, 1, 1, 32]  # whole 1x1 planes: several images
    assert tile([8, 1, 1, 2048], config) == [1, 1, 1, 256]  # 1x1 planes: more channels
    assert tile([1, 16, 28, 28, 64], config) == [1, 1, 1, 4, 64]  # 3-D: a depth slice per block
    assert tile([2, 4, 4, 4, 8], config) == [1, 2, 4, 4, 8]  # whole 4x4 planes: two depth slices
    assert tile([None, 10, 10, 8], config) == [1, 2, 10, 8]  # symbolic N: a block loop
    assert tile([3, 4000, 128], config) == [1, 4, 64]  # 1-D: 4 pixels of 64 channels
    assert tile([1, 56, 56, 64], dataclasses.replace(config, tile_scale=8)) == [1, 1, 1, 32]
    assert tile([1, 10, 10, 8], dataclasses.replace(config, tile_scale=2)) == [1, 1, 10, 8]
    assert tile([1, 13, 13, 64], config) == [1, 1, 4, 64]  # no divisor near 4: balanced tiles
    assert tile([1, 56, 56, 16], config, per=4) == [1, 1, 14, 16]  # C = 64 in 16 groups of 4: 14 pixels


# ---------------------------------------------------------------------------------------------
# 4. On a GPU
# ---------------------------------------------------------------------------------------------


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gpu_matches_unscheduled_cpu(case):
    """On the device: every case against the unscheduled CPU build (NaN included)."""
    from tvm_pool.bench import cuda as bench_cuda  # pylint: disable=import-outside-toplevel

    _, shape, dtype, emit, exact = case
    mod = module(shape, dtype, emit)
    xs = inputs_for(mod)
    want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
    dev, arch = bench_cuda.device_or_reason()
    got = cc.run_on(tvm_pool.compile(mod, target=cc.gpu_target(arch)), dev, *xs)
    from gpu_bundle import bit_exact_on_gpu  # pylint: disable=import-outside-toplevel

    exact = bit_exact_on_gpu(case[0], dtype, exact)  # TVM's CUDA build rounds averages with fast math
    for g, w in zip(got, want):
        if exact or g.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype("float32"), w.astype("float32"), rtol=2e-5, atol=2e-5)


# ---------------------------------------------------------------------------------------------
# The GPU benchmark's channel-last rows (bench/cuda.py), on its CPU-only paths
# ---------------------------------------------------------------------------------------------


def test_bench_selects_channel_last_workloads():
    """``--only nhwc`` (or ``channel_last``) times every channel-last workload and no other; a
    name times that one; nothing named, every workload of both kinds."""
    from tvm_pool.bench import cuda as bench_cuda  # pylint: disable=import-outside-toplevel
    from tvm_pool.bench import workloads  # pylint: disable=import-outside-toplevel

    onnx_ws, cl_ws = workloads.workloads(False), workloads.channel_last_workloads(False)
    for group in workloads.CHANNEL_LAST_GROUPS:
        assert bench_cuda.select(onnx_ws, {group}) == [] and bench_cuda.select(cl_ws, {group}) == cl_ws
    name = cl_ws[0].name
    assert [w.name for w in bench_cuda.select(cl_ws, {name, "resnet_maxpool"})] == [name]
    assert [w.name for w in bench_cuda.select(onnx_ws, {name, "resnet_maxpool"})] == ["resnet_maxpool"]
    assert bench_cuda.select(cl_ws, None) == cl_ws


def test_bench_channel_last_table():
    """A channel-last row: tvm_pool's time over its channel-first twin's, next to the speedups;
    the table has the twin's column and the summary its geometric mean."""
    from tvm_pool.bench import cuda as bench_cuda  # pylint: disable=import-outside-toplevel

    rows = [{"workload": "nhwc_resnet_maxpool", "dtype": "float32", "min_bytes": 4_000_000, "copy_ms": 0.008,
             "ms": {"tvm_pool": 0.01, "tvm": 0.04, "torch": 0.02, "channel_first": 0.008}, "na": {}},
            {"workload": "nhwc_tflite_avgpool_int8", "dtype": "int8", "min_bytes": 250_000, "copy_ms": 0.002,
             "ms": {"tvm_pool": 0.004, "tvm": 0.006, "channel_first": 0.005},
             "na": {"torch": "int8 pooling not supported by torch CUDA kernels"}}]
    cl = bench_cuda.with_geomeans({"rows": [bench_cuda.summarize(r) for r in rows]}, bench_cuda.CHANNEL_LAST_MEANS)
    assert cl["rows"][0]["vs_channel_first"] == pytest.approx(1.25) and cl["rows"][1]["vs_channel_first"] == 0.8
    assert cl["rows"][0]["speedup"] == pytest.approx(2.0)  # the twin is no peer
    assert cl["geomean_vs_channel_first"] == pytest.approx(1.0) and cl["n_vs_channel_first"] == 2
    gpu = {"name": "NVIDIA H100", "arch": "sm_90", "driver": "12.8", "tvm_cuda": "12.4"}
    md = bench_cuda.to_markdown({**bench_cuda.with_geomeans({"device": "CUDA sm_90", "gpu": gpu, "rows": []}),
                                 "channel_last": cl})
    assert "| workload | dtype | tvm_pool | tvm | torch | torch_graph | channel_first | min MB |" in md
    assert "| nhwc_resnet_maxpool | float32 | 0.0100 | 0.0400 | 0.0200 | - | 0.0080 | 4.00 | 400.0 | 80% | 2.00x | 2.00x | 1.25x |" in md
    assert "tvm_pool channel-last over channel-first: **1.00x** (2 workloads)" in md


def test_bench_torch_refuses_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch has a CUDA device")
    from tvm_pool.bench import cuda as bench_cuda  # pylint: disable=import-outside-toplevel
    from tvm_pool.bench import workloads  # pylint: disable=import-outside-toplevel

    w = workloads.channel_last_workloads(True)[0]
    with pytest.raises(bench_cuda.NotAvailable, match="no CUDA device"):
        bench_cuda.cl_torch(w, workloads.make_input(w), None, "sm_80")


@pytest.mark.gpu
@needs_gpu
def test_gpu_bench_channel_last():
    """On a GPU: the quick channel-last workloads run, tvm_pool's result matches the reference
    (else it is not timed), next to its channel-first twin."""
    from tvm_pool.bench import cuda as bench_cuda  # pylint: disable=import-outside-toplevel

    result = bench_cuda.run(quick=True, repeat=3, only={"nhwc"})
    assert result["rows"] == [] and result["channel_last"]["rows"]
    for row in result["channel_last"]["rows"]:
        assert "tvm_pool" in row["ms"] and "vs_channel_first" in row, row


def test_bounds_checks_are_seen():
    """``has_bounds_check`` finds the padding's condition in a pool's taps (TVM 0.27 names the
    op ``prim.if_then_else``; a test of the name ``tirx.if_then_else`` found none, and padded
    channel-last taps went to 16-byte register copies that ptxas put on the stack)."""
    from tvm_pool.schedules.cuda_vector import has_bounds_check  # pylint: disable=import-outside-toplevel

    x = te.placeholder((1, 56, 56, 64), "float32", name="x")

    def pool_block(pads):
        func = te.create_prim_func([x, compute.max_pool(x, [3, 3], [2, 2], None, pads, layout="NHWC")])
        sch = s_tir.Schedule(func)
        for rv in sch.get_child_blocks(sch.get_sblock("root")):
            if sch.get(rv).name_hint == "pad":
                sch.compute_inline(rv)
        return sch.get(sch.get_sblock("max_pool"))

    assert has_bounds_check(pool_block([1, 1, 1, 1]))
    assert not has_bounds_check(pool_block([0, 0, 0, 0]))



def test_global_with_many_outputs_takes_a_thread_per_output():
    """A channel-last global window reduction (the Relax road's adaptive_avg_pool2d to 1x1) with
    at least CudaConfig.global_min_outputs_per_thread outputs takes a thread per output over the
    taps (no cross-thread reduction, no threadIdx.y); one with fewer splits its taps across
    threads; both simulate to rounding. Here the threshold is lowered to 256 outputs (by
    default 65536)."""
    lowered = {"global_min_outputs_per_thread": 256}
    config = dataclasses.replace(cuda.CudaConfig.for_target(tvm.target.Target({"kind": "cuda", "arch": "sm_80"})),
                                 **lowered)

    def scheduled(shape):
        x = te.placeholder(shape, "float32", name="x")
        func = te.create_prim_func([x, compute.adaptive_avg_pool(x, [1, 1], layout="NHWC")])
        return cuda.Pool().schedule(s_tir.Schedule(func), config).mod["main"].script()

    assert "threadIdx.y" not in scheduled([2, 7, 7, 256]) and "threadIdx.y" in scheduled([1, 7, 7, 64])
    for shape in ([2, 7, 7, 256], [1, 7, 7, 64]):
        mod = module(shape, "float32", adaptive_avg([1, 1]))
        xs = inputs_for(mod)
        want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
        got = cc.run_cpu(cc.simulate(mod, overrides=lowered), *xs)
        np.testing.assert_allclose(got[0], want[0], rtol=2e-6, atol=1e-6)
