"""The CUDA schedule (schedules/cuda*.py), verified without a GPU.

1. Simulation (runs everywhere): the same schedule with every thread-bound loop left serial
   (``cuda.Pool(simulate=True)``), built for this CPU and compared with ``schedule=False`` on
   random inputs: every op, dtype and edge geometry, and inside fused graphs.
2. CUDA builds for sm_75 / sm_80 / sm_90 through ``tvm_pool.compile`` (TVM writes the CUDA
   source without nvcc), TVM's VerifyGPUCode limits on every kernel, and, with nvcc on PATH,
   ``ptxas -v``: no spills, no local memory.
3. Launch shapes (threads per output, blocks a multiple of 32) and an ideal-cache DRAM estimate
   per workload against the minimum (input read once, output written once).
4. 16-byte loads: ``ld.global.nc.v4`` in the PTX of every vector form, none in the fallbacks,
   every vector access of the scheduled TIR provably aligned (``cuda.vector_accesses``).
5. Oracles: every ONNX pooling op against onnxruntime on the host, the adaptive and TensorRT
   ops against PyTorch; with the rule simulated on the CPU here, and (``gpu``-marked, skipped
   without a CUDA device) on the device.
6. The rule's attempt loop and design space: every fallback (a thread per plane where a warp
   reduction cannot be lowered, scalar loads where 16-byte ones fail, smaller staged tiles then
   inlined passes where shared memory is exceeded), and every knob of ``Pool.knobs()`` simulated
   exact and built for sm_80.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import relax, s_tir, te

import cuda_checks as cc
from helpers import needs_gpu, needs_nvcc
import tvm_pool
from tvm_pool import compute, relax_ops, targets
from tvm_pool.schedules import cuda, rules_for

SM80 = {"kind": "cuda", "arch": "sm_80"}


module = cc.module
inputs_for = cc.inputs_for


def check_simulation(mod, nan=True, exact=True, overrides=None):
    xs = inputs_for(mod, nan=nan)
    want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
    got = cc.run_cpu(cc.simulate(mod, overrides=overrides), *xs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.name == "bfloat16":
            g, w = g.astype(np.float32), w.astype(np.float32)
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)


def maxp(k, s=None, p=None, d=None, ceil=False, **kw):
    return lambda bb, x: relax_ops.max_pool(bb, x, k, strides=s, pads=p, dilations=d, ceil_mode=ceil, **kw)


def avgp(k, s=None, p=None, d=None, ceil=False, cip=False):
    return lambda bb, x: relax_ops.avg_pool(bb, x, k, strides=s, pads=p, dilations=d, ceil_mode=ceil,
                                            count_include_pad=cip)


def lpp(k, s=None, p=None, pw=2.0):
    return lambda bb, x: relax_ops.lp_pool(bb, x, k, strides=s, pads=p, p=pw)


def glob(kind):
    return lambda bb, x: relax_ops.global_pool(bb, x, kind)


def trt(kind, k, s, pre, post, mode="EXPLICIT_ROUND_DOWN", blend=0.0, excl=True):
    return lambda bb, x: relax_ops.tensorrt_pool(bb, x, kind, k, s, pre, post, mode, blend, excl)


def adaptive_max(size, index="i64"):
    return lambda bb, x: relax_ops.adaptive_max_pool(bb, x, size, index)


def adaptive_avg(size):
    return lambda bb, x: relax_ops.adaptive_avg_pool(bb, x, size)


# (id, shape, dtype, emit, exact): every pooling op and its edge geometries. The ids in SLOW
# (the costlier argmax builds on the CPU) simulate only with -m slow; every case builds for CUDA.
SLOW = {"indices_storage_order", "indices_plane_int32", "adaptive_max_index_i32_3d"}
CASES = [
    ("max_3x3s2_resnet", [1, 8, 20, 20], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1]), True),
    ("max_3x3s1", [1, 4, 14, 14], "float32", maxp([3, 3], [1, 1], [1, 1, 1, 1]), True),
    ("max_ceil", [1, 4, 14, 13], "float32", maxp([3, 3], [2, 2], [0, 0, 0, 0], ceil=True), True),
    ("max_2x2s2", [1, 4, 16, 16], "float32", maxp([2, 2], [2, 2]), True),
    ("max_pads_k1_odd_stride", [1, 2, 9, 7], "float32", maxp([3, 3], [3, 1], [2, 2, 2, 2]), True),
    ("max_kernel_is_input", [1, 2, 5, 7], "float32", maxp([5, 7], [1, 1]), True),
    ("max_size1", [1, 1, 1, 1], "float32", maxp([1, 1], [1, 1]), True),
    ("max_dilated_asym", [2, 3, 13, 12], "float32", maxp([3, 2], [2, 1], [1, 0, 2, 1], d=[2, 3], ceil=True), True),
    ("max_wide_rows", [1, 2, 9, 150], "float32", maxp([3, 3], [1, 1], [1, 1, 1, 1]), True),
    ("max_long_window", [1, 2, 20, 20], "float32", maxp([17, 3], [1, 2]), True),
    ("max_1d", [2, 3, 50], "float32", maxp([4], [4]), True),
    ("max_all_taps_3x3s3", [1, 3, 14, 13], "float32", maxp([3, 3], [3, 3]), True),
    ("max_all_taps_3d_2x2x2", [1, 3, 6, 8, 9], "float16", maxp([2, 2, 2], [2, 2, 2]), True),
    ("max_1d_long_pass_k32", [1, 3, 100], "float32", maxp([32], [1]), True),
    ("avg_1d_long_strided_k64", [1, 2, 300], "float32", avgp([64], [32]), True),
    ("max_1d_pad", [2, 2, 17], "float32", maxp([3], [2], [1, 1]), True),
    ("max_3d", [1, 3, 6, 9, 9], "float32", maxp([2, 3, 3], [1, 2, 2], [0, 1, 1, 1, 1, 1]), True),
    ("max_3d_all_axes", [1, 2, 7, 8, 9], "float32", maxp([3, 3, 3], [2, 1, 2], [1, 1, 1, 1, 1, 1]), True),
    ("avg_3x3s1", [1, 4, 10, 9], "float32", avgp([3, 3], [1, 1], [1, 1, 1, 1]), True),
    ("avg_2x2s2", [1, 8, 16, 16], "float32", avgp([2, 2], [2, 2]), True),
    ("avg_cip", [1, 4, 15, 15], "float32", avgp([3, 3], [2, 2], [1, 1, 1, 1], cip=True), True),
    ("avg_ceil_asym", [2, 3, 12, 11], "float32", avgp([3, 3], [2, 2], [1, 0, 2, 1], ceil=True), True),
    ("avg_pads_k1", [1, 2, 6, 6], "float32", avgp([5, 5], [1, 1], [4, 4, 4, 4]), True),
    ("avg_window_in_padding", [1, 2, 3, 3], "float32", avgp([2, 2], [3, 3], [1, 1, 1, 1]), True),
    ("avg_3d_ceil", [1, 3, 6, 9, 9], "float32", avgp([3, 3, 3], [2, 2, 2], [1, 1, 1, 1, 1, 1], ceil=True), True),
    ("lp1", [1, 3, 9, 8], "float32", lpp([3, 3], [2, 2], [1, 1, 1, 1], 1.0), True),
    ("lp2", [1, 3, 9, 8], "float32", lpp([3, 3], [2, 2], [1, 1, 1, 1], 2.0), False),  # LLVM contracts x*x+s to an fma in one build only
    ("lp3", [1, 3, 9, 8], "float32", lpp([3, 3], [2, 2], [1, 1, 1, 1], 3.0), True),
    ("global_max_7x7", [2, 32, 7, 7], "float32", glob("max"), True),
    ("global_avg_7x7", [2, 32, 7, 7], "float32", glob("avg"), True),
    ("global_lp_7x7", [1, 5, 7, 7], "float32", glob("lp"), True),
    ("global_max_40x40", [1, 5, 40, 40], "float32", glob("max"), True),
    ("global_avg_40x40_warp", [1, 9, 40, 40], "float32", glob("avg"), False),  # warp sums: another order
    ("global_lp_20x20_warp", [1, 3, 20, 20], "float32", glob("lp"), False),
    ("global_avg_1x1", [2, 5, 1, 1], "float32", glob("avg"), True),
    ("global_avg_1d", [1, 3, 20], "float32", glob("avg"), True),
    ("indices", [2, 3, 9, 10], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True), True),
    ("indices_storage_order", [2, 3, 9, 10], "float32",
     maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True, storage_order=1), True),
    ("indices_plane_int32", [2, 3, 9, 10], "float32",
     maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True, index_scope="plane", index_dtype="int32"), True),
    ("indices_windows_in_padding", [1, 2, 3, 3], "float32", maxp([2, 2], [3, 3], [1, 1, 1, 1], return_indices=True), True),
    ("adaptive_avg", [1, 3, 10, 7], "float32", adaptive_avg([3, 4]), True),
    ("adaptive_max_index", [1, 3, 10, 7], "float32", adaptive_max([3, 4]), True),
    ("adaptive_max_index_i32_3d", [1, 2, 5, 6, 7], "float32", adaptive_max([2, 3, 4], "i32"), True),
    ("trt_max_caffe", [1, 3, 10, 11], "float32", trt("MAX", [3, 3], [2, 2], [1, 1], [1, 1], "CAFFE_ROUND_UP"), True),
    ("trt_avg_incl", [1, 3, 10, 11], "float32", trt("AVERAGE", [3, 3], [2, 2], [1, 1], [0, 1], excl=False), True),
    ("trt_blend", [1, 3, 10, 11], "float32",
     trt("MAX_AVERAGE_BLEND", [3, 3], [1, 1], [1, 1], [1, 1], blend=0.25), True),
    ("trt_blend_int8", [1, 3, 10, 11], "int8", trt("MAX_AVERAGE_BLEND", [2, 2], [2, 2], [0, 0], [0, 0], blend=0.5), True),
    ("trt_avg_int8_3d", [1, 2, 5, 6, 7], "int8", trt("AVERAGE", [2, 3, 3], [1, 2, 2], [0, 1, 1], [1, 1, 1]), True),
]

DTYPES = ["float32", "float16", "bfloat16", "int8", "uint8"]


@pytest.mark.parametrize(
    "case", [pytest.param(c, marks=[pytest.mark.slow] if c[0] in SLOW else []) for c in CASES], ids=[c[0] for c in CASES]
)
def test_simulation_ops(case):
    _, shape, dtype, emit, exact = case
    check_simulation(module(shape, dtype, emit), exact=exact)


def dtype_cases(dtype):
    shape = [2, 3, 11, 13]
    cases = [(shape, maxp([3, 3], [2, 2], [1, 1, 1, 1])), (shape, maxp([2, 2], [2, 2])), ([1, 3, 7, 7], glob("max"))]
    if dtype.startswith(("float", "bfloat")):  # averages of integers are TensorRT's (int8 cases above)
        cases += [(shape, avgp([3, 3], [1, 1], [1, 1, 1, 1]))]
    return cases


@pytest.mark.parametrize("dtype", DTYPES)
def test_simulation_dtypes(dtype):
    for shape, emit in dtype_cases(dtype):
        check_simulation(module(shape, dtype, emit))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_simulation_indices_half(dtype):
    check_simulation(module([2, 3, 11, 13], dtype, maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True)))


FUSED = [
    ("relu_before_max", maxp([3, 3], [2, 2], [1, 1, 1, 1]), None, relax.op.nn.relu, False),
    ("avg_then_relu", avgp([3, 3], [1, 1], [1, 1, 1, 1]), relax.op.nn.relu, relax.op.nn.relu, False),
    ("max_add_branch", maxp([3, 3], [2, 2], [1, 1, 1, 1]), relax.op.add, relax.op.nn.relu, True),
    ("avg_add_branch", avgp([2, 2], [2, 2]), relax.op.add, None, True),
    ("max_concat_after", maxp([3, 3], [2, 2], [1, 1, 1, 1]), lambda y, b: relax.op.concat([y, b], axis=1), None, True),
    ("avg_concat_after", avgp([3, 3], [1, 1], [1, 1, 1, 1]), lambda y, b: relax.op.concat([b, y], axis=3), None, True),
    ("global_avg_add", glob("avg"), relax.op.add, None, True),
    ("indices_relu_after", lambda bb, x: bb.emit(relax.TupleGetItem(
        maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True)(bb, x), 0)), relax.op.nn.relu, None, False),
]


@pytest.mark.parametrize("case", FUSED, ids=[c[0] for c in FUSED])
def test_simulation_fused(case):
    """Relu before, add with a branch after, concat after (not attached: its own kernel)."""
    _, emit, epilogue, prologue, branch = case
    shape = [1, 8, 14, 14] if "global" not in case[0] else [1, 8, 7, 7]
    mod = module(shape, "float32", emit, epilogue=epilogue, prologue=prologue, branch=branch)
    check_simulation(mod, nan=False)


@pytest.mark.parametrize("case", FUSED, ids=[c[0] for c in FUSED])
def test_fused_builds_for_cuda(case):
    """The fused graphs built for real (nvcc's CUDA codegen, not the simulation): every kernel
    passes VerifyGPUCode. A pool output nobody reads (the index of ``indices_relu_after``) lives
    in registers: CUDA cannot allocate a global intermediate inside a kernel, which the CPU
    simulation does not see (found by the first bundle built for an H100)."""
    _, emit, epilogue, prologue, branch = case
    shape = [1, 8, 14, 14] if "global" not in case[0] else [1, 8, 7, 7]
    mod = module(shape, "float32", emit, epilogue=epilogue, prologue=prologue, branch=branch)
    assert all(cc.verify_gpu(cc.cuda_build(mod, "sm_80")).values())


def _fused_shape_funcs(name):
    """A hand-fused PrimFunc of tests/test_schedule_fusion_shapes.py (pool + producers +
    consumers in one TE graph: Concat with branches, pool of pool, indices consumer, ...)."""
    import test_schedule_fusion_shapes as shapes  # pylint: disable=import-outside-toplevel

    return shapes._prim_func(name), shapes._run  # pylint: disable=protected-access


def _fusion_shape_names():
    import test_schedule_fusion_shapes as shapes  # pylint: disable=import-outside-toplevel

    return sorted(shapes.SHAPES)


@pytest.mark.parametrize("name", _fusion_shape_names())
def test_simulation_fusion_shapes(name):
    """Every fused shape the x86 rule is checked on: the CUDA rule, simulated, equals the
    unscheduled function bit for bit, and a Concat of a pool's output is never attached to a
    pool's loops (a Concat before the pool is a producer, inlined into it like any other)."""
    (func, shapes, outputs), run = _fused_shape_funcs(name)
    sch = cc.CheckedPool(simulate=True).apply(func, tvm.target.Target({"kind": "llvm"}), False)
    assert sch is not None, "the rule declined a PrimFunc with a pool"
    want = run(func, shapes, outputs)
    with cc.bounds_checked():
        got = run(sch.mod["main"].with_attr("global_symbol", "main"), shapes, outputs)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)
    real = cc.CheckedPool().apply(func, tvm.target.Target(SM80), False)
    assert real is not None
    root = _root_names(real)
    for block in _concats_of_pools(s_tir.Schedule(func)):
        assert block in root, f"{block} was attached to a pool's loops"


def _concats_of_pools(sch):
    """The root Concat blocks that read what a pooling block wrote."""
    from tvm_pool.schedules import analysis  # pylint: disable=import-outside-toplevel

    blocks = [sch.get(rv) for rv in analysis.root_blocks(sch)]
    pooled = {analysis.region_buffer(w).name for b in blocks if analysis.is_pool_block(b) for w in b.writes}
    return [b.name_hint for b in blocks
            if b.name_hint.startswith("T_concat") and any(analysis.region_buffer(r).name in pooled for r in b.reads)]


def _root_names(sch):
    from tvm_pool.schedules import analysis  # pylint: disable=import-outside-toplevel

    return [sch.get(rv).name_hint for rv in analysis.root_blocks(sch)]


def _check_fusion_graphs(seeds):
    """tests/fusion_graphs.py's random graphs (BN, Relu, Clip, Add with a branch, Concat, two
    pools, Indices, float16, ...) lowered as one model; every fused PrimFunc the CUDA rule takes,
    simulated, against its unscheduled self (tests/primfunc_check.py)."""
    from fusion_graphs import random_graph, to_model  # pylint: disable=import-outside-toplevel
    from primfunc_check import check_pairs, lower_unscheduled  # pylint: disable=import-outside-toplevel

    graphs = [random_graph(s) for s in seeds]
    mod = tvm_pool.from_onnx(to_model(graphs))
    lowered = lower_unscheduled(mod, "llvm")
    rule = cc.CheckedPool(simulate=True)
    pairs = []
    for gvar, func in lowered.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            sch = rule.apply(func, tvm.target.Target({"kind": "llvm"}), False)
            if sch is not None:
                pairs.append((gvar.name_hint, func, sch.mod["main"]))
    assert pairs
    with cc.bounds_checked():
        report = check_pairs(pairs, "llvm")
    assert not report.mismatches, "\n".join(str(m) for m in report.mismatches)
    return report


@pytest.mark.parametrize("first", [0, pytest.param(12, marks=pytest.mark.slow), pytest.param(24, marks=pytest.mark.slow)])
def test_simulation_fusion_graphs(first):
    report = _check_fusion_graphs(range(first, first + 12))
    assert len(report.checked) >= 12


def test_simulation_symbolic_adaptive():
    """A runtime output size: planes bound, the symbolic output loops serial in each thread."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 3, 10, 7], "float32"))
    size = relax.Var("size", relax.TensorType([2], "int64"))
    with bb.function("main", [x, size]):
        with bb.dataflow():
            out = bb.emit_output(relax_ops.adaptive_avg_pool(bb, x, size))
        bb.emit_func_output(out)
    mod = bb.get()
    xs = [cc.data([1, 3, 10, 7], "float32"), np.array([3, 4], "int64")]
    want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
    got = cc.run_cpu(cc.simulate(mod), *xs)
    np.testing.assert_array_equal(got[0], want[0])


def _dynamic_batch_module():
    """Channel-first pools of every form over inputs with one symbolic batch ``n``."""
    bb = relax.BlockBuilder()
    n = tvm.tirx.Var("n", "int64")
    cases = [([n, 8, 20, 20], maxp([3, 3], [2, 2], [1, 1, 1, 1])), ([n, 4, 14, 14], avgp([3, 3], [1, 1], [1, 1, 1, 1])),
             ([n, 4, 16, 16], maxp([2, 2], [2, 2])), ([n, 6, 9, 9], glob("avg")), ([n, 3, 11, 10], lpp([3, 2], [2, 1])),
             ([n, 4, 12, 12], maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True))]
    xs = [relax.Var(f"x{i}", relax.TensorType(shape, "float32")) for i, (shape, _) in enumerate(cases)]
    with bb.function("main", xs):
        with bb.dataflow():
            outs = []
            for x, (_, emit) in zip(xs, cases):
                y = emit(bb, x)
                outs.append(bb.emit(relax.op.nn.relu(y)) if isinstance(y.ty, relax.TensorType) else y)
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    return bb.get()


def test_simulation_dynamic_batch():
    """A symbolic batch (torch.export's Dim, an ONNX ``N``): the batch is a block loop of the
    channel-first tiles (they were left to TVM's generic schedule), the simulated schedule equals
    the unscheduled compute at two batch sizes, and the build passes VerifyGPUCode."""
    mod = _dynamic_batch_module()
    funcs = {name: f for name, f in cc.scheduled_funcs(mod, SM80).items() if "pool" in name}
    assert len(funcs) >= 6 and all('thread="blockIdx.x"' in f.script() for f in funcs.values()), sorted(funcs)
    for batch in (1, 3):
        xs = [cc.data([batch] + [int(d) for d in p.ty.shape.values[1:]], "float32", seed=i, nan=True)
              for i, p in enumerate(mod["main"].params)]
        want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
        for i, (g, w) in enumerate(zip(cc.run_cpu(cc.simulate(mod), *xs), want)):
            if i == 4:  # the Lp pool's sum of powers, in another order
                np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)
            else:
                np.testing.assert_array_equal(g, w, err_msg=str(i))
    assert all(cc.verify_gpu(cc.cuda_build(mod, "sm_80")).values())


# ---------------------------------------------------------------------------------------------
# the rule's plumbing
# ---------------------------------------------------------------------------------------------


def test_rules_for_cuda_targets():
    for arch in cc.ARCHS:
        (rule,) = rules_for(tvm.target.Target({"kind": "cuda", "arch": arch}))
        assert isinstance(rule, cuda.Pool)
    assert not any(isinstance(r, cuda.Pool) for r in rules_for(tvm.target.Target({"kind": "llvm"})))
    assert rules_for(tvm.target.Target({"kind": "vulkan"})) == []  # a GPU, not NVIDIA: TVM's rules


def test_rule_declines_what_it_does_not_understand():
    a = te.placeholder((4, 4), "float32")
    func = te.create_prim_func([a, te.compute((4, 4), lambda i, j: a[i, j] + 1)])
    assert cuda.Pool().apply(func, tvm.target.Target(SM80), False) is None
    x = te.placeholder((1, 2, 8, 8), "float32", name="x")
    pool = te.create_prim_func([x, compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1])])
    assert cuda.Pool().apply(pool, tvm.target.Target({"kind": "llvm"}), False) is None
    assert cuda.Pool().apply(pool, tvm.target.Target(SM80), False) is not None


def test_consumer_attachment_is_strict():
    """A Concat reading the pool is never attached to the pool's loops; a finalize is."""
    mod = module([1, 8, 14, 14], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1]),
                 epilogue=lambda y, b: relax.op.concat([y, b], axis=1), branch=True)
    funcs = cc.scheduled_funcs(mod, SM80)
    (func,) = [f for name, f in funcs.items() if "max_pool" in name]
    kernels = cc.launch_report(func)
    assert len(kernels) == 2  # the pool, then the concat as its own kernel
    mod = module([1, 8, 14, 14], "float32", avgp([3, 3], [1, 1], [1, 1, 1, 1]), epilogue=relax.op.nn.relu)
    (func,) = [f for name, f in cc.scheduled_funcs(mod, SM80).items() if "avg_pool" in name]
    assert len(cc.launch_report(func)) == 1  # sum, divide and relu in one kernel
    assert 'scope="local"' in func.script()  # the sum stays in a register


def test_meta_schedule_rules_registered_for_gpu_keys():
    from tvm_pool.schedules import register_meta_schedule_rules  # pylint: disable=import-outside-toplevel

    names = register_meta_schedule_rules()
    for key in ("cpu", "cuda", "gpu"):
        assert f"s_tir.meta_schedule.{key}.tvm_pool.max" in names
        assert tvm.get_global_func(f"s_tir.meta_schedule.{key}.meta_schedule.pool_avg") is not None
    x = te.placeholder((1, 16, 28, 28), "float32", name="x")
    func = te.create_prim_func([x, compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1])])
    sch = s_tir.Schedule(func)
    with tvm.target.Target(SM80):
        spaces = tvm.get_global_func("s_tir.meta_schedule.cuda.tvm_pool.max")(sch, sch.get_sblock("max_pool"))
    # the design space: Pool.schedule at every knob, structural duplicates dropped, hand-written first
    rule, expected = cuda.Pool(), []
    for _, overrides in rule.knobs():
        point = rule.schedule(s_tir.Schedule(func), dataclasses.replace(CONFIG, **overrides))
        if point is not None and not any(_same(point, e) for e in expected):
            expected.append(point)
    assert len(spaces) == len(expected) >= 2
    assert all(_same(a, b) for a, b in zip(spaces, expected))
    assert all('thread="threadIdx.x"' in s.mod["main"].script() for s in spaces)


def test_out_of_bounds_writes_are_caught():
    """The write-bounds check the simulation runs is not vacuous: a block whose domain is wider
    than the buffer it writes (what reverse_compute_at after a non-dividing split produced) is
    named."""
    from tvm.script import tirx as T  # pylint: disable=import-outside-toplevel

    @T.prim_func(s_tir=True)
    def widened(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(8):
            with T.sblock("b"):
                vi = T.axis.spatial(8, i)
                b[vi] = a[vi % 4]

    (problem,) = cc.out_of_bounds_writes(widened)
    assert "b writes b axis 0 in [0, 7], size 4" in problem
    x = te.placeholder((1, 4, 5, 7), "float32", name="x")
    func = te.create_prim_func([x, *compute.max_pool(x, [4, 1], [3, 3], None, [3, 0, 0, 0], return_indices=True)])
    assert cc.out_of_bounds_writes(cc.CheckedPool().apply(func, tvm.target.Target(SM80), False).mod["main"]) == []


def test_shared_memory_fallback():
    """A tile whose staging exceeds shared memory shrinks; the schedule stays valid."""
    x = te.placeholder((1, 2, 64, 300), "float32", name="x")
    func = te.create_prim_func([x, compute.max_pool(x, [16, 16], [1, 1], [2, 2], [0] * 4)])
    sch = cuda.Pool().apply(func, tvm.target.Target(SM80), False)
    assert sch is not None
    assert cuda.shared_bytes(sch.mod["main"]) <= cuda.CudaConfig().shared_limit


def test_cli_compile_and_inspect_cuda(tmp_path, capsys):
    import onnx  # pylint: disable=import-outside-toplevel

    from tvm_pool import cli  # pylint: disable=import-outside-toplevel
    from tvm_pool.demo_model import demo_model  # pylint: disable=import-outside-toplevel

    model, _ = demo_model()

    path = tmp_path / "cnn.onnx"
    onnx.save(model, path)
    assert cli.main(["inspect", str(path), "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert out.count("schedule:  cuda.Pool") == 4, out
    assert cli.main(["-q", "compile", str(path), "--target", "cuda", "-o", str(tmp_path / "cnn_cuda.so")]) == 0
    assert (tmp_path / "cnn_cuda.so").stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# Settings as data, the attempt loop's fallbacks, and the design space (Pool.knobs)
# ---------------------------------------------------------------------------------------------


def test_config_from_target():
    """CudaConfig.for_target reads the target's limits (shared memory at most 48 KB); the rule's
    config for a CPU target (simulation) is its gpu_target's, else the ``cuda`` alias's (sm_90)."""
    small = cuda.CudaConfig.for_target(tvm.target.Target(
        {"kind": "cuda", "arch": "sm_80", "max_threads_per_block": 128, "max_shared_memory_per_block": 4096}))
    assert (small.max_threads, small.shared_limit, small.global_planes_per_block) == (128, 4096, 4)
    big = cuda.CudaConfig.for_target(
        tvm.target.Target({"kind": "cuda", "arch": "sm_90", "max_shared_memory_per_block": 1 << 20}))
    assert (big.max_threads, big.shared_limit) == (256, 48 * 1024)
    assert dataclasses.replace(big, threads=512).max_threads == 512
    with pytest.raises(dataclasses.FrozenInstanceError):
        big.threads = 128  # pylint: disable=assigning-non-slot
    llvm = tvm.target.Target({"kind": "llvm"})
    assert cuda.Pool(simulate=True).config(llvm) == cuda.CudaConfig.for_target(targets.cuda_target())
    assert cuda.Pool(simulate=True, gpu_target=small_target()).config(llvm).max_threads == 128
    assert cuda.Pool().config(tvm.target.Target(SM80)) == cuda.CudaConfig.for_target(tvm.target.Target(SM80))


def small_target():
    return tvm.target.Target({"kind": "cuda", "arch": "sm_80", "max_threads_per_block": 128})


def _te_func(shape, make, dtype="float32"):
    """A PrimFunc of one TE compute: (func, [shapes and dtypes of its parameters])."""
    x = te.placeholder(shape, dtype, name="x")
    outs = make(x)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    func = te.create_prim_func([x, *outs]).with_attr("global_symbol", "main")
    return func, [([int(d) for d in t.shape], str(t.dtype)) for t in [x, *outs]]


def _run_prim(func, params, seed=0):
    """Run a PrimFunc built for this CPU (every access bounds-checked) on random data with NaNs
    (its outputs start as 7.5)."""
    with cc.bounds_checked():
        lib = tvm.compile(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}), target="llvm")
    (shape, dtype), outs = params[0], params[1:]
    args = [tvm.runtime.tensor(cc.data(shape, dtype, seed=seed, nan=True))]
    args += [tvm.runtime.tensor(np.full(s, 7.5, dtype=d)) for s, d in outs]
    lib["main"](*args)
    return [a.numpy() for a in args[1:]]


def _simulated_equal(func, params, config, exact=True):
    """The simulated schedule of ``func`` with ``config`` computes what ``func`` does."""
    sch = cc.CheckedPool(simulate=True).schedule(s_tir.Schedule(func), config)
    assert sch is not None
    for got, want in zip(_run_prim(sch.mod["main"], params), _run_prim(func, params)):
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def _same(a, b) -> bool:
    return tvm_ffi.structural_equal(a.mod, b.mod)


GPU80 = tvm.target.Target(SM80)
CONFIG = cuda.Pool().config(GPU80)
# The shared-memory staging of overlapping windows' passes (a knob since channel-first chains of
# overlapping windows compute their earlier passes per thread in registers; channel-last chains
# and non-overlapping 3-D windows still stage by default).
STAGED = {"registers": False}
STAGED_CONFIG = dataclasses.replace(CONFIG, **STAGED)


def test_schedule_copies_its_base_and_replays():
    """Pool.schedule leaves its base as it is and returns a copy whose trace replays on the
    function (what MetaSchedule needs of a custom rule)."""
    func, _ = _te_func([1, 8, 20, 20], lambda x: compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1]))
    base = s_tir.Schedule(func)
    sch = cuda.Pool().schedule(base, CONFIG)
    assert sch is not None and tvm_ffi.structural_equal(base.mod["main"], func)
    replay = s_tir.Schedule(func)
    sch.trace.apply_to_schedule(replay, remove_postproc=False)
    assert _same(replay, sch)
    assert _same(cuda.Pool().apply(func, GPU80, False), sch)


def test_global_max_warp_reduces_its_keys():
    """A float32 global max over a plane larger than a flat plane reduces uint32 order keys
    (compute.forms.keyed_plane): a plain max, which TVM's cross-thread reduction lowers, so the
    plane takes a warp (threadIdx.y binds the planes), exact with NaNs in the simulation."""
    func, params = _te_func([1, 5, 32, 32], lambda x: compute.global_pool(x, "max"))
    sch = cuda.Pool().schedule(s_tir.Schedule(func), CONFIG)
    assert "threadIdx.y" in sch.mod["main"].script()
    _simulated_equal(func, params, CONFIG)


def test_fallback_warp_to_a_thread_per_plane():
    """A float64 global max (no order keys; NaN-propagating select: TVM's cross-thread
    reduction cannot lower it) raises NoWarpReduction as a warp reduction; the rule schedules a
    thread per plane instead, which the simulation proves exact."""
    func, params = _te_func([1, 5, 32, 32], lambda x: compute.global_pool(x, "max"), dtype="float64")
    with pytest.raises(cuda.NoWarpReduction):
        cuda.schedule_function(s_tir.Schedule(func), CONFIG)
    sch = cuda.Pool().schedule(s_tir.Schedule(func), CONFIG)
    assert _same(sch, cuda.Pool().schedule(s_tir.Schedule(func), dataclasses.replace(CONFIG, warp=False)))
    assert "threadIdx.y" not in sch.mod["main"].script()  # a warp per plane binds threadIdx.y
    avg, _ = _te_func([1, 5, 32, 32], lambda x: compute.global_pool(x, "avg"))
    assert "threadIdx.y" in cuda.Pool().schedule(s_tir.Schedule(avg), CONFIG).mod["main"].script()
    _simulated_equal(func, params, CONFIG)


def test_fallback_vector_to_scalar_loads():
    """Staged input rows of 21 floats are not whole 16-byte pieces: the vector-load schedule
    raises MisalignedVector, and the rule schedules scalar loads (no vector access)."""
    func, params = _te_func([1, 8, 20, 21], lambda x: compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1]))
    with pytest.raises(cuda.MisalignedVector):
        cuda.schedule_function(s_tir.Schedule(func), STAGED_CONFIG)
    sch = cuda.Pool().schedule(s_tir.Schedule(func), STAGED_CONFIG)
    assert _same(sch, cuda.Pool().schedule(s_tir.Schedule(func), dataclasses.replace(STAGED_CONFIG, vector=False)))
    assert cuda.vector_accesses(sch.mod["main"]) == []
    _simulated_equal(func, params, STAGED_CONFIG)


def test_fallback_staged_to_unstaged_when_shared_memory_is_exceeded():
    """A staged tile over the shared-memory limit shrinks (a larger tile scale), and a chain
    that fits at no scale has its earlier passes inlined (no shared memory)."""
    func, params = _te_func([1, 8, 20, 20], lambda x: compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1]))
    rule = cuda.Pool()
    staged = rule.schedule(s_tir.Schedule(func), STAGED_CONFIG)
    used = cuda.shared_bytes(staged.mod["main"])
    assert 0 < used <= CONFIG.shared_limit
    shrunk = rule.schedule(s_tir.Schedule(func), dataclasses.replace(STAGED_CONFIG, shared_limit=used - 1))
    assert 0 < cuda.shared_bytes(shrunk.mod["main"]) < used
    assert any(_same(shrunk, rule.schedule(s_tir.Schedule(func), dataclasses.replace(STAGED_CONFIG, tile_scale=s)))
               for s in (2, 4, 8))
    unstaged = rule.schedule(s_tir.Schedule(func), dataclasses.replace(STAGED_CONFIG, shared_limit=0))
    assert cuda.shared_bytes(unstaged.mod["main"]) == 0
    assert _same(unstaged, rule.schedule(s_tir.Schedule(func), dataclasses.replace(STAGED_CONFIG, staged=False)))
    _simulated_equal(func, params, dataclasses.replace(STAGED_CONFIG, staged=False))
    # by default the overlapping windows' first pass is per thread, in registers: no shared memory
    default = rule.schedule(s_tir.Schedule(func), CONFIG)
    assert cuda.shared_bytes(default.mod["main"]) == 0 and "local" in default.mod["main"].script()
    _simulated_equal(func, params, CONFIG)


# One of every form the schedule has (id, shape, dtype, emit, exact): staged passes with 16-byte
# input rows, column tiles, 3-D passes, 16-byte window groups, a window reduction with indices,
# adaptive windows, a warp reduction, a thread per plane, a consumer joining two reductions.
KNOB_CASES = [
    ("max_3x3s2_staged", [1, 8, 20, 20], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1]), True),
    ("avg_3x3s1_column_tiles", [1, 2, 9, 150], "float32", avgp([3, 3], [1, 1], [1, 1, 1, 1]), True),
    ("max_3d", [1, 3, 6, 9, 9], "float32", maxp([2, 3, 3], [1, 2, 2], [0, 1, 1, 1, 1, 1]), True),
    ("avg_2x2s2_vector", [1, 8, 16, 32], "float32", avgp([2, 2], [2, 2]), True),
    ("indices", [2, 3, 9, 10], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True), True),
    ("adaptive_avg", [1, 3, 10, 7], "float32", adaptive_avg([3, 4]), True),
    ("global_avg_warp", [1, 9, 40, 40], "float32", glob("avg"), False),  # warp sums: another order
    ("global_max_thread", [1, 5, 32, 32], "float32", glob("max"), True),
    ("trt_blend", [1, 3, 10, 11], "float32",
     trt("MAX_AVERAGE_BLEND", [3, 3], [1, 1], [1, 1], [1, 1], blend=0.25), True),
    # chains of several levels on one axis: unstaged, they take registers (inlined, a 1-D k32
    # doubling max repeated its first level 32 times and took minutes to build)
    ("max_1d_doubling_k32", [1, 4, 300], "float32", maxp([32], [1], [16, 16]), True),
    ("global_max_flat_7x7", [1, 6, 7, 7], "float32", glob("max"), True),
]
KNOBS = cuda.Pool().knobs()


def test_knobs_are_config_overrides_that_move_the_schedule():
    """Every knob overrides CudaConfig fields (the hand-written schedule first) and changes the
    schedule of at least one form."""
    assert KNOBS[0][1] == {}
    fields = {f.name for f in dataclasses.fields(cuda.CudaConfig)}
    funcs = [_te_func([1, 8, 20, 20], lambda x: compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1]))[0],
             _te_func([1, 8, 16, 32], lambda x: compute.avg_pool(x, [2, 2], [2, 2], None, [0] * 4))[0],
             _te_func([1, 9, 40, 40], lambda x: compute.global_pool(x, "avg"))[0],
             _te_func([1, 64, 56, 56], lambda x: compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1]))[0],
             _te_func([1, 64, 8192], lambda x: compute.max_pool(x, [3], [1], None, [1, 1]))[0],
             _te_func([1, 8, 16, 64, 64], lambda x: compute.max_pool(x, [2, 2, 2], [2, 2, 2], None, [0] * 6))[0]]
    rule = cuda.Pool()
    hand = [rule.schedule(s_tir.Schedule(f), CONFIG) for f in funcs]
    for label, overrides in KNOBS[1:]:
        assert overrides and set(overrides) <= fields, label
        knob = dataclasses.replace(CONFIG, **overrides)
        moved = [rule.schedule(s_tir.Schedule(f), knob) for f in funcs]
        assert all(m is not None for m in moved), label
        assert any(not _same(m, h) for m, h in zip(moved, hand)), f"{label}: the same schedule as hand-written"


def _check_outputs(got, want, exact):
    assert len(got) == len(want) == len(exact)
    for g, w, e in zip(got, want, exact):
        assert g.dtype == w.dtype and g.shape == w.shape
        if e:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6)


# Under -m slow: each knob builds nine kernels (15-55 s). The default suite checks that every knob
# schedules every form (test_knobs_are_config_overrides_that_move_the_schedule) and the
# hand-written point's builds (test_every_case_builds_for_arch).
@pytest.mark.slow
@pytest.mark.parametrize("knob", KNOBS, ids=[label for label, _ in KNOBS])
def test_knob_schedules_are_valid_and_exact(knob):
    """Each point of the design space, on every form: simulated, bit for bit the unscheduled
    compute (the warp sum to rounding); built for sm_80, every kernel passes VerifyGPUCode with
    at most the knob's threads per block, shared memory within the limit, every vector access
    provably aligned, no write outside a buffer and, with nvcc, ptxas assembles every kernel."""
    _, overrides = knob
    mod = cc.batch_module([c[1:4] for c in KNOB_CASES])
    xs = inputs_for(mod, nan=True)
    want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
    exact = [c[4] for c in KNOB_CASES for _ in range(2 if c[0] == "indices" else 1)]
    _check_outputs(cc.run_cpu(cc.simulate(mod, overrides=overrides), *xs), want, exact)
    build = cc.cuda_build(mod, "sm_80", overrides=overrides)
    verdict = cc.verify_gpu(build)
    assert len(verdict) >= len(KNOB_CASES) and all(verdict.values()), verdict
    config = dataclasses.replace(CONFIG, **overrides)
    funcs = _pool_funcs(build)
    assert len(funcs) == len(KNOB_CASES)
    for name, func in funcs.items():
        assert cuda.shared_bytes(func) <= config.shared_limit, name
        assert all(aligned for _, _, aligned in cuda.vector_accesses(func)), name
        assert all(k["threads_per_block"] <= config.max_threads for k in cc.launch_report(func)), name
    if cc.have_nvcc():  # it assembles (spills are the knob's cost, for tuning to measure:
        # inlined 3-D passes spill)
        assert len(cc.ptxas_report([build.source], archs=["sm_80"])) == len(verdict)


# ---------------------------------------------------------------------------------------------
# CUDA builds: VerifyGPUCode, ptxas, launch shapes, DRAM bytes
# ---------------------------------------------------------------------------------------------

# Real-network shapes (the benchmark's, batch 1) plus the edge geometries.
WORKLOADS = [
    ("resnet_maxpool", [1, 64, 112, 112], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1])),
    ("resnet_gap", [1, 2048, 7, 7], "float32", glob("avg")),
    ("vgg_maxpool", [1, 128, 112, 112], "float32", maxp([2, 2], [2, 2])),
    ("inception_maxpool", [1, 192, 28, 28], "float32", maxp([3, 3], [1, 1], [1, 1, 1, 1])),
    ("inception_ceil", [1, 64, 111, 111], "float32", maxp([3, 3], [2, 2], ceil=True)),
    ("densenet_avgpool", [1, 128, 56, 56], "float32", avgp([2, 2], [2, 2])),
    ("avgpool_pad", [1, 256, 28, 28], "float32", avgp([3, 3], [1, 1], [1, 1, 1, 1])),
    ("video3d_maxpool", [1, 64, 16, 56, 56], "float32", maxp([3, 3, 3], [2, 2, 2], [1, 1, 1, 1, 1, 1])),
    ("audio1d_maxpool", [1, 128, 16000], "float32", maxp([4], [4])),
    ("maxpool_indices", [1, 64, 112, 112], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True)),
    ("maxpool_int8", [1, 64, 112, 112], "int8", maxp([3, 3], [2, 2], [1, 1, 1, 1])),
    ("maxpool_fp16", [1, 64, 112, 112], "float16", maxp([3, 3], [2, 2], [1, 1, 1, 1])),
    ("maxpool_bf16_indices", [1, 64, 56, 56], "bfloat16", maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True)),
    ("global_avg_large", [1, 512, 32, 32], "float32", glob("avg")),
    ("global_max_large", [1, 512, 32, 32], "float32", glob("max")),
    ("adaptive_avg", [1, 256, 13, 13], "float32", adaptive_avg([6, 6])),
    ("trt_blend_int8", [1, 64, 56, 56], "int8", trt("MAX_AVERAGE_BLEND", [3, 3], [2, 2], [1, 1], [1, 1], blend=0.5)),
    ("lp2_fp16", [1, 64, 56, 56], "float16", lpp([3, 3], [2, 2], [1, 1, 1, 1], 2.0)),
    ("fused_relu_pool_add", [1, 64, 112, 112], "float32", None),
]


# Ideal-cache DRAM bytes over the minimum: 1.0 (one kernel, input read once, output written
# once) except where a stage stays its own kernel: bfloat16 argmax widens to float32 first.
# (TensorRT's blend joins two reductions, max and sum: one kernel computes both and blends.)
DRAM_ALLOWANCE = {"maxpool_bf16_indices": 2.8}
# The workloads whose pool kernel loads 16 bytes at once (the rest: 7x7 planes, odd widths with
# ceil mode, padded windows read one tap at a time (TensorRT), adaptive windows). MaxPool with
# Indices is a max of keys made from the data, loaded as the values-only pool loads it.
# Overlapping windows (3x3 s2, 3x3 s1, 3x3x3, Indices, Lp) compute their first passes per
# thread in registers, reading taps through L1 one at a time (CudaConfig.registers).
VECTOR_WORKLOADS = {
    "vgg_maxpool", "densenet_avgpool", "audio1d_maxpool", "global_avg_large", "global_max_large",
}


def _workload_module(name, shape, dtype, emit):
    if emit is None:  # Relu -> MaxPool -> Add(branch)
        return module(shape, dtype, maxp([3, 3], [2, 2], [1, 1, 1, 1]), epilogue=relax.op.add,
                      prologue=relax.op.nn.relu, branch=True)
    return module(shape, dtype, emit)


def _pool_funcs(build):
    return {n: f for n, f in build.scheduled.items() if "tvm_pool" in n or "fused" in n}


def test_builds_verify_gpu_code_and_launch_shapes():
    """Every workload builds for sm_80 through tvm_pool.compile; every kernel passes
    VerifyGPUCode; window pools launch at most one thread per output, but for the last partial
    warp of a tile (two outputs per thread on large 1-D and channel-last outputs, more where a
    thread loads 16 bytes of consecutive windows), every block
    a multiple of 32 threads; DRAM bytes near the minimum; 16-byte loads where expected, every
    one provably aligned."""
    rows = []
    for name, shape, dtype, emit in WORKLOADS:
        build = cc.cuda_build(_workload_module(name, shape, dtype, emit), "sm_80")
        verdict = cc.verify_gpu(build)
        assert verdict and all(verdict.values()), (name, verdict)
        funcs = _pool_funcs(build)
        assert funcs, name
        accesses = [a for f in funcs.values() for a in cuda.vector_accesses(f)]
        assert all(aligned for _, _, aligned in accesses), (name, accesses)
        assert bool(accesses) == (name in VECTOR_WORKLOADS), (name, accesses)
        for fname, func in funcs.items():
            kernels = cc.launch_report(func)
            assert kernels, (name, fname)
            for k in kernels:
                assert k["threads_per_block"] % 32 == 0, (name, k)
            moved = sum(k["bytes_read"] + k["bytes_written"] for k in kernels)
            minimum = cc.min_bytes(func)
            pool_kernel = max(kernels, key=lambda k: k["bytes_read"])
            ratio = pool_kernel["threads"] / max(pool_kernel["elements_written"], 1)
            rows.append((name, len(kernels), pool_kernel["threads_per_block"], ratio, moved / minimum))
    print("\nworkload | kernels | threads/block | threads per output | DRAM bytes / minimum")
    for r in rows:
        print(f"{r[0]} | {r[1]} | {r[2]} | {r[3]:.2f} | {r[4]:.2f}")
    for name, _, per_block, ratio, dram in rows:
        if "global" not in name and "gap" not in name:  # global pools: a warp per plane
            # one output per thread (2-D/3-D chains): at most the tile's last partial warp idle
            assert ratio <= 1.0 + 31 / (per_block - 31), name
        assert dram <= DRAM_ALLOWANCE.get(name, 1.0 + 1e-9), name


@needs_nvcc
@pytest.mark.slow
def test_ptxas_workloads():
    """ptxas -v on every workload's kernels for sm_80: no spills, no stack frame (registers
    and shared memory printed with -s). (Every op's kernels get the same check by default in
    test_every_case_builds_for_arch; this one names the workload of each kernel.)"""
    sources = [cc.cuda_build(_workload_module(*w), "sm_80").source for w in WORKLOADS]
    rows = cc.ptxas_report(sources, archs=["sm_80"])
    assert len(rows) >= len(WORKLOADS)
    print("\nworkload | kernel | registers | smem bytes | spill stores/loads")
    for r in rows:
        print(f"{WORKLOADS[r['source']][0]} | {r['kernel']} | {r['registers']} | {r['smem']} | "
              f"{r['spill_stores']}/{r['spill_loads']}")
    bad = [r for r in rows if r["spill_stores"] or r["spill_loads"] or r["stack"]]
    assert not bad, bad


def every_case():
    cases = [(shape, dtype, emit) for _, shape, dtype, emit, _ in CASES]
    for dtype in DTYPES:
        cases += [(shape, dtype, emit) for shape, emit in dtype_cases(dtype)]
    cases += [([2, 3, 11, 13], dt, maxp([3, 3], [2, 2], [1, 1, 1, 1], return_indices=True)) for dt in ("float16", "bfloat16")]
    return cases


@pytest.mark.parametrize("arch,step", [pytest.param("sm_80", 3, id="sm_80-every-third")]
                         + [pytest.param(a, 1, id=a, marks=pytest.mark.slow) for a in cc.ARCHS])
def test_every_case_builds_for_arch(arch, step):
    """Every case above (ops, dtypes, edge geometries) builds for the arch, no scheduled block
    writes outside its buffer, every kernel passes VerifyGPUCode and, with nvcc, ptxas shows no
    spills and no stack frame. By default every third case for sm_80 (the suite's time budget);
    every case for sm_75, sm_80 and sm_90 with -m slow: the same TIR, only the code generation
    differs."""
    cases = every_case()[::step]
    build = cc.cuda_build(cc.batch_module(cases), arch)
    for name, func in build.scheduled.items():
        assert not cc.out_of_bounds_writes(func), name
    verdict = cc.verify_gpu(build)
    assert len(verdict) >= len(cases) and all(verdict.values()), [k for k, v in verdict.items() if not v]
    if cc.have_nvcc():
        rows = cc.ptxas_report([build.source], archs=[arch])
        assert len(rows) == len(verdict)
        bad = [r for r in rows if r["spill_stores"] or r["spill_loads"] or r["stack"]]
        assert not bad, bad


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(16))
def test_simulation_random(seed):
    """Random geometries (rank 1-3, dilations, ceil, pads) for max (with indices) and average."""
    for _, mod in random_modules(seed):
        check_simulation(mod)


def random_modules(seed):
    """(kind, module) of seed's random geometry: max in a dtype of DTYPES, max with Indices and
    average in float32 (tests/gpu_bundle.py runs the same on a GPU)."""
    rng = np.random.default_rng(500 + seed)
    rank = 1 + seed % 3
    k = [int(v) for v in rng.integers(1, 5, rank)]
    s = [int(v) for v in rng.integers(1, 3, rank)]
    d = [int(v) for v in rng.integers(1, 3, rank)]
    p = [int(rng.integers(0, kk)) for kk in k] + [int(rng.integers(0, kk)) for kk in k]
    low = max((kk - 1) * dd + 1 for kk, dd in zip(k, d))  # every window fits the data
    shape = [1, int(rng.integers(1, 4))] + [int(v) for v in rng.integers(low, low + 12, rank)]
    ceil = bool(rng.integers(0, 2))
    dtype = DTYPES[seed % len(DTYPES)]
    yield "max", module(shape, dtype, maxp(k, s, p, d, ceil))
    yield "indices", module(shape, "float32", maxp(k, s, p, d, ceil, return_indices=True))
    yield "avg", module(shape, "float32", avgp(k, s, p, d, ceil, cip=bool(seed % 2)))


# ---------------------------------------------------------------------------------------------
# 16-byte loads
# ---------------------------------------------------------------------------------------------

# Every pool kernel of these loads its input in 16-byte pieces (one workload per form) ...
VECTOR_LOADS = [
    ("max_2x2s2", [1, 8, 16, 32], "float32", maxp([2, 2], [2, 2])),  # all-taps pass, 2 outputs a thread
    ("avg_2x2s2", [1, 8, 16, 32], "float32", avgp([2, 2], [2, 2])),  # window reduction
    ("indices_2x2s2", [1, 4, 8, 16], "float32", maxp([2, 2], [2, 2], return_indices=True)),
    ("max_2x2s2_fp16", [1, 4, 8, 32], "float16", maxp([2, 2], [2, 2])),  # 8 halves, 4 outputs a thread
    ("max_2x2s2_uint8", [1, 2, 4, 64], "uint8", maxp([2, 2], [2, 2])),  # 16 bytes, 8 outputs a thread
    ("max_1d_k4s4", [2, 3, 64], "float32", maxp([4], [4])),  # one window a piece
    ("max_3x3s2_staged", [1, 8, 20, 20], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1])),  # rows into shared
    ("avg_3x3s1_staged", [1, 4, 12, 16], "float32", avgp([3, 3], [1, 1], [1, 1, 1, 1])),
    ("max_3x3s2_row_tiles", [1, 2, 32, 128], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1])),  # halo clipped
    ("avg_3x3s1_row_tiles", [1, 2, 23, 48], "float32", avgp([3, 3], [1, 1], [1, 1, 1, 1])),  # uneven tiles
    ("global_avg_warp", [1, 9, 40, 40], "float32", glob("avg")),  # warp per plane
    ("global_max_thread", [1, 5, 32, 32], "float32", glob("max")),  # thread per plane (NaN max)
    ("global_lp_warp_fp16", [1, 3, 32, 32], "float16", glob("lp")),
]
# ... and none of these may (scalar loads): a piece would start off a 16-byte boundary, or a
# window reads through a bounds check.
SCALAR_LOADS = [
    ("global_avg_7x7", [1, 32, 7, 7], "float32", glob("avg")),  # 49-float planes
    ("global_avg_warp_odd", [1, 4, 36, 35], "float32", glob("avg")),  # rows of 35
    ("max_2x2s2_odd_width", [1, 2, 16, 17], "float32", maxp([2, 2], [2, 2])),  # rows of 17
    ("max_2x2s2_ceil", [1, 2, 16, 15], "float32", maxp([2, 2], [2, 2], ceil=True)),  # overhang
    ("avg_2x2s2_pad", [1, 2, 16, 16], "float32", avgp([2, 2], [2, 2], [1, 1, 1, 1])),  # padding
    ("max_1d_k4s4_odd", [2, 3, 50], "float32", maxp([4], [4])),  # planes of 50
    ("max_3x3s2_odd_width", [1, 8, 20, 21], "float32", maxp([3, 3], [2, 2], [1, 1, 1, 1])),  # staged rows of 21
    ("max_3x3s1_column_tiles", [1, 4, 14, 200], "float32", maxp([3, 3], [1, 1], [1, 1, 1, 1])),  # tiles mid-row
]


def _accesses(build):
    return {name: cuda.vector_accesses(func) for name, func in _pool_funcs(build).items()}


@needs_nvcc
def test_vector_loads_in_ptx():
    """Each form's kernel loads 16 bytes at once (ld.global.nc.v4 in the PTX); every vector
    access of the scheduled TIR is provably aligned; ptxas: no spills, no stack."""
    build = cc.cuda_build(cc.batch_module([c[1:] for c in VECTOR_LOADS]), "sm_80", overrides=STAGED)
    accesses = _accesses(build)
    assert len(accesses) == len(VECTOR_LOADS)
    for name, found in accesses.items():
        assert found and all(aligned for _, _, aligned in found), (name, found)
    kernels = cc.ptx_kernels(build.source)
    loads = {name: len(cc.PTX_VECTOR_LOAD.findall(text)) for name, text in kernels.items()}
    assert len(loads) == len(VECTOR_LOADS) and all(loads.values()), loads
    rows = cc.ptxas_report([build.source], archs=["sm_80"])
    assert not [r for r in rows if r["spill_stores"] or r["spill_loads"] or r["stack"]], rows


@needs_nvcc
def test_scalar_loads_where_alignment_is_not_provable():
    build = cc.cuda_build(cc.batch_module([c[1:] for c in SCALAR_LOADS]), "sm_80")
    assert all(found == [] for found in _accesses(build).values()), _accesses(build)
    kernels = cc.ptx_kernels(build.source)
    assert kernels and not [n for n, text in kernels.items() if cc.PTX_GLOBAL_VECTOR.search(text)]


def test_misaligned_vector_access_is_caught():
    """The alignment proof is not vacuous: the rows-of-17 2x2 pool scheduled with vector loads
    regardless has a misaligned one, named by vector_accesses; the rule schedules it scalar."""
    x = te.placeholder((1, 2, 16, 17), "float32", name="x")
    func = te.create_prim_func([x, compute.max_pool(x, [2, 2], [2, 2], None, [0] * 4)])
    forced = s_tir.Schedule(func)
    cuda.schedule_function(forced, cuda.CudaConfig.for_target(tvm.target.Target(SM80)))
    assert ("x", 4, False) in cuda.vector_accesses(forced.mod["main"])
    assert cuda.vector_accesses(cuda.Pool().apply(func, tvm.target.Target(SM80), False).mod["main"]) == []


@pytest.mark.parametrize("case", VECTOR_LOADS + SCALAR_LOADS[:3], ids=[c[0] for c in VECTOR_LOADS + SCALAR_LOADS[:3]])
def test_simulation_vector_forms(case):
    """The vector-load forms (and the fallbacks), simulated: bit for bit the unscheduled compute,
    and the simulated schedule has the vector loads too (the same decisions as on the GPU)."""
    name, shape, dtype, emit = case
    mod = module(shape, dtype, emit)
    check_simulation(mod, exact="warp" not in name, overrides=STAGED)
    with cc.simulating(overrides=STAGED):
        funcs = {n: f for n, f in cc.scheduled_funcs(mod, cc.CPU).items() if "tvm_pool" in n}
    (accesses,) = [cuda.vector_accesses(f) for f in funcs.values()]
    assert bool(accesses) == (case in VECTOR_LOADS), accesses


# ---------------------------------------------------------------------------------------------
# Oracles: onnxruntime on the host CPU, PyTorch on the device
# ---------------------------------------------------------------------------------------------
#
# On a GPU, every op runs on the device and is compared with onnxruntime (the ONNX ops) or
# PyTorch on the same device (the adaptive and TensorRT ops, which ONNX lacks). The same
# comparisons run in the default suite with the CUDA rule simulated on the CPU (torch on the
# CPU), so the oracle code and the cases are exercised everywhere.


def _onnx(op, shape, dtype="float32", outputs=1, opset=22, **attrs):
    return (op, shape, dtype, attrs, outputs, opset)


# (id, (ONNX op, input shape, dtype, attributes, outputs, opset)): every ONNX pooling op, over the
# geometries of the rule's forms (16-byte loads, staged rows, warp reductions, fallbacks).
ONNX_CASES = [
    ("maxpool_3x3s2_staged", _onnx("MaxPool", [1, 8, 20, 20], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("maxpool_2x2s2_vector", _onnx("MaxPool", [1, 8, 16, 32], kernel_shape=[2, 2], strides=[2, 2])),
    ("maxpool_2x2s2_odd", _onnx("MaxPool", [1, 2, 15, 17], kernel_shape=[2, 2], strides=[2, 2])),
    ("maxpool_ceil_dilated", _onnx("MaxPool", [2, 3, 13, 12], kernel_shape=[3, 2], strides=[2, 1],
                                   pads=[1, 0, 2, 1], dilations=[2, 3], ceil_mode=1)),
    ("maxpool_indices", _onnx("MaxPool", [2, 3, 9, 10], outputs=2, kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1])),
    ("maxpool_indices_2x2s2_vector", _onnx("MaxPool", [1, 4, 8, 16], outputs=2, kernel_shape=[2, 2], strides=[2, 2])),
    ("maxpool_fp16_vector", _onnx("MaxPool", [1, 4, 8, 32], "float16", kernel_shape=[2, 2], strides=[2, 2])),
    ("maxpool_uint8_vector", _onnx("MaxPool", [1, 2, 4, 64], "uint8", kernel_shape=[2, 2], strides=[2, 2])),
    ("maxpool_int8_3x3s2", _onnx("MaxPool", [1, 3, 11, 13], "int8", kernel_shape=[3, 3], strides=[2, 2],
                                 pads=[1, 1, 1, 1])),
    ("maxpool_1d_k4s4_vector", _onnx("MaxPool", [2, 3, 64], kernel_shape=[4], strides=[4])),
    ("maxpool_3d", _onnx("MaxPool", [1, 2, 6, 9, 9], kernel_shape=[2, 3, 3], strides=[1, 2, 2],
                         pads=[0, 1, 1, 1, 1, 1])),
    ("avgpool_2x2s2_vector", _onnx("AveragePool", [1, 8, 16, 32], kernel_shape=[2, 2], strides=[2, 2])),
    ("avgpool_3x3s1_cip", _onnx("AveragePool", [1, 4, 12, 16], kernel_shape=[3, 3], strides=[1, 1],
                                pads=[1, 1, 1, 1], count_include_pad=1)),
    ("avgpool_ceil_asym", _onnx("AveragePool", [2, 3, 12, 11], kernel_shape=[3, 3], strides=[2, 2],
                                pads=[1, 0, 2, 1], ceil_mode=1)),
    ("lppool_p2", _onnx("LpPool", [1, 3, 9, 8], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], p=2)),
    ("globalmaxpool_7x7", _onnx("GlobalMaxPool", [2, 32, 7, 7])),
    ("globalmaxpool_32x32", _onnx("GlobalMaxPool", [1, 5, 32, 32])),
    ("globalavgpool_7x7", _onnx("GlobalAveragePool", [2, 32, 7, 7])),
    ("globalavgpool_40x40_warp", _onnx("GlobalAveragePool", [1, 9, 40, 40])),
    # onnxruntime 1.31 has GlobalLpPool-2, not -22 (the same op)
    ("globallppool_20x20_warp", _onnx("GlobalLpPool", [1, 3, 20, 20], opset=18, p=2)),
]


def _close(got, want, name):
    assert len(got) == len(want), name
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (name, i, g.shape, w.shape)
        if g.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w, err_msg=f"{name} output {i}")
        else:
            tol = 2e-3 if g.dtype == np.float16 else 1e-5
            np.testing.assert_allclose(g.astype(np.float32), np.asarray(w).astype(np.float32), rtol=tol, atol=tol,
                                       err_msg=f"{name} output {i}")


def check_against_onnxruntime(case, target, device):
    """tvm_pool compiled for ``target`` and run on ``device``, against onnxruntime on the host."""
    import oracles  # pylint: disable=import-outside-toplevel

    name, (op, shape, dtype, attrs, outputs, opset) = case
    model = oracles.pool_model(op, shape, dtype, opset=opset, num_outputs=outputs, **attrs)
    feeds = {"X": cc.data(shape, dtype)}
    got = oracles.run_tvm_pool(model, feeds, target=target, device=device)
    _close(got, oracles.run_onnxruntime(model, feeds), name)


def _trt_blend(f, t, blend):
    return (1 - blend) * f.max_pool2d(t, 3, 2, 1) + blend * f.avg_pool2d(t, 3, 2, 1, count_include_pad=False)


# (id, shape, emit, the same in torch.nn.functional): the ops ONNX lacks (and plane-numbered
# Indices, PyTorch's convention), float32.
TORCH_CASES = [
    ("adaptive_avg", [1, 3, 10, 7], adaptive_avg([3, 4]), lambda f, t: f.adaptive_avg_pool2d(t, [3, 4])),
    ("adaptive_avg_3d", [1, 2, 5, 6, 7], adaptive_avg([2, 3, 4]), lambda f, t: f.adaptive_avg_pool3d(t, [2, 3, 4])),
    ("adaptive_max_index", [1, 3, 10, 7], adaptive_max([3, 4]),
     lambda f, t: f.adaptive_max_pool2d(t, [3, 4], return_indices=True)),
    ("indices_plane_2x2s2_vector", [1, 4, 8, 16], maxp([2, 2], [2, 2], return_indices=True, index_scope="plane"),
     lambda f, t: f.max_pool2d(t, 2, 2, return_indices=True)),
    ("trt_max", [1, 3, 10, 11], trt("MAX", [3, 3], [2, 2], [1, 1], [1, 1]), lambda f, t: f.max_pool2d(t, 3, 2, 1)),
    ("trt_avg_excl", [1, 3, 10, 11], trt("AVERAGE", [3, 3], [2, 2], [1, 1], [1, 1]),
     lambda f, t: f.avg_pool2d(t, 3, 2, 1, count_include_pad=False)),
    ("trt_blend", [1, 3, 10, 11], trt("MAX_AVERAGE_BLEND", [3, 3], [2, 2], [1, 1], [1, 1], blend=0.25),
     lambda f, t: _trt_blend(f, t, 0.25)),
]


def check_against_torch(case, target, device, torch_device: str):
    """tvm_pool compiled for ``target`` and run on ``device``, against PyTorch on ``torch_device``."""
    torch = pytest.importorskip("torch")

    name, shape, emit, reference = case
    mod = module(shape, "float32", emit)
    xs = inputs_for(mod)
    got = cc.run_on(tvm_pool.compile(mod, target=target), device, *xs)
    want = reference(torch.nn.functional, torch.from_numpy(xs[0]).to(torch_device))
    want = [w.cpu().numpy() for w in (want if isinstance(want, tuple) else (want,))]
    _close(got, want, name)


@pytest.mark.parametrize("case", ONNX_CASES, ids=[c[0] for c in ONNX_CASES])
def test_simulation_matches_onnxruntime(case):
    """The oracle comparison of the GPU tests below, with the CUDA rule simulated on the CPU."""
    with cc.simulating():
        check_against_onnxruntime(case, cc.CPU, tvm.cpu())


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_simulation_matches_torch(case):
    with cc.simulating():
        check_against_torch(case, cc.CPU, tvm.cpu(), "cpu")


# ---------------------------------------------------------------------------------------------
# On a GPU
# ---------------------------------------------------------------------------------------------


def _device_target():
    """tvm.cuda(0) and a target for its arch."""
    from tvm_pool.bench import cuda as bench_cuda  # pylint: disable=import-outside-toplevel

    dev, arch = bench_cuda.device_or_reason()
    return dev, cc.gpu_target(arch)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("case", ONNX_CASES, ids=[c[0] for c in ONNX_CASES])
def test_gpu_matches_onnxruntime(case):
    """On the device: every ONNX pooling op against onnxruntime on the host CPU."""
    dev, target = _device_target()
    check_against_onnxruntime(case, target, dev)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("case", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_gpu_matches_torch(case):
    """On the device: the adaptive and TensorRT ops against PyTorch on the same device."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device (a CPU-only wheel?)")
    dev, target = _device_target()
    check_against_torch(case, target, dev, "cuda")


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_gpu_matches_unscheduled_cpu(case):
    """On the device: every case (every dtype and edge geometry, NaN included, which the
    oracles above do not all agree on) against the unscheduled CPU build."""
    _, shape, dtype, emit, exact = case
    mod = module(shape, dtype, emit)
    xs = inputs_for(mod, nan=True)
    want = cc.run_cpu(tvm_pool.compile(mod, target="llvm", schedule=False), *xs)
    dev, target = _device_target()
    got = cc.run_on(tvm_pool.compile(mod, target=target), dev, *xs)
    for g, w in zip(got, want):
        if exact and g.dtype.kind in "iu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype("float32"), w.astype("float32"), rtol=1e-5, atol=1e-5)


def test_overlapping_windows_compute_their_passes_per_thread_in_registers():
    """Channel-first chains of overlapping windows (3x3 s2, 1x3x3, ceil mode, Indices) compute the
    earlier passes each output needs per thread into registers: no shared memory, a local
    buffer, one output per thread. Non-overlapping 3-D windows (2x2x2 s2), whole planes and a
    symbolic batch keep their staging; every one simulates bit for bit."""
    def decided(func):
        text = cuda.Pool().schedule(s_tir.Schedule(func), CONFIG).mod["main"]
        return cuda.shared_bytes(text) == 0 and '"local"' in text.script()

    overlapping = [
        _te_func([1, 8, 20, 20], lambda x: compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1])),
        _te_func([1, 4, 4, 12, 12], lambda x: compute.max_pool(x, [1, 3, 3], [1, 2, 2], None, [0, 1, 1, 0, 1, 1])),
        _te_func([1, 4, 11, 11], lambda x: compute.max_pool(x, [3, 3], [2, 2], None, [0] * 4, "NOTSET", True)),
        _te_func([1, 4, 10, 10], lambda x: compute.max_pool(x, [3, 3], [2, 2], None, [1] * 4, return_indices=True)),
        _te_func([1, 4, 10, 10], lambda x: compute.avg_pool(x, [3, 3], [1, 1], None, [1] * 4)),
    ]
    kept = [
        _te_func([1, 4, 8, 8, 8], lambda x: compute.max_pool(x, [2, 2, 2], [2, 2, 2], None, [0] * 6)),
        _te_func([1, 4, 7, 7], lambda x: compute.global_pool(x, "max")),
    ]
    for func, params in overlapping:
        assert decided(func), func
        _simulated_equal(func, params, CONFIG, exact=True)
    for func, params in kept:
        assert not decided(func), func
        _simulated_equal(func, params, CONFIG, exact=True)
    # the knob turns it off: the tile's earlier passes go to shared memory again
    func = overlapping[0][0]
    assert cuda.shared_bytes(cuda.Pool().schedule(s_tir.Schedule(func), STAGED_CONFIG).mod["main"]) > 0
