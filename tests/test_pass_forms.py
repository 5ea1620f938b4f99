"""The pass forms beyond one pass per axis, randomized against onnxruntime and onnx.reference
(NaN against the spec transcription), scheduled and not, and their schedule's structure:

- long stride-1 max windows on the innermost axis, reduced by doubling
  (compute.window_reduce._doubling_passes);
- global pools over small planes, reduced as one contiguous row (compute.window_reduce._flat_plane_passes);
- long strided windows over contiguous taps, reduced into lanes of partial results first
  (schedules.cpu_reduction._vector_partial_sums)."""

from __future__ import annotations

import numpy as np
import pytest
from tvm import s_tir

import spec_reference
from oracles import pool_model, run_onnxruntime, run_reference, run_tvm_pool, try_run
from tvm_pool.compute import pool as pool_compute
from tvm_pool import spec


def _random_case(rng):
    rank = int(rng.integers(1, 3))
    kernel = int(rng.integers(pool_compute.MAX_PASS_TAPS + 1, 80))
    dilation = int(rng.choice([1, 1, 2, 3]))
    ek = (kernel - 1) * dilation + 1
    length = int(rng.integers(max(ek - 10, 2), ek + 60))
    pads = [int(rng.integers(0, kernel)) for _ in range(2)]  # onnxruntime: pad < kernel
    while length + pads[0] + pads[1] < ek:
        length += 7
    ceil_mode = int(rng.integers(0, 2))
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + ([int(rng.integers(1, 4))] if rank == 2 else []) + [length]
    attrs = dict(kernel_shape=[1] * (rank - 1) + [kernel], strides=[1] * rank, dilations=[1] * (rank - 1) + [dilation],
                 pads=[0] * (rank - 1) + [pads[0]] + [0] * (rank - 1) + [pads[1]], ceil_mode=ceil_mode)
    return shape, attrs


def _input(rng, shape, dtype):
    if dtype in ("int8", "uint8"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("seed", range(24))
def test_long_max_window_matches_oracles(seed):
    rng = np.random.default_rng(seed)
    shape, attrs = _random_case(rng)
    dtype = ["float32", "float32", "float16", "int8", "uint8", "float64"][seed % 6]
    x = _input(rng, shape, dtype)
    model = pool_model("MaxPool", shape, dtype=dtype, **attrs)
    got = run_tvm_pool(model, {"X": x})[0]
    np.testing.assert_array_equal(got, run_onnxruntime(model, {"X": x})[0], err_msg=f"{shape} {attrs} {dtype}")
    np.testing.assert_array_equal(got, run_tvm_pool(model, {"X": x}, schedule=False)[0])
    if dtype == "float32":
        reference, _ = try_run(run_reference, model, {"X": x})  # None where onnx.reference fails (an empty window)
        if reference is not None:
            np.testing.assert_array_equal(got, reference[0])
        # NaN must propagate through every level. Both runtimes skip NaN (docs/conformance.md
        # row 7), so NaN is checked against the spec transcription, which propagates it.
        x.ravel()[rng.random(x.size) < 0.01] = np.nan
        got = run_tvm_pool(model, {"X": x})[0]
        want, _ = spec_reference.max_pool(x, attrs["kernel_shape"], attrs["strides"], attrs["dilations"], attrs["pads"],
                                          ceil_mode=attrs["ceil_mode"])
        np.testing.assert_array_equal(got, want, err_msg=f"{shape} {attrs} NaN")
        np.testing.assert_array_equal(got, run_tvm_pool(model, {"X": x}, schedule=False)[0])


def test_doubling_chosen_only_for_long_stride1_inner_windows():
    def windows(kernel, strides, length=100):
        rank = len(kernel)
        return spec.resolve_windows([length] * rank, kernel, strides, [1] * rank, [0] * (2 * rank), "NOTSET", False)

    assert pool_compute.doubling(windows([32], [1]))
    assert pool_compute.doubling(windows([1, 17], [1, 1]))
    assert not pool_compute.doubling(windows([16], [1]))  # short: one expression of every tap
    assert not pool_compute.doubling(windows([32], [2]))  # strided: levels at every position would waste work
    assert not pool_compute.doubling(windows([17, 1], [1, 1]))  # not the innermost axis
    assert not pool_compute.doubling(windows([3, 17], [1, 1]))  # two windowed axes


def test_channel_last_windows_take_every_tap_where_passes_cost_more():
    """Channel-last maxima and sums of the data take one expression of every tap where the
    count of vector operations per output says so (forms.all_taps_beat_passes); channel-first
    pools, the argmax's keys and sums of converted taps keep their forms."""
    from tvm_pool.compute import forms  # pylint: disable=import-outside-toplevel

    def form(kernel, strides, reduction="max", channel_last=True):
        rank = len(kernel)
        w = spec.resolve_windows([56] * rank, kernel, strides, [1] * rank, [0] * (2 * rank), "NOTSET", False)
        return forms.choose_form(w, reduction, channel_last=channel_last)

    # max: 2 operations a tap, 4 an intermediate element
    assert form([3, 3], [2, 2]) == forms.ALL_TAPS  # 19 against 27
    assert form([1, 3, 3], [1, 2, 2]) == forms.ALL_TAPS  # the 3-D video pool: the same windows
    assert form([2, 2], [1, 1]) == forms.ALL_TAPS  # 9 against 13
    assert form([3, 3], [1, 1]) == forms.AXIS_PASSES  # stride 1: 19 against 17
    assert form([5, 5], [2, 2]) == forms.AXIS_PASSES  # 51 against 39
    assert form([3, 3, 3], [2, 2, 2]) == forms.AXIS_PASSES  # three windowed axes keep the passes
    assert form([3], [2]) == forms.AXIS_PASSES  # one pass is every tap already
    # sum: 1 a tap
    assert form([3, 3], [1, 1], "sum") == forms.ALL_TAPS  # 10 against 11
    assert form([3, 3], [2, 2], "sum") == forms.ALL_TAPS  # 10 against 18
    assert form([5, 5], [1, 1], "sum") == forms.AXIS_PASSES  # 26 against 15
    assert form([2, 2], [2, 2], "sum") == forms.DIRECT  # not separable: the direct reduction, as channel-first
    # unchanged
    assert form([3, 3], [2, 2], channel_last=False) == forms.AXIS_PASSES
    assert form([3, 3], [2, 2], "sum", channel_last=False) == forms.AXIS_PASSES
    assert form([3, 3], [2, 2], "argmax") == forms.AXIS_PASSES
    assert form([3, 3], [2, 2], "converted_sum") == forms.AXIS_PASSES
    assert form([2, 2], [2, 2]) == form([2, 2], [2, 2], channel_last=False) == forms.ALL_TAPS


@pytest.mark.parametrize("kernel,strides,pads", [([3, 3], [1, 1], [1, 1, 1, 1]), ([3, 3], [2, 2], [1, 1, 1, 1]),
                                                 ([2, 3], [1, 2], [0, 1, 1, 1])])
def test_channel_last_sum_of_every_tap_adds_as_the_passes_do(kernel, strides, pads):
    """A channel-last average taken as one expression of every tap adds along the outermost axis
    first, as the channel-first passes do: the two layouts give the same bits."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import te  # pylint: disable=import-outside-toplevel

    from tvm_pool.compute import forms  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(7)
    x = (rng.standard_normal((2, 19, 23, 8)) * 1e3).astype("float32")  # NHWC; wide range: rounding shows
    outs = {}
    for layout, data in (("NHWC", x), ("NCHW", x.transpose(0, 3, 1, 2).copy())):
        ph = te.placeholder(data.shape, "float32", name="x")
        out = pool_compute.avg_pool(ph, kernel, strides, None, pads, layout=layout)
        lib = tvm.compile(te.create_prim_func([ph, out]), target="llvm")
        y = tvm.runtime.empty([int(d) for d in out.shape], "float32")
        lib(tvm.runtime.tensor(data), y)
        outs[layout] = y.numpy()
    w = spec.resolve_windows([19, 23], kernel, strides, [1, 1], pads, "NOTSET", False)
    assert forms.choose_form(w, "sum", channel_last=True) == forms.ALL_TAPS
    np.testing.assert_array_equal(outs["NHWC"], outs["NCHW"].transpose(0, 2, 3, 1))


def test_levels_computed_per_row_and_scheduled_equals_unscheduled():
    import tvm
    from tvm import te

    import tvm_pool
    from tvm_pool.targets import host_target
    from tvm_pool.schedules import analysis, cpu, rule_for

    x = te.placeholder((1, 8, 3, 300), "float32", name="x")
    y = pool_compute.max_pool(x, [1, 40], [1, 1], [1, 1], [0, 20, 0, 19])
    func = te.create_prim_func([x, y])
    sch = s_tir.Schedule(func)
    (chain,) = analysis.pass_chains(sch)
    assert len(chain.passes) == 6 and set(chain.axes) == {1}  # levels of 2..32 taps, then the result
    target = host_target()
    cpu.schedule_function(sch, rule_for(target).config(target))
    # every level sits inside the row loop of the result (computed per row, not per output)
    row_loop = sch.get_loops(chain.passes[-1])[-2]
    for level in chain.passes[:-1]:
        assert sch.get(row_loop) in [sch.get(l) for l in sch.get_loops(level)]
    data = np.random.default_rng(0).standard_normal((1, 8, 3, 300)).astype("float32")
    outs = []
    for f in (sch.mod["main"], func):
        lib = tvm.compile(tvm.IRModule({"main": f}), target=target)
        out = tvm.runtime.tensor(np.empty([int(d) for d in y.shape], "float32"))
        lib["main"](tvm.runtime.tensor(data), out)
        outs.append(out.numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
    del tvm_pool


def _flat_case(rng):
    rank = int(rng.integers(1, 4))
    while True:
        spatial = [int(v) for v in rng.integers(1, 20, rank)] if rank > 1 else [int(rng.integers(20, 300))]
        plane = int(np.prod(spatial))
        if 2 * pool_compute.FLAT_LANES <= plane <= (pool_compute.MAX_PASS_TAPS + 1) * pool_compute.FLAT_LANES - 1:
            return [int(rng.integers(1, 3)), int(rng.integers(1, 5))] + spatial


@pytest.mark.parametrize("seed", range(18))
def test_flat_global_pool_matches_oracles(seed):
    rng = np.random.default_rng(100 + seed)
    op = ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"][seed % 3]
    dtype = ["float32", "float16", "float32", "float64", "float32", "float16"][seed % 6]
    shape = _flat_case(rng)
    windows = spec.global_windows(shape[2:])
    assert pool_compute.flat_plane(windows)
    x = _input(rng, shape, dtype)
    model = pool_model(op, shape, dtype=dtype)
    got = run_tvm_pool(model, {"X": x})[0]
    plain = run_tvm_pool(model, {"X": x}, schedule=False)[0]
    axes = tuple(range(2, x.ndim))
    wide = x.astype(np.float64)
    want = {"GlobalAveragePool": lambda: wide.mean(axis=axes, keepdims=True),
            "GlobalMaxPool": lambda: wide.max(axis=axes, keepdims=True),
            "GlobalLpPool": lambda: np.sqrt((wide * wide).sum(axis=axes, keepdims=True))}[op]().astype(dtype)
    runtime, _ = try_run(run_onnxruntime, model, {"X": x})  # onnxruntime lacks some (op, dtype) kernels
    if runtime is not None:
        tol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-12}[dtype]
        np.testing.assert_allclose(runtime[0].astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    if op == "GlobalMaxPool":
        np.testing.assert_array_equal(got, want, err_msg=f"{shape} {dtype}")
        np.testing.assert_array_equal(got, plain)
        x.ravel()[rng.random(x.size) < 0.02] = np.nan
        got = run_tvm_pool(model, {"X": x})[0]
        want = np.max(x.astype(np.float64), axis=tuple(range(2, x.ndim)), keepdims=True).astype(dtype)
        np.testing.assert_array_equal(got, want)  # NaN propagates through the lanes and halvings
    else:
        # the lanes add in another order than a sequential loop: float rounding only
        tol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-12}[dtype]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
        np.testing.assert_allclose(got.astype(np.float64), plain.astype(np.float64), rtol=tol, atol=tol)


def test_flat_plane_chosen_only_for_small_static_global_windows():
    assert pool_compute.flat_plane(spec.global_windows([7, 7]))
    assert pool_compute.flat_plane(spec.global_windows([13, 13]))
    assert not pool_compute.flat_plane(spec.global_windows([5, 5]))  # under two rows of lanes
    assert not pool_compute.flat_plane(spec.global_windows([56, 56]))  # over MAX_PASS_TAPS rows
    windows = spec.resolve_windows([7, 7], [7, 7], [1, 1], [1, 1], [1, 1, 1, 1], "NOTSET", False)
    assert not pool_compute.flat_plane(windows)  # padded: not a global window


@pytest.mark.parametrize("seed", range(12))
def test_long_strided_windows_match_oracles(seed):
    rng = np.random.default_rng(200 + seed)
    op = ["AveragePool", "MaxPool", "LpPool"][seed % 3]
    rank = 1 + seed % 2
    kernel = [int(rng.integers(1, 4))] * (rank - 1) + [int(rng.choice([16, 24, 32, 40, 64]))]
    strides = [1] * (rank - 1) + [int(rng.integers(2, kernel[-1] + 1))]
    shape = [1, int(rng.integers(1, 4))] + [int(rng.integers(k, 7)) for k in kernel[:-1]] + [int(rng.integers(kernel[-1], 400))]
    x = _input(rng, shape, "float32")
    model = pool_model(op, shape, kernel_shape=kernel, strides=strides)
    got = run_tvm_pool(model, {"X": x})[0]
    plain = run_tvm_pool(model, {"X": x}, schedule=False)[0]
    want = run_onnxruntime(model, {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6, err_msg=f"{op} {shape} {kernel} {strides}")
    np.testing.assert_allclose(got, plain, rtol=2e-6, atol=2e-6)
    if op == "MaxPool":
        np.testing.assert_array_equal(got, plain)


def test_vector_partial_sums_schedule():
    from tvm import te

    from tvm_pool.schedules import cpu, rule_for
    from tvm_pool.targets import host_target

    x = te.placeholder((1, 4, 1000), "float32", name="x")
    y = pool_compute.avg_pool(x, [64], [32], [1], [0, 0])
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    cpu.schedule_function(sch, rule_for(host_target()).config(host_target()))
    script = sch.mod["main"].script()
    # k64 s32 is summed in 32-tap blocks (compute.window_reduce._block_sums), each block in partial sums
    assert "avg_pool_sum_blocks_rf" in script and "T.vectorized(8)" in script


def test_legalization_keeps_channel_last_passes_where_the_family_wants_them():
    """aarch64's rule keeps channel-last windows as passes (schedules.arm.Pool.CHANNEL_LAST_TAPS),
    x86's and CUDA's take every tap: a Relax channel-last max legalized for each target."""
    import tvm  # pylint: disable=import-outside-toplevel
    from tvm import relax  # pylint: disable=import-outside-toplevel

    from tvm_pool import lowering  # pylint: disable=import-outside-toplevel
    from tvm_pool.compute import forms  # pylint: disable=import-outside-toplevel

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 28, 28, 16], "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.max_pool2d(x, [3, 3], [2, 2], [1, 1, 1, 1], layout="NHWC"))
        bb.emit_func_output(out)
    mod = bb.get()

    def has_passes(target) -> bool:
        fused = lowering.fuse(mod, target)
        return any("max_pool_pass0" in f.script() for f in fused.functions.values() if isinstance(f, tvm.tirx.PrimFunc))

    assert has_passes("arm")
    assert not has_passes("x86")
    assert not has_passes("cuda")
    w = spec.resolve_windows([28, 28], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1], "NOTSET", False)
    with forms.channel_last_passes():
        assert forms.choose_form(w, "max", channel_last=True) == forms.AXIS_PASSES
    assert forms.choose_form(w, "max", channel_last=True) == forms.ALL_TAPS
