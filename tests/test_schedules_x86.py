"""x86 schedules against the unscheduled computes: values and indices, every dtype, edge shapes.

Correctness only (timing lives in the benchmark). Each case builds the same Relax module twice,
``tvm_pool.compile(..., schedule=False)`` and scheduled for an x86 target, and compares bit-exact.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import relax, s_tir

import tvm_pool
from tvm_pool import relax_ops
from tvm_pool.schedules import cpu, rules_for, x86
from tvm_pool.targets import host_target
from helpers import host_is_x86 as _host_is_x86
from helpers import emit_module, pool_module

# Targets the rule is asked about (compile only) ...
AVX512 = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}
AVX2 = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "haswell", "num-cores": 2}
# ... and the one the bit-exact runs use: this machine's own CPU. A fixed mcpu can emit
# instructions this CPU lacks (znver5 code uses AVX-VNNI, which a znver4 host does not have:
# SIGILL), so runs never use a CPU name other than the host's.
RUN = host_target()


pytestmark = pytest.mark.skipif(not _host_is_x86(), reason="x86 schedules run on an x86 host")


_module = emit_module


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    x = rng.standard_normal(shape).astype("float32")
    x.flat[::17] = x.flat[min(3, x.size - 1)]  # ties
    if dtype == "bfloat16":
        import ml_dtypes  # pylint: disable=import-outside-toplevel

        return x.astype(ml_dtypes.bfloat16)
    return x.astype(dtype)


def _run(mod, x, target, schedule):
    ex = tvm_pool.compile(mod, target=target, schedule=schedule)
    vm = relax.VirtualMachine(ex, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x))
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [o.numpy() for o in out]


def _check(mod, shape, dtype, target=RUN, nan=False):
    x = _data(shape, dtype)
    if nan and dtype.startswith(("float", "bfloat")):
        x.flat[::23] = np.nan
    want = _run(mod, x, target, schedule=False)
    got = _run(mod, x, target, schedule=True)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype.name == "bfloat16":  # numpy sees no NaN in ml_dtypes arrays
            g, w = g.astype(np.float32), w.astype(np.float32)
        np.testing.assert_array_equal(g, w)


def _is_scheduled(mod, target):
    """The rule matched every pooling PrimFunc (ApplyDefaultSchedule marks them)."""
    tgt = tvm.target.Target(target)
    lowered = tvm_pool.lowering.pipeline(tgt)(mod)
    funcs = [f for _, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    return funcs and all("tirx.is_scheduled" in f.attrs or "global_symbol" in f.attrs for f in funcs)


def max2d(k, s, p, ceil=False, indices=False):
    return lambda bb, x: relax_ops.max_pool(bb, x, k, strides=s, pads=p, ceil_mode=ceil, return_indices=indices)


def avg2d(k, s, p, ceil=False, cip=False):
    return lambda bb, x: relax_ops.avg_pool(bb, x, k, strides=s, pads=p, ceil_mode=ceil, count_include_pad=cip)


# ---------------------------------------------------------------------------------------------
# rule plumbing
# ---------------------------------------------------------------------------------------------


def test_rules_for_targets():
    assert rules_for(tvm.target.Target(AVX512))
    assert rules_for(tvm.target.Target(AVX2))
    from tvm_pool.schedules import arm  # pylint: disable=import-outside-toplevel

    aarch64 = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"})
    assert [type(r) for r in rules_for(aarch64)] == [arm.Pool]
    assert [type(r) for r in rules_for(tvm.target.Target(AVX2))] == [x86.Pool]
    from tvm_pool.schedules import cuda  # pylint: disable=import-outside-toplevel

    assert [type(r) for r in rules_for(tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))] == [cuda.Pool]


def test_vector_bits():
    assert x86.Pool().config(tvm.target.Target(AVX512)).vector_bits == 512
    assert x86.Pool().config(tvm.target.Target(AVX2)).vector_bits == 256


def test_rule_skips_non_pool_funcs():
    from tvm import te  # pylint: disable=import-outside-toplevel

    a = te.placeholder((4, 4), "float32")
    b = te.compute((4, 4), lambda i, j: a[i, j] + 1)
    func = te.create_prim_func([a, b])
    assert x86.Pool().apply(func, tvm.target.Target(AVX512), False) is None


def test_meta_schedule_rules_registered():
    from tvm_pool.schedules import register_meta_schedule_rules  # pylint: disable=import-outside-toplevel

    names = register_meta_schedule_rules()
    assert "s_tir.meta_schedule.cpu.tvm_pool.max" in names
    assert tvm.get_global_func("s_tir.meta_schedule.cpu.tvm_pool.avg_sum") is not None
    assert tvm.get_global_func("s_tir.meta_schedule.cpu.meta_schedule.pool_max") is not None


@pytest.mark.parametrize("kernel,stride,pads", [([3, 3], [2, 2], [1, 1, 1, 1]), ([2, 2], [2, 2], [0, 0, 0, 0])])
def test_meta_schedule_rule_returns_space(kernel, stride, pads):
    """The custom rule schedules both forms: separable passes (3x3 s2) and the direct reduction."""
    from tvm import te  # pylint: disable=import-outside-toplevel

    from tvm_pool import compute  # pylint: disable=import-outside-toplevel
    from tvm_pool.schedules import register_meta_schedule_rules  # pylint: disable=import-outside-toplevel

    register_meta_schedule_rules()
    x = te.placeholder((1, 64, 56, 56), "float32", name="x")  # large enough to run in parallel
    y = compute.max_pool(x, kernel, stride, None, pads)
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    rule = tvm.get_global_func("s_tir.meta_schedule.cpu.tvm_pool.max")
    with tvm.target.Target(AVX512):
        spaces = rule(sch, sch.get_sblock("max_pool"))
    assert len(spaces) >= 1
    # the hand-written choice comes first and runs in parallel at this size; the design space
    # (x86.KNOBS) also holds a one-thread variant for tuning to measure
    assert "T.parallel" in spaces[0].mod["main"].script()


def test_separable_passes_chosen():
    """Overlapping windows reduce axis by axis; non-overlapping and over-long ones directly."""
    from tvm import te  # pylint: disable=import-outside-toplevel

    from tvm_pool import compute  # pylint: disable=import-outside-toplevel
    from tvm_pool.schedules import analysis  # pylint: disable=import-outside-toplevel

    def chains(kernel, stride, shape=(1, 2, 40, 40)):
        x = te.placeholder(shape, "float32", name="x")
        y = compute.max_pool(x, kernel, stride, None, [0] * (2 * len(kernel)))
        return analysis.pass_chains(s_tir.Schedule(te.create_prim_func([x, y])))

    (chain,) = chains([3, 3], [2, 2])
    assert chain.axes == [0, 1]
    (chain,) = chains([1, 3, 3], [1, 2, 2], shape=(1, 2, 4, 20, 20))
    assert chain.axes == [1, 2]  # the 1-tap axis has no pass
    (chain,) = chains([2, 2], [2, 2])  # no overlap: one pass of all 4 taps (compute.forms.few_taps)
    assert chain.axes == [1]
    (chain,) = chains([3, 1], [1, 1])  # one windowed axis: a single pass
    assert chain.axes == [0]
    (chain,) = chains([4], [4], shape=(1, 2, 40))
    assert chain.axes == [0]
    assert chains([3, 17], [1, 1]) == []  # longer than MAX_PASS_TAPS, more taps than MAX_ALL_TAPS
    (chain,) = chains([32], [1], shape=(1, 2, 100))  # long max, stride 1: doubling levels, then the result
    assert chain.axes == [0] * 5
    assert chains([40], [2], shape=(1, 2, 100)) == []  # long and strided: the reduction loop


@pytest.mark.parametrize(
    "shape",
    [
        [1, 2, 100, 100],  # padded plane over 32 KB: bounds checks inlined into the first pass
        [1, 64, 56, 56],  # over 512 KB: planes in parallel
        [2, 64, 182, 182],  # over 16 MB: out of cache, LLVM vectorises the last pass
    ],
)
def test_separable_schedule_regimes(shape):
    _check(_module(shape, "float32", max2d([3, 3], [2, 2], [1, 1, 1, 1])), shape, "float32", nan=True)
    _check(_module(shape, "float32", avg2d([3, 3], [1, 1], [1, 1, 1, 1])), shape, "float32")


def test_separable_schedule_choices():
    """The measured choices of schedule_pass_chain, read off the scheduled TIR."""
    from tvm import te  # pylint: disable=import-outside-toplevel

    from tvm_pool import compute  # pylint: disable=import-outside-toplevel

    def scheduled(shape):
        x = te.placeholder(shape, "float32", name="x")
        sch = s_tir.Schedule(te.create_prim_func([x, compute.max_pool(x, [3, 3], [2, 2], None, [1, 1, 1, 1])]))
        cpu.schedule_function(sch, x86.Pool().config(tvm.target.Target(AVX512)))
        return sch.mod["main"]

    small = scheduled([1, 4, 9, 9]).script()
    assert "T.parallel" not in small  # under 512 KB: one thread
    assert 'T.sblock("pad")' in small  # small padded plane: copied once per plane
    large_plane = scheduled([1, 64, 100, 100]).script()
    assert "T.parallel" in large_plane
    assert 'T.sblock("pad")' not in large_plane  # over 32 KB: bounds checks inlined
    assert large_plane.count("T.vectorized") == 2  # both pass rows, data in cache
    out_of_cache = scheduled([2, 64, 182, 182]).script()
    assert out_of_cache.count("T.vectorized") == 1  # over 16 MB: LLVM keeps the last pass


def test_stride_one_passes_two_rows_at_a_time():
    """A stride-1 chain's first pass is computed two output rows at a time (CpuConfig.pass_row_tile:
    the last pass's shifted loads then never read the stores just made); a strided last pass,
    the knob "passes: row by row", and aarch64 keep one row. Odd row counts stay exact."""
    import dataclasses  # pylint: disable=import-outside-toplevel

    from tvm import te  # pylint: disable=import-outside-toplevel

    from tvm_pool import compute  # pylint: disable=import-outside-toplevel
    from tvm_pool.schedules import arm  # pylint: disable=import-outside-toplevel

    def scheduled(stride, config):
        x = te.placeholder([1, 64, 35, 35], "float32", name="x")
        y = compute.avg_pool(x, [3, 3], stride, None, [1, 1, 1, 1], count_include_pad=True)
        sch = s_tir.Schedule(te.create_prim_func([x, y]))
        cpu.schedule_function(sch, config)
        return sch.mod["main"].script()

    x86_config = x86.Pool().config(tvm.target.Target(AVX512))
    assert x86_config.pass_row_tile == 2
    tiled = scheduled([1, 1], x86_config)
    assert "i2_0 in range(18)" in tiled and "T.where" in tiled  # 35 rows: 17 tiles of 2 and one of 1
    assert "i2_0" not in scheduled([2, 2], x86_config)
    row_by_row = dataclasses.replace(x86_config, **dict(x86.KNOBS)["passes: row by row"])
    assert "i2_0" not in scheduled([1, 1], row_by_row)
    aarch64 = arm.Pool().config(tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}))
    assert aarch64.pass_row_tile == 1
    for shape in ([1, 64, 35, 35], [1, 8, 17, 17], [2, 3, 6, 9]):
        _check(_module(shape, "float32", avg2d([3, 3], [1, 1], [1, 1, 1, 1], cip=True)), shape, "float32")
        _check(_module(shape, "float32", max2d([3, 3], [1, 1], [1, 1, 1, 1], ceil=True)), shape, "float32", nan=True)
    # 3-D: the depth pass (non-overlapping, computed per output row) goes to the rows' tile, above
    # the tiled pass it feeds (TensorRT's random case: window 3x2x4, strides 3x1x1, int8)
    shape = [1, 2, 5, 6, 7]
    _check(_module(shape, "int8", max2d([3, 2, 3], [3, 1, 1], [0, 0, 1, 1, 1, 1])), shape, "int8")


@pytest.mark.parametrize("seed", range(8))
def test_separable_random(seed):
    """Random separable geometries (rank 2-3, dilations, ceil, pads) for max and average."""
    rng = np.random.default_rng(100 + seed)
    rank = 2 + seed % 2
    k = [int(v) for v in rng.integers(1, 5, rank)]
    k[-1] = max(k[-1], 2)
    k[-2] = max(k[-2], 2)
    s = [int(v) for v in rng.integers(1, 3, rank)]
    d = [int(v) for v in rng.integers(1, 3, rank)]
    p = [int(rng.integers(0, kk)) for kk in k] + [int(rng.integers(0, kk)) for kk in k]
    shape = [1, int(rng.integers(1, 4))] + [int(v) for v in rng.integers(2 * max(k), 14, rank)]
    ceil = bool(rng.integers(0, 2))
    dtype = ["float32", "float16", "int8", "bfloat16"][seed % 4]
    emit = lambda bb, x: relax_ops.max_pool(bb, x, k, strides=s, dilations=d, pads=p, ceil_mode=ceil)  # noqa: E731
    _check(_module(shape, dtype, emit), shape, dtype, nan=True)
    emit = lambda bb, x: relax_ops.avg_pool(  # noqa: E731
        bb, x, k, strides=s, dilations=d, pads=p, ceil_mode=ceil, count_include_pad=bool(seed % 3 == 0))
    _check(_module(shape, "float32", emit), shape, "float32")


# ---------------------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------------------

DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "uint8"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_2d_dtypes(dtype):
    shape = [2, 3, 11, 13]
    _check(_module(shape, dtype, max2d([3, 3], [2, 2], [1, 1, 1, 1])), shape, dtype, nan=True)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])  # average is float-only
def test_avg_2d_dtypes(dtype):
    shape = [1, 4, 10, 9]
    _check(_module(shape, dtype, avg2d([3, 3], [1, 1], [1, 1, 1, 1])), shape, dtype)


@pytest.mark.parametrize(
    "emit,shape",
    [
        (max2d([3, 3], [2, 2], [1, 1, 1, 1]), [1, 8, 20, 20]),  # ResNet stem
        (max2d([3, 3], [1, 1], [1, 1, 1, 1]), [1, 4, 14, 14]),  # Inception s1
        (max2d([3, 3], [2, 2], [0, 0, 0, 0], ceil=True), [1, 4, 14, 14]),  # ceil mode
        (max2d([2, 2], [2, 2], [0, 0, 0, 0]), [1, 4, 16, 16]),  # VGG
        (max2d([3, 3], [3, 1], [2, 2, 2, 2]), [1, 2, 9, 7]),  # pads = kernel-1, odd stride
        (max2d([5, 7], [1, 1], [0, 0, 0, 0]), [1, 2, 5, 7]),  # kernel = input
        (max2d([1, 1], [1, 1], [0, 0, 0, 0]), [1, 1, 1, 1]),  # size-1 everything
        (avg2d([2, 2], [2, 2], [0, 0, 0, 0]), [1, 8, 16, 16]),  # DenseNet
        (avg2d([3, 3], [2, 2], [1, 1, 1, 1], cip=True), [1, 4, 15, 15]),
        (avg2d([3, 3], [2, 2], [1, 0, 2, 1], ceil=True), [2, 3, 12, 11]),
        (avg2d([5, 5], [1, 1], [4, 4, 4, 4]), [1, 2, 6, 6]),
    ],
)
def test_2d_variants(emit, shape):
    _check(_module(shape, "float32", emit), shape, "float32")


@pytest.mark.parametrize("shape,k,s,p", [([1, 3, 50], [4], [4], [0, 0]), ([2, 2, 17], [3], [2], [1, 1]), ([1, 1, 1], [1], [1], [0, 0])])
def test_1d(shape, k, s, p):
    _check(_module(shape, "float32", lambda bb, x: relax_ops.max_pool(bb, x, k, strides=s, pads=p)), shape, "float32")
    _check(_module(shape, "float32", lambda bb, x: relax_ops.avg_pool(bb, x, k, strides=s, pads=p)), shape, "float32")


def test_3d():
    shape = [1, 3, 6, 9, 9]
    emit = lambda bb, x: relax_ops.max_pool(bb, x, [2, 3, 3], strides=[1, 2, 2], pads=[0, 1, 1, 1, 1, 1])  # noqa: E731
    _check(_module(shape, "float32", emit), shape, "float32")
    emit = lambda bb, x: relax_ops.avg_pool(bb, x, [3, 3, 3], strides=[2, 2, 2], pads=[1, 1, 1, 1, 1, 1], ceil_mode=True)  # noqa: E731
    _check(_module(shape, "float32", emit), shape, "float32")


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_lp(p):
    shape = [1, 3, 9, 8]
    emit = lambda bb, x: relax_ops.lp_pool(bb, x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1], p=p)  # noqa: E731
    _check(_module(shape, "float32", emit), shape, "float32")


@pytest.mark.parametrize("kind", ["max", "avg", "lp"])
@pytest.mark.parametrize("shape", [[1, 32, 7, 7], [2, 5, 1, 1], [1, 3, 20]])
def test_global(kind, shape):
    _check(_module(shape, "float32", lambda bb, x: relax_ops.global_pool(bb, x, kind)), shape, "float32", nan=kind == "max")


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(storage_order=1),
        dict(index_scope="plane"),
        dict(index_dtype="int32"),
    ],
)
def test_max_indices(dtype, kw):
    shape = [2, 3, 9, 10]
    emit = lambda bb, x: relax_ops.max_pool(bb, x, [3, 3], strides=[2, 2], pads=[1, 1, 1, 1], return_indices=True, **kw)  # noqa: E731
    _check(_module(shape, dtype, emit), shape, dtype, nan=True)


def test_max_indices_windows_in_padding():
    shape = [1, 2, 3, 3]
    emit = lambda bb, x: relax_ops.max_pool(bb, x, [2, 2], strides=[3, 3], pads=[1, 1, 1, 1], return_indices=True)  # noqa: E731
    _check(_module(shape, "float32", emit), shape, "float32")


def test_fused_relu_before_add_after():
    shape = [1, 8, 14, 14]
    mod = _module(
        shape, "float32", max2d([3, 3], [2, 2], [1, 1, 1, 1]),
        prologue=relax.op.nn.relu, epilogue=lambda y: relax.op.add(y, relax.const(1.5, "float32")),
    )
    _check(mod, shape, "float32")
    mod = _module(
        shape, "float32", avg2d([3, 3], [1, 1], [1, 1, 1, 1]),
        prologue=relax.op.nn.relu, epilogue=relax.op.nn.relu,
    )
    _check(mod, shape, "float32")


def test_fused_long_global_average_sums_by_halving():
    """Relu -> global average over a 56x56 plane (3136 taps: vector partial sums) -> Add (FuseOps
    fuses the Add into the pool's PrimFunc): the partial sums are added up by halving vector adds
    (a second rfactor), and the result is the unscheduled one within the rounding of a
    reassociated float sum."""
    shape = [2, 6, 56, 56]
    mod = _module(shape, "float32", lambda bb, x: relax_ops.global_pool(bb, x, "avg"),
                  prologue=relax.op.nn.relu, epilogue=lambda y: relax.op.add(y, relax.const(1.5, "float32")))
    fused = tvm_pool.lowering.fuse(mod, RUN)
    (func,) = [f for gv, f in fused.functions_items() if gv.name_hint == "fused_tvm_pool_global_avg_pool_add"]
    with RUN:
        sch = x86.Pool().apply(func, RUN, False)
    assert sch is not None and "_rf_1" in sch.mod["main"].script()
    x = _data(shape, "float32")
    want = _run(mod, x, RUN, schedule=False)[0]
    got = _run(mod, x, RUN, schedule=True)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_tvm_relax_pool_ops_and_avx2():
    """TVM's own relax.nn pools (legalized to tvm_pool computes), on an AVX2 target."""
    shape = [1, 4, 12, 12]
    mod = _module(shape, "float32", lambda bb, x: bb.emit(relax.op.nn.max_pool2d(x, [3, 3], [2, 2], [1, 1, 1, 1], ceil_mode=True)))
    _check(mod, shape, "float32", target=AVX2)


def test_adaptive_if_available():
    from tvm_pool.compute import adaptive as compute
    del compute
    shape = [1, 3, 10, 7]
    mod = _module(shape, "float32", lambda bb, x: bb.emit(relax.op.nn.adaptive_avg_pool2d(x, [3, 4])))
    _check(mod, shape, "float32")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12))
def test_random_sweep(seed):
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    k = [int(v) for v in rng.integers(1, 4, rank)]
    s = [int(v) for v in rng.integers(1, 4, rank)]
    p = [int(rng.integers(0, kk)) for kk in k] * 2
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 5))] + [int(v) for v in rng.integers(max(k), 12, rank)]
    ceil = bool(rng.integers(0, 2))
    for dtype in ("float32", "float16", "int8"):
        emit = lambda bb, x: relax_ops.max_pool(bb, x, k, strides=s, pads=p, ceil_mode=ceil, return_indices=True)  # noqa: E731
        _check(_module(shape, dtype, emit), shape, dtype, nan=True)
    emit = lambda bb, x: relax_ops.avg_pool(bb, x, k, strides=s, pads=p, ceil_mode=ceil, count_include_pad=bool(seed % 2))  # noqa: E731
    _check(_module(shape, "float32", emit), shape, "float32")


def _pool_llvm_ir(ex) -> str:
    for lib in [ex.mod, *ex.mod.imports]:
        try:
            ir = lib.inspect_source("ll")
        except Exception:  # pylint: disable=broad-except  # a module without LLVM source
            continue
        if "pool" in ir:
            return ir
    raise AssertionError("no LLVM module holds the pool")


@pytest.mark.parametrize("shape, pool", [
    ((2, 16, 14, 14), lambda x: relax.op.nn.max_pool2d(x, 3, 1, 1, ceil_mode=True)),  # a 16x16 copy: 1024 bytes
    ((1, 8, 35, 35), lambda x: relax.op.nn.avg_pool2d(x, 3, 1, 1, count_include_pad=True)),  # 37x37: 5476 bytes
])
def test_per_plane_copies_live_on_the_stack(shape, pool, monkeypatch):
    """A per-plane padded copy of 1 KB or more is allocated once per thread on the stack
    (schedules/stack_buffers.py), not through TVMBackendAllocWorkspace once per plane (what TVM's
    LowerTVMBuiltin makes of buffers from 1024 bytes on); the outputs are those of the
    workspace build."""
    mod = pool_module(shape, pool)
    x = tvm.runtime.tensor(np.random.default_rng(0).standard_normal(shape).astype("float32"))
    stacked = tvm_pool.compile(mod, host_target())
    ir = _pool_llvm_ir(stacked)
    assert "@__TVMBackendAllocWorkspace, align" not in ir
    assert re.search(r"%pad\w* = alloca \[\d+ x float\]", ir), "the padded copy is not on the stack"
    monkeypatch.setattr(x86, "STACK_BUFFER_BYTES", 0)
    workspace = tvm_pool.compile(mod, host_target())
    assert "@__TVMBackendAllocWorkspace, align" in _pool_llvm_ir(workspace)
    outs = [relax.VirtualMachine(ex, tvm.cpu())["main"](x).numpy() for ex in (stacked, workspace)]
    np.testing.assert_array_equal(outs[0], outs[1])
