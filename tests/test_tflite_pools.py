"""``tvm_pool.from_tflite`` against LiteRT 2.3 (its builtin optimized, builtin reference and
XNNPACK kernels; see tflite_oracle.py), on flatbuffers built by tvm_pool.tflite.models.

1. Seeded random pools, several per model (one compile per model): MAX/AVERAGE_POOL_2D in
   float32, int8, uint8 and int16, L2_POOL_2D in float32; filters 1-4, strides 1-4 (also above
   the filter), SAME/VALID, odd sizes, batch 1-3, channels 1-67, every fused activation, random
   scales and zero points, among them scales that put the activation's bound on an exact half.
   Integers bit-exact against every kernel (XNNPACK: up to its own clamp bounds, pinned in 3),
   floats within 1e-5.
2. SAME/VALID geometry edges (odd sizes, stride > filter, filter = input, 1x1 inputs).
3. Exact halves: TFLite's activation bounds divide in float32 and round half away from zero,
   stock TVM's divide in float64 and round half to even; XNNPACK rounds half to even after
   adding the zero point. Stock TVM's int8 average truncates.
4. A small CNN (conv, pools, fused ReLU6) through tvm_pool.compile: bit-exact end to end where
   the convs are exact (power-of-two scales); with random scales TVM's quantized conv
   (dequantize, float conv, quantize) is off by one from LiteRT's fixed-point requantization
   in a few places, and the pools alone are bit-exact on LiteRT's own intermediates.
5. Non-finite floats: what each kernel does (docs/conformance.md, TFLite T5).
6. Input and output quantization that differ (conformance T4): converted as LiteRT runs them
   (the integers pooled unchanged, clamped at the output's bounds).
7. One-line errors naming the operator: unsupported activations, invalid quantization,
   refused quantized operators, TVM converter failures (also where TVM normalizes what its
   converter returned), the missing tflite package; and a failed import leaves no Relax
   BlockBuilder open (conformance T17).

MEAN over H and W and the random differential are in test_tflite_differential.py.

Default: about 25 s on two cores; ``-m slow``: 20 random models of 32 pools, and the CNN with
random scales end to end (within one of every kernel).
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest
import tflite
import tvm
from tvm.relax.frontend.tflite import from_tflite as stock_from_tflite

import tvm_pool
import tvm_pool.tflite.importer
from tvm_pool.tflite import formulas, models
from tvm_pool.tflite.models import ModelBuilder, PoolCase, Quant, pool_model
from tflite_oracle import (
    KERNELS, compile_model, mismatch, random_case, random_input, run_litert, run_vm, tflite_bounds, xnnpack_bounds,
    xnnpack_takes,
)

DTYPES = ("float32", "int8", "uint8", "int16")
# What a failing import or compile raises: tvm_pool's errors and TVM's (RuntimeError subclasses)
COMPILE_ERRORS = (tvm_pool.TvmPoolError, RuntimeError, ValueError, TypeError)


def check_pools(cases, inputs, kernels=tuple(KERNELS)):
    """Compile ``cases`` as one model; every output against every LiteRT kernel. A model that
    fails to import or compile is split to name the case."""
    content = pool_model(*cases)
    try:
        vm = compile_model(content)
    except COMPILE_ERRORS:
        for case in cases:
            try:
                compile_model(pool_model(case))
            except COMPILE_ERRORS as err:
                lines = [line for line in str(err).splitlines() if line.strip()]
                pytest.fail(f"{case} fails to compile: {type(err).__name__}: {lines[-1] if lines else ''}")
        raise
    got = run_vm(vm, inputs)
    problems = []
    for kernel in kernels:
        want = run_litert(content, inputs, kernel)
        for i, case in enumerate(cases):
            why = mismatch(got[i], want[f"y{i}"], case, kernel)
            if why:
                problems.append(f"y{i} {case}: {why}")
    assert not problems, "\n".join(problems[:8])
    return got


def random_batch(seed: int, per_dtype: int = 8):
    rng = np.random.default_rng(seed)
    cases = [random_case(rng, dtype) for dtype in DTYPES for _ in range(per_dtype)]
    return cases, [random_input(rng, case) for case in cases]


# ---------------------------------------------------------------------------------------------
# 1-2. Random pools and geometry edges
# ---------------------------------------------------------------------------------------------


def test_random_pools_match_litert():
    cases, inputs = random_batch(seed=0, per_dtype=6)
    check_pools(cases, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(1, 21))
def test_random_pools_sweep(seed):
    cases, inputs = random_batch(seed)
    check_pools(cases, inputs)


# (H, W), filter, stride, padding: odd sizes, stride > filter (SAME pads nothing), filter = input
EDGES = [
    ((1, 1), (1, 1), (1, 1), "SAME"), ((1, 1), (3, 3), (2, 2), "SAME"), ((9, 5), (1, 1), (3, 3), "SAME"),
    ((7, 8), (2, 3), (5, 4), "SAME"), ((8, 7), (3, 2), (4, 3), "VALID"), ((5, 5), (5, 5), (1, 1), "VALID"),
    ((5, 5), (4, 4), (3, 3), "SAME"), ((11, 4), (4, 1), (1, 4), "SAME"), ((6, 9), (2, 4), (3, 3), "VALID"),
    ((3, 10), (3, 3), (1, 2), "SAME"), ((10, 3), (4, 4), (4, 4), "SAME"), ((2, 7), (2, 2), (3, 1), "SAME"),
]


def test_same_and_valid_geometry_edges():
    """Distinct values (a permutation) in every float max, so any window offset shows; int8
    averages check the divisor (data taps only) at the same edges. Every other float max
    carries quantization parameters, which LiteRT ignores on float tensors (so does tvm_pool)."""
    rng = np.random.default_rng(7)
    cases, inputs = [], []
    for i, ((h, w), filter_hw, stride_hw, padding) in enumerate(EDGES):
        shape = (2, h, w, 3)
        q = Quant(0.5, 1) if i % 2 else None
        cases.append(PoolCase("MAX_POOL_2D", shape, filter_hw, stride_hw, padding, "NONE", "float32", q, q))
        inputs.append(rng.permutation(np.prod(shape)).reshape(shape).astype(np.float32))
        q = Quant(0.05, -3)
        cases.append(PoolCase("AVERAGE_POOL_2D", shape, filter_hw, stride_hw, padding, "NONE", "int8", q, q))
        inputs.append(rng.integers(-128, 128, shape).astype(np.int8))
    check_pools(cases, inputs)
    for case in cases[::2]:  # the formulas give LiteRT's sizes (the outputs matched in shape)
        pads, out_hw = formulas.pool_geometry(case.padding, case.input_shape[1:3], case.filter_hw, case.stride_hw)
        assert out_hw == case.output_shape[1:3] and min(pads) >= 0


# ---------------------------------------------------------------------------------------------
# 3. Exact halves and rounding: tvm_pool, stock TVM, LiteRT's kernels
# ---------------------------------------------------------------------------------------------

# Bounds on exact halves. TFLite divides in float32 and rounds half away from zero; stock TVM
# divides in float64 and rounds with Python's round (half to even).
HALF_CASES = [
    # 6 / 0.096 = 62.5 in float32 (TFLite: 63), 62.4999995 in float64 (stock TVM: 62)
    PoolCase("AVERAGE_POOL_2D", (2, 6, 6, 9), (2, 2), (2, 2), "VALID", "RELU6", "int8", Quant(0.096, -90), Quant(0.096, -90)),
    PoolCase("MAX_POOL_2D", (2, 6, 6, 9), (2, 2), (2, 2), "VALID", "RELU6", "uint8", Quant(0.096, 20), Quant(0.096, 20)),
    # +-1 / 0.4 = +-2.5 in float32 (TFLite: +-3), +-2.4999999 in float64 (stock TVM: +-2)
    PoolCase("AVERAGE_POOL_2D", (2, 6, 6, 9), (3, 3), (1, 1), "SAME", "RELU_N1_TO_1", "int8", Quant(0.4, 4), Quant(0.4, 4)),
    # XNNPACK's clamp: lrintf(6 / scale + zero_point) = lrintf(162.5) = 162; TFLite's 75 + 88 = 163
    PoolCase("MAX_POOL_2D", (2, 6, 3, 16), (3, 3), (3, 2), "VALID", "RELU6", "uint8", Quant(6 / 87.5, 75), Quant(6 / 87.5, 75)),
    # 6 / 12 = 0.5 exactly in both: TFLite's std::round gives 1, Python's round 0
    PoolCase("MAX_POOL_2D", (2, 6, 6, 9), (2, 2), (2, 2), "VALID", "RELU6", "int8", Quant(12.0, -5), Quant(12.0, -5)),
]


@pytest.fixture(scope="module")
def halves():
    """The cases above, their inputs (the full type range), tvm_pool's and stock TVM's outputs."""
    rng = np.random.default_rng(3)
    inputs = [random_input(rng, case) for case in HALF_CASES]
    content = pool_model(*HALF_CASES)
    got = run_vm(compile_model(content), inputs)
    stock = run_vm(compile_model(content, importer=lambda b: stock_from_tflite(tflite.Model.GetRootAsModel(b, 0))), inputs)
    return content, inputs, got, stock


def test_activation_bounds_on_exact_halves(halves):
    """tvm_pool's bounds are the builtin kernels' on every half; stock TVM's are one off."""
    content, inputs, got, stock = halves
    for kernel in ("builtin", "reference"):
        want = run_litert(content, inputs, kernel)
        for i, case in enumerate(HALF_CASES):
            np.testing.assert_array_equal(got[i], want[f"y{i}"], err_msg=f"{kernel} {case}")
    assert [tflite_bounds(HALF_CASES[i]) for i in (0, 1, 2, 4)] == [(-90, -90 + 63), (20, 20 + 63), (4 - 3, 4 + 3), (-5, -5 + 1)]
    assert [got[i].max() for i in (0, 1)] == [-90 + 63, 20 + 63] and [stock[i].max() for i in (0, 1)] == [-90 + 62, 20 + 62]
    assert [(got[i].min(), got[i].max()) for i in (2, 4)] == [(4 - 3, 4 + 3), (-5, -5 + 1)]
    assert [(stock[i].min(), stock[i].max()) for i in (2, 4)] == [(4 - 2, 4 + 2), (-5, -5)]


def test_xnnpack_clamps_half_to_even_after_the_zero_point(halves):
    """Pinned divergence (conformance T3): XNNPACK (quantized MAX_POOL_2D only) rounds the bound
    after adding the zero point, half to even; tvm_pool follows the builtin kernels."""
    content, inputs, got, _ = halves
    case = HALF_CASES[3]
    assert tflite_bounds(case) == (75, 163) and xnnpack_bounds(case) == (75, 162)
    xnnpack = run_litert(content, inputs, "xnnpack")["y3"]
    builtin = run_litert(content, inputs, "builtin")["y3"]
    assert xnnpack.max() == 162 and builtin.max() == 163 and got[3].max() == 163
    np.testing.assert_array_equal(got[3], builtin)
    assert not mismatch(got[3], xnnpack, case, "xnnpack")  # differs only at the bound


@pytest.mark.parametrize("dtype", DTYPES)
def test_which_pools_xnnpack_takes(dtype):
    """XNNPACK takes float32 max and average and int8/uint8 max; quantized averages (so their
    rounding), int16 and L2 stay on the builtin kernels, which the tests compare with too."""
    q = Quant(0.1, 0) if dtype != "float32" else None
    taken = {op: xnnpack_takes(pool_model(PoolCase(op, (1, 4, 4, 2), (2, 2), (2, 2), "VALID", "NONE", dtype, q, q)))
             for op in ("MAX_POOL_2D", "AVERAGE_POOL_2D")}
    assert taken == {"MAX_POOL_2D": dtype in ("float32", "int8", "uint8"), "AVERAGE_POOL_2D": dtype == "float32"}


def test_stock_tvm_int8_average_truncates(halves):
    """Stock TVM's quantized average is astype(int32), avg_pool2d, astype: it truncates, so
    (1 + 2) / 2 gives 1 where LiteRT gives 2 (half away from zero); tvm_pool gives 2."""
    case = PoolCase("AVERAGE_POOL_2D", (1, 2, 4, 1), (1, 2), (1, 2), "VALID", "NONE", "int8", Quant(0.1, 0), Quant(0.1, 0))
    x = np.array([1, 2, -1, -2, 3, 4, -3, -4], np.int8).reshape(case.input_shape)
    content = pool_model(case)
    want = run_litert(content, [x], "reference")["y0"]
    stock = run_vm(compile_model(content, importer=lambda b: stock_from_tflite(tflite.Model.GetRootAsModel(b, 0))), [x])[0]
    got = run_vm(compile_model(content), [x])[0]
    assert want.ravel().tolist() == [2, -2, 4, -4] == got.ravel().tolist()
    assert stock.ravel().tolist() == [1, -1, 3, -3]
    # and on the random int8 half-scale average of the fixture, off by one where LiteRT is exact
    content, inputs, got_halves, stock_halves = halves
    want = run_litert(content, inputs, "reference")["y0"]
    np.testing.assert_array_equal(got_halves[0], want)
    diff = stock_halves[0].astype(int) - want.astype(int)
    assert diff.any() and np.abs(diff).max() == 1


# ---------------------------------------------------------------------------------------------
# 4. A small int8/uint8 CNN
# ---------------------------------------------------------------------------------------------


def cnn_input(dtype, shape=(2, 17, 15, 3), seed=0):
    info = np.iinfo(dtype)
    return np.random.default_rng(seed).integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_cnn_with_exact_convs_matches_litert_end_to_end(dtype):
    """Power-of-two scales make the convs exact everywhere, so every output bit is the pools'."""
    cnn = models.build_cnn(seed=3, dtype=dtype, exact=True)
    x = cnn_input(dtype)
    got = run_vm(compile_model(cnn.content), [x])
    for kernel in KERNELS:
        want = run_litert(cnn.content, [x], kernel)
        for g, name in zip(got, ("avg_relu6", "max_strided")):
            np.testing.assert_array_equal(g, want[name], err_msg=f"{dtype} {kernel} {name}")
            assert len(np.unique(g)) > 20  # not saturated


def test_cnn_pools_are_exact_on_litert_intermediates():
    """The CNN with random scales: each of its pools, fed LiteRT's own input tensor of that
    pool, gives LiteRT's output tensor bit for bit (one model holding the three pools)."""
    cnn = models.build_cnn(seed=1, dtype="int8")
    x = cnn_input("int8")
    names = list(cnn.pools)
    vm = compile_model(pool_model(*(cnn.pools[n][0] for n in names)))
    for kernel in KERNELS:
        tensors = run_litert(cnn.content, [x], kernel, preserve=True)
        got = run_vm(vm, [tensors[cnn.pools[n][1]] for n in names])
        for g, name in zip(got, names):
            np.testing.assert_array_equal(g, tensors[name], err_msg=f"{kernel} {name}")


def test_tvm_quantized_conv_is_not_bit_exact():
    """TVM's CONV_2D converter dequantizes, convolves in float32 and quantizes; LiteRT's builtin
    kernels requantize the int32 accumulator with a fixed-point multiplier (two roundings),
    XNNPACK in float32 (one). So TVM's conv is off by one from the builtin kernels on some
    outputs (about 0.1%), and closer to XNNPACK's (docs/conformance.md, T8). LiteRT's own three
    kernels disagree with each other on this conv too."""
    content = models.conv_model(seed=0, dtype="int8")
    x = cnn_input("int8", (2, 20, 20, 16), seed=1)
    got = run_vm(compile_model(content), [x])[0].astype(int)
    counts = {}
    for kernel in KERNELS:
        want = run_litert(content, [x], kernel)["conv"].astype(int)
        assert np.abs(got - want).max() <= 1
        counts[kernel] = int((got != want).sum())
    assert counts["builtin"] > 0 and counts["reference"] > 0, counts
    assert counts["xnnpack"] < counts["reference"], counts


@pytest.mark.slow
def test_cnn_with_random_scales_is_within_one():
    """End to end with random scales: the convs' off-by-ones (above) reach the outputs."""
    cnn = models.build_cnn(seed=3, dtype="uint8")
    x = cnn_input("uint8")
    got = run_vm(compile_model(cnn.content), [x])
    for kernel in KERNELS:
        want = run_litert(cnn.content, [x], kernel)
        for g, name in zip(got, ("avg_relu6", "max_strided")):
            assert np.abs(g.astype(int) - want[name].astype(int)).max() <= 1, f"{kernel} {name}"


# ---------------------------------------------------------------------------------------------
# 5. Non-finite floats
# ---------------------------------------------------------------------------------------------


def test_non_finite_floats():
    """Windows [NaN, 1, 2, 3], [1, 2, 3, NaN], [-inf x4], [inf, 1, 2, 3]. tvm_pool keeps IEEE
    arithmetic (NaN propagates, +-inf stay); the builtin kernels drop NaN in max and clamp +-inf
    to +-FLT_MAX (the NONE activation's float range); XNNPACK gives -inf for a NaN average."""
    x = np.zeros((1, 2, 8, 1), np.float32)
    for i, window in enumerate([[np.nan, 1, 2, 3], [1, 2, 3, np.nan], [-np.inf] * 4, [np.inf, 1, 2, 3]]):
        x[0, :, 2 * i : 2 * i + 2, 0] = np.reshape(window, (2, 2))
    cases = [PoolCase(op, (1, 2, 8, 1), (2, 2), (2, 2)) for op in ("MAX_POOL_2D", "AVERAGE_POOL_2D")]
    content = pool_model(*cases)
    got = [g.ravel() for g in run_vm(compile_model(content), [x, x])]
    big = np.finfo(np.float32).max
    np.testing.assert_array_equal(got[0], [np.nan, np.nan, -np.inf, np.inf])
    np.testing.assert_array_equal(got[1], [np.nan, np.nan, -np.inf, np.inf])
    for kernel in ("builtin", "reference"):
        want = run_litert(content, [x, x], kernel)
        np.testing.assert_array_equal(want["y0"].ravel(), [3, 3, -big, big])
        np.testing.assert_array_equal(want["y1"].ravel(), [np.nan, np.nan, -big, big])
    want = run_litert(content, [x, x], "xnnpack")
    np.testing.assert_array_equal(want["y0"].ravel(), [-np.inf, 3, -np.inf, np.inf])
    np.testing.assert_array_equal(want["y1"].ravel(), [-np.inf, -np.inf, -np.inf, np.inf])


# ---------------------------------------------------------------------------------------------
# The module tvm_pool builds
# ---------------------------------------------------------------------------------------------


def test_pools_are_channel_last_computes_with_the_activation_fused():
    q = Quant(0.1, 3)
    content = pool_model(
        PoolCase("AVERAGE_POOL_2D", (1, 5, 5, 4), (2, 2), (2, 2), "SAME", "RELU6", "int8", q, q),
        PoolCase("L2_POOL_2D", (1, 5, 5, 4), (2, 2), (1, 1), "VALID", "RELU"),
    )
    for model in (content, tflite.Model.GetRootAsModel(content, 0)):  # bytes or a tflite.Model
        mod = tvm_pool.from_tflite(model)
        text = mod.script()
        assert "permute_dims" not in text and "transpose" not in text
        funcs = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
        # the int8 average: one PrimFunc, the pool in NHWC and its activation; L2: Relax's NHWC
        # average between a square and a square root, and the activation (legalized per target)
        assert sorted(funcs) == ["tvm_pool_tflite_activation", "tvm_pool_tflite_avg_pool"]
        avg = funcs["tvm_pool_tflite_avg_pool"].script()
        assert '"tvm_pool.layout": "channel_last"' in avg and "fused_activation" in avg
        main = mod["main"].script()
        assert main.count("R.multiply") == 1 and main.count("R.sqrt") == 1 and 'layout="NHWC"' in main
    assert tvm_pool.from_tflite is not None and "from_tflite" in tvm_pool.__all__


# ---------------------------------------------------------------------------------------------
# 6-7. Input and output quantization, errors
# ---------------------------------------------------------------------------------------------


def error_of(content) -> str:
    with pytest.raises(tvm_pool.TvmPoolError) as info:
        tvm_pool.from_tflite(content)
    message = str(info.value)
    assert "\n" not in message
    return message


Q = Quant(0.1, 3)


@pytest.mark.parametrize("activation", ["TANH", "SIGN_BIT"])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_unsupported_activation(activation, dtype):
    q = Q if dtype == "int8" else None
    message = error_of(pool_model(PoolCase("MAX_POOL_2D", (1, 4, 4, 2), (2, 2), (2, 2), "VALID", activation, dtype, q, q)))
    assert message.startswith("node 'y0' (MAX_POOL_2D): fused_activation_function")
    assert activation in message and "allowed: NONE, RELU, RELU_N1_TO_1, RELU6" in message


@pytest.mark.parametrize(
    "op, dtype, in_quant, out_quant, expected",
    [
        ("MAX_POOL_2D", "int8", Q, None, "fused activation RELU6 on int8 needs the output's quantization"),
        ("MAX_POOL_2D", "int8", Quant([0.1, 0.2], [0, 0], 3), Quant([0.1, 0.2], [0, 0], 3), "quantized per tensor"),
        ("AVERAGE_POOL_2D", "int8", None, None, "fused activation RELU6 on int8 needs the output's quantization"),
        ("L2_POOL_2D", "int8", Q, Q, "input type int8 is not supported (allowed: float32)"),
        ("AVERAGE_POOL_2D", "int32", None, None, "input type int32 is not supported (allowed: float32, int8, uint8, int16)"),
    ],
)
def test_invalid_quantization_and_types(op, dtype, in_quant, out_quant, expected):
    shape = (1, 4, 4, 2)
    message = error_of(pool_model(PoolCase(op, shape, (2, 2), (2, 2), "VALID", "RELU6", dtype, in_quant, out_quant)))
    assert message.startswith(f"node 'y0' ({op})") and expected in message, message


# Input and output quantization differ: LiteRT pools the integers as they are and clamps with
# the output's parameters (RELU6 at -2 + 6 / 0.05 = 118 in the first two; the input's would give
# 3 + 6 / 0.1 = 63).
DIFFERENT_QUANT = [
    PoolCase("MAX_POOL_2D", (2, 6, 5, 3), (2, 2), (2, 2), "SAME", "RELU6", "int8", Quant(0.1, 3), Quant(0.05, -2)),
    PoolCase("AVERAGE_POOL_2D", (2, 6, 5, 3), (3, 2), (1, 2), "VALID", "RELU6", "int8", Quant(0.1, 3), Quant(0.05, -2)),
    PoolCase("MAX_POOL_2D", (1, 7, 7, 4), (3, 3), (2, 2), "SAME", "NONE", "uint8", Quant(0.1, 130), Quant(0.1, 131)),
    PoolCase("AVERAGE_POOL_2D", (1, 7, 7, 4), (2, 2), (2, 2), "SAME", "RELU", "uint8", Quant(0.02, 100), Quant(0.5, 140)),
    PoolCase("AVERAGE_POOL_2D", (1, 5, 6, 2), (2, 3), (2, 1), "SAME", "RELU_N1_TO_1", "int16",
             Quant(0.001, 0), Quant(0.0005, 7)),
]


def test_pools_with_different_input_and_output_quantization():
    """Conformance T4: converted (no longer refused), and what LiteRT's builtin and reference
    kernels compute: the integers pooled with no requantization, clamped at the output's
    activation bounds. XNNPACK refuses such an int8/uint8 MAX_POOL_2D: the default interpreter
    cannot even prepare the model."""
    rng = np.random.default_rng(11)
    inputs = [random_input(rng, case) for case in DIFFERENT_QUANT]
    got = check_pools(DIFFERENT_QUANT, inputs, kernels=("builtin", "reference"))
    assert got[0].max() == 118 and got[0].min() == -2  # RELU6 with the output's scale and zero point
    case, x = DIFFERENT_QUANT[2], inputs[2]  # the plain max of the integers, not requantized
    (top, left, _, _), (oh, ow) = formulas.pool_geometry(case.padding, x.shape[1:3], case.filter_hw, case.stride_hw)
    want = np.empty(case.output_shape, x.dtype)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * case.stride_hw[0] - top, j * case.stride_hw[1] - left
            window = x[:, max(h0, 0) : h0 + case.filter_hw[0], max(w0, 0) : w0 + case.filter_hw[1], :]
            want[:, i, j, :] = window.max(axis=(1, 2))
    np.testing.assert_array_equal(got[2], want)
    with pytest.raises(RuntimeError, match="failed to delegate MAX_POOL_2D"):
        run_litert(pool_model(DIFFERENT_QUANT[0]), inputs[:1], "xnnpack")


def test_invalid_geometry():
    message = error_of(pool_model(PoolCase("MAX_POOL_2D", (1, 3, 4, 2), (4, 2), (1, 1), "VALID")))
    assert "node 'y0' (MAX_POOL_2D): gives output size (0, 3) < 1" in message
    m = ModelBuilder()
    x = m.input("x", (1, 4, 4, 2), "float32")
    m.outputs.append(models.add_pool(m, PoolCase("MAX_POOL_2D", (1, 4, 4, 2), (2, 2), (2, 2), "SAME"), x, "pooled"))
    m.tensors[-1].shape = (1, 3, 2, 2)
    message = error_of(m.finish())
    assert message == "node 'pooled' (MAX_POOL_2D): output tensor has shape [1, 3, 2, 2]; the pool gives [1, 2, 2, 2]"


def test_refused_quantized_operator_is_named():
    m = ModelBuilder()
    x = m.input("x", (1, 4), "int8", Q)
    m.outputs.append(m.tensor("clipped", (1, 4), "int8", Q))
    m.operator(152, 1, [x], [m.outputs[-1]])  # RELU_0_TO_1, quantized: TVM does not convert it
    assert error_of(m.finish()) == "node 'clipped' (RELU_0_TO_1): TVM's TFLite frontend does not convert quantized RELU_0_TO_1"


def reshape_model() -> bytes:
    """A RESHAPE whose output has another quantization: TVM's converter asserts."""
    m = ModelBuilder()
    x = m.input("x", (1, 4, 4, 2), "int8", Q)
    shape = m.tensor("shape", (2,), "int32", data=np.array([1, 32], np.int32))
    m.outputs.append(m.tensor("flat", (1, 32), "int8", Quant(0.2, 3)))
    m.operator(22, 1, [x, shape], [m.outputs[-1]])
    return m.finish()


def test_tvm_converter_failure_is_one_line_naming_the_operator():
    message = error_of(reshape_model())
    assert message.startswith("node 'flat' (RESHAPE): TVM's TFLite converter cannot convert it: AssertionError: TFLite reshape")


def test_mean_with_repeated_axes_left_to_tvm_is_one_line():
    """A failure where TVM normalizes what its converter returned (relax.mean refuses repeated
    axes; MEAN over H, W and C stays TVM's) is that operator's one line too."""
    m = ModelBuilder()
    x = m.input("x", (1, 4, 4, 2), "float32")
    m.outputs.append(models.add_mean(m, models.MeanCase((1, 4, 4, 2), (1, 2, 3, -1), False), x, "mean"))
    message = error_of(m.finish())
    assert message.startswith("node 'mean' (MEAN): TVM's TFLite converter cannot convert it: ValueError:"), message


LEFT_OPEN = "BlockBuilder destroyed with remaining blocks!"


class RecordingConverter(tvm_pool.tflite.importer.PoolingOperatorConverter):
    """tvm_pool's converter, keeping the BlockBuilders it was given."""

    builders: list = []

    def __init__(self, model, subgraph, exp_tab, ctx, conversion_state=None):
        RecordingConverter.builders.append(ctx)
        super().__init__(model, subgraph, exp_tab, ctx, conversion_state)


def invalid_models():
    """Models whose import fails in TVM's converter, in tvm_pool's, and in the check for
    operators TVM cannot convert (before any converter runs)."""
    yield reshape_model()
    yield pool_model(PoolCase("MAX_POOL_2D", (1, 4, 4, 2), (2, 2), (2, 2), "VALID", "TANH"))
    m = ModelBuilder()
    x = m.input("x", (1, 4), "int8", Q)
    m.outputs.append(m.tensor("clipped", (1, 4), "int8", Q))
    m.operator(152, 1, [x], [m.outputs[-1]])
    yield m.finish()


def test_failed_import_closes_its_block_builder(capfd):
    """TVM's from_tflite builds in ``with bb.function(): with bb.dataflow():``; a converter that
    raises leaves a binding block open, and the builder's C++ destructor prints a warning when
    the garbage collector frees it (in some later test or command). tvm_pool's from_tflite ends
    the open blocks before the one-line error goes on: no warning, and no block left to end."""
    gc.collect()
    capfd.readouterr()
    with pytest.raises(AssertionError):  # the control: stock TVM leaves it open
        stock_from_tflite(tflite.Model.GetRootAsModel(reshape_model(), 0))
    gc.collect()
    assert LEFT_OPEN in capfd.readouterr().err
    for content in invalid_models():
        RecordingConverter.builders.clear()
        with pytest.raises(tvm_pool.TvmPoolError) as info:
            tvm_pool.from_tflite(content, op_converter=RecordingConverter)
        assert "\n" not in str(info.value)
        del info
        (bb,) = RecordingConverter.builders
        with pytest.raises(tvm.error.InternalError, match="no block is being built"):
            bb._end_block()  # pylint: disable=protected-access
        RecordingConverter.builders.clear()
        del bb
        error_of(content)  # and without a converter that keeps it
        gc.collect()
        assert LEFT_OPEN not in capfd.readouterr().err


def test_missing_tflite_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "tflite", None)
    with pytest.raises(ImportError, match=r"^tvm_pool.from_tflite needs the tflite package: pip install 'tvm_pool\[tflite\]'$"):
        tvm_pool.from_tflite(b"")


def test_max_float_average_and_l2_take_the_targets_form():
    """MAX_POOL_2D (every type) and float AVERAGE_POOL_2D import as Relax's own NHWC pools, so
    tvm_pool.compile builds their compute for the target it compiles for: on aarch64 the
    channel-last passes (a first pass block), on x86 one expression of every tap (one block);
    the fused activation follows as its own function, which Relax's fusion joins to the pool.
    L2 imports as Relax's NHWC average between a square and a square root, and takes the
    target's form too. Integer averages (TFLite's rounding) stay tvm_pool's computes built at
    import. The outputs match LiteRT's (the differential tests; here, on x86)."""
    from tvm import relax

    from tvm_pool import lowering
    from tvm_pool.targets import resolve_target

    q = Quant(0.1, 3)
    content = pool_model(
        PoolCase("MAX_POOL_2D", (1, 12, 12, 8), (3, 3), (2, 2), "SAME", "RELU6"),
        PoolCase("AVERAGE_POOL_2D", (1, 12, 12, 8), (3, 3), (1, 1), "SAME", "NONE"),
        PoolCase("MAX_POOL_2D", (1, 12, 12, 8), (3, 3), (2, 2), "SAME", "NONE", "int8", q, q),
        PoolCase("AVERAGE_POOL_2D", (1, 12, 12, 8), (3, 3), (2, 2), "SAME", "NONE", "int8", q, q),
        PoolCase("L2_POOL_2D", (1, 12, 12, 8), (3, 3), (2, 2), "VALID", "RELU"),
    )
    mod = tvm_pool.from_tflite(content)
    text = mod["main"].script()
    assert text.count("R.nn.max_pool2d") == 2 and text.count("R.nn.avg_pool2d") == 2, text
    prims = sorted(gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
    assert prims == ["tvm_pool_tflite_activation", "tvm_pool_tflite_activation1", "tvm_pool_tflite_avg_pool"], prims

    def pass_blocks(target):
        legal = relax.transform.LegalizeOps(lowering.legalize_map(resolve_target(target)))(mod)
        scripts = [f.script() for gv, f in legal.functions_items() if gv.name_hint.startswith("tvm_pool_max_pool2d")]
        return [s.count('sblock("max_pool_pass0")') for s in scripts]

    assert pass_blocks("arm") == [1, 1] and pass_blocks("x86") == [0, 0]
    sum_passes = {t: [f.script().count('sblock("avg_pool_sum_pass0")') for gv, f in relax.transform.LegalizeOps(
        lowering.legalize_map(resolve_target(t)))(mod).functions_items() if gv.name_hint.startswith("tvm_pool_avg_pool2d")]
        for t in ("arm", "x86")}
    assert sum_passes == {"arm": [1, 1], "x86": [0, 0]}, sum_passes  # the float average and L2's
    x = np.random.default_rng(0).standard_normal((1, 12, 12, 8)).astype("float32") * 8
    xi = np.random.default_rng(1).integers(-128, 127, (1, 12, 12, 8)).astype("int8")
    got = run_vm(compile_model(content), [x, x, xi, xi, x])
    want = run_litert(content, [x, x, xi, xi, x], "builtin")
    for i, g in enumerate(got):
        np.testing.assert_allclose(g, want[f"y{i}"], rtol=1e-6, atol=1e-6)
