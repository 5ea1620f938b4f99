"""``tvm_pool.from_tflite`` against LiteRT 2.3's builtin interpreter on seeded random models, and
the MEAN-over-H-and-W road (tvm_pool/tflite/mean.py) case by case.

1. The differential: random single- and two-operator models (MAX, AVERAGE and float32 L2 pools,
   MEAN over H and W with and without keep_dims; float32, int8, uint8, int16; SAME and VALID;
   every fused activation; random shapes, filters, strides, scales and zero points, input and
   output quantization equal or not; tests/tflite_oracle.py ``random_model``), many models side
   by side in one flatbuffer and one compile. The oracle is LiteRT's builtin interpreter
   (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``: what ``Interpreter`` runs without XNNPACK). Integers
   bit-exact, floats within 1e-5; a model tvm_pool refuses counts as refused, a function a
   schedule declines (TVM's default code runs it) as declined, its outputs still checked.
   Target: 0 of each. The reference kernels (``BUILTIN_REF``) must agree too, except on int8/uint8
   MEAN with keep_dims, where the builtin interpreter runs another kernel (conformance T12).
   Default: 200 models; ``-m slow``: 2000.
2. LiteRT's MEAN paths pinned one by one (docs/conformance.md, TFLite T11-T14): the issue's
   minimal case, the optimized int8 kernel's NEON blocks of 16 channels, the reference kernel
   for keep_dims false and int16, XNNPACK's own arithmetic, int16 zero points, MEAN over other
   axes left to TVM's converter, the TIR forms of the fixed-point multiply against their
   transcriptions.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tflite
from tvm.relax.frontend.tflite import from_tflite as stock_from_tflite

import tvm_pool
from tvm_pool.schedules.decline import ScheduleDeclined
from tvm_pool.tflite import formulas
from tvm_pool.tflite.models import MeanCase, Quant, pool_model
from tflite_oracle import compile_model, litert_mean, mismatch, random_input, random_model, run_litert, run_vm

# Models per flatbuffer (one import and one compile each).
BATCH = 25


def reference_may_differ(chain) -> bool:
    """Whether LiteRT's reference kernels may differ from its builtin interpreter on ``chain``:
    an int8/uint8 MEAN with keep_dims runs the optimized kernel there (T12)."""
    return any(isinstance(c, MeanCase) and c.keep_dims and c.dtype in ("int8", "uint8") for c in chain)


def run_batch(chains, inputs) -> dict:
    """tvm_pool and LiteRT on ``chains`` (one flatbuffer): counts and the first problems. A
    schedule that declines a function (schedules/decline.py: TVM's default code runs instead)
    is counted as ``declined`` and the outputs are still checked."""
    result = {"models": len(chains), "wrong": 0, "refused": 0, "declined": 0, "reference_differs": 0, "problems": []}
    content = pool_model(*chains)
    try:
        with warnings.catch_warnings(record=True) as declined:
            warnings.simplefilter("always", ScheduleDeclined)
            vm = compile_model(content)
        for warning in declined:
            if issubclass(warning.category, ScheduleDeclined):
                result["declined"] += 1
                result["problems"].append(f"declined: {warning.message}")
            else:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    except tvm_pool.TvmPoolError:
        vm = None
    if vm is None:  # name the refused models, run the others
        kept = []
        for i, chain in enumerate(chains):
            try:
                tvm_pool.from_tflite(pool_model(chain))
                kept.append(i)
            except tvm_pool.TvmPoolError as err:
                result["refused"] += 1
                result["problems"].append(f"refused {chain}: {err}")
        sub = run_batch([chains[i] for i in kept], [inputs[i] for i in kept])
        for key in ("wrong", "refused", "declined", "reference_differs"):
            result[key] += sub[key]
        result["problems"] += sub["problems"]
        return result
    got = run_vm(vm, inputs)
    builtin = run_litert(content, inputs, "builtin")
    reference = run_litert(content, inputs, "reference")
    for i, chain in enumerate(chains):
        why = mismatch(got[i], builtin[f"y{i}"], chain[-1], "builtin")
        if why:
            result["wrong"] += 1
            result["problems"].append(f"y{i} {chain}: {why}")
        why = mismatch(got[i], reference[f"y{i}"], chain[-1], "reference")
        if why and reference_may_differ(chain):
            result["reference_differs"] += 1
        elif why:
            result["wrong"] += 1
            result["problems"].append(f"y{i} {chain}: {why}")
    return result


def differential(seed: int, models: int) -> dict:
    rng = np.random.default_rng(seed)
    total = {"models": 0, "wrong": 0, "refused": 0, "declined": 0, "reference_differs": 0, "problems": []}
    for start in range(0, models, BATCH):
        chains = [random_model(rng) for _ in range(min(BATCH, models - start))]
        inputs = [random_input(rng, chain[0]) for chain in chains]
        result = run_batch(chains, inputs)
        for key in total:
            total[key] += result[key]
    return total


def check(total: dict):
    summary = {k: v for k, v in total.items() if k != "problems"}
    print(f"TFLite differential against LiteRT's builtin interpreter: {summary}")
    problems = "\n".join(total["problems"][:8])
    assert total["wrong"] == total["refused"] == total["declined"] == 0, f"{summary}\n{problems}"


def test_random_models_match_litert():
    check(differential(seed=36, models=200))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
def test_random_models_sweep(seed):
    check(differential(seed=1000 + seed, models=200))


# ---------------------------------------------------------------------------------------------
# 2. MEAN over H and W, path by path
# ---------------------------------------------------------------------------------------------


def stock_import(content: bytes):
    return stock_from_tflite(tflite.Model.GetRootAsModel(content, 0))


@pytest.mark.parametrize("keep_dims", [True, False])
def test_issue_minimal_mean(keep_dims):
    """The issue's case: [3, 0, 0, 0, 0, 0, 0, 0] at (0.5, 0) is 1.5 / 8 = 0.1875, 0.375 steps:
    LiteRT's builtin kernels round twice in fixed point (3 * 2^30 / 2^31 rounds up to 2, then
    2 / 4 half away from zero to 1); stock TVM's float mean rounds once (0), and so does XNNPACK.
    uint8 with zero point 128 does the same."""
    cases = [MeanCase((1, 2, 4, 1), (1, 2), keep_dims, "int8", Quant(0.5, 0), Quant(0.5, 0)),
             MeanCase((1, 2, 4, 1), (1, 2), keep_dims, "uint8", Quant(0.5, 128), Quant(0.5, 128))]
    x = np.array([3, 0, 0, 0, 0, 0, 0, 0]).reshape(1, 2, 4, 1)
    inputs = [x.astype(np.int8), (x + 128).astype(np.uint8)]
    content = pool_model(*cases)
    got = run_vm(compile_model(content), inputs)
    stock = run_vm(compile_model(content, importer=stock_import), inputs)
    for kernel in ("builtin", "reference"):
        want = run_litert(content, inputs, kernel)
        assert [int(want[f"y{i}"].item()) for i in range(2)] == [1, 129], kernel
    xnnpack = run_litert(content, inputs, "xnnpack")  # the default interpreter's delegate: as stock TVM (T14)
    assert [int(xnnpack[f"y{i}"].item()) for i in range(2)] == [0, 128]
    assert [int(g.item()) for g in got] == [1, 129] and [int(s.item()) for s in stock] == [0, 128]


def test_int8_mean_takes_the_neon_blocks():
    """The builtin int8 MEAN with keep_dims (``optimized_integer_ops::Mean``) runs its NEON path
    (NEON_2_SSE on x86) on whole blocks of 16 channels and scalar code on the rest: at an exact
    negative half the blocks round up, the rest away from zero. A sum of -4 over 8 taps at
    equal scales: 0 in channels 0-31, -1 in 32-39 (and in all of them in the reference kernel).
    With num_threads > 1 the channels split per thread first, so LiteRT's result depends on
    its thread count; tvm_pool follows the default, one thread (conformance T12)."""
    case = MeanCase((1, 2, 4, 40), (1, 2), True, "int8", Quant(0.25, 0), Quant(0.25, 0))
    x = np.zeros(case.input_shape, np.int8)
    x[0, 0, 0, :] = -4
    content = pool_model(case)
    got = run_vm(compile_model(content), [x])[0].ravel()
    want = {k: run_litert(content, [x], k)["y0"].ravel() for k in ("builtin", "reference")}
    np.testing.assert_array_equal(want["builtin"], [0] * 32 + [-1] * 8)
    np.testing.assert_array_equal(want["reference"], [-1] * 40)
    np.testing.assert_array_equal(got, want["builtin"])
    threads = run_litert(content, [x], "builtin", threads=2)["y0"].ravel()  # tasks [0, 20) and [20, 40)
    np.testing.assert_array_equal(threads, [0] * 16 + [-1] * 4 + [0] * 16 + [-1] * 4)


# keep_dims true/false x int8/uint8/int16, random sizes (channels past 16), scales and zero points
def mean_cases(rng):
    cases = []
    for dtype in ("int8", "uint8", "int16"):
        for keep_dims in (True, False):
            for _ in range(2):
                info = np.iinfo(dtype)
                zero = (lambda: 0) if dtype == "int16" else (lambda: int(rng.integers(info.min, info.max + 1)))
                q_in = Quant(float(np.float32(rng.uniform(0.001, 0.3))), zero())
                q_out = Quant(float(np.float32(rng.uniform(0.001, 0.3))), zero()) if rng.integers(2) else q_in
                shape = tuple(int(rng.integers(1, top)) for top in (4, 10, 10, 50))
                cases.append(MeanCase(shape, (1, 2), keep_dims, dtype, q_in, q_out))
    return cases


def test_integer_mean_paths_match_their_transcriptions():
    """Which kernel LiteRT runs (conformance T12-T13), checked on the Python transcriptions
    (tflite_oracle.litert_mean): the builtin interpreter takes the optimized kernel for
    int8/uint8 with keep_dims, the reference one otherwise; the reference interpreter always the
    reference one. tvm_pool gives the builtin interpreter's output bit for bit."""
    rng = np.random.default_rng(12)
    cases = mean_cases(rng)
    inputs = [random_input(rng, case) for case in cases]
    content = pool_model(*cases)
    got = run_vm(compile_model(content), inputs)
    builtin, reference = (run_litert(content, inputs, k) for k in ("builtin", "reference"))
    for i, (case, x) in enumerate(zip(cases, inputs)):
        path = "optimized" if case.keep_dims and case.dtype != "int16" else "reference"
        np.testing.assert_array_equal(builtin[f"y{i}"], litert_mean(case, x, path), err_msg=str(case))
        np.testing.assert_array_equal(reference[f"y{i}"], litert_mean(case, x, "reference"), err_msg=str(case))
        np.testing.assert_array_equal(got[i], builtin[f"y{i}"], err_msg=str(case))


def test_xnnpack_means_differ():
    """XNNPACK, the default interpreter's delegate, takes int8/uint8 MEAN (not int16) and
    computes it its own way: within one of the builtin kernels, not equal (conformance T14)."""
    rng = np.random.default_rng(13)
    cases = [c for c in mean_cases(rng) if c.dtype != "int16"]
    inputs = [random_input(rng, case) for case in cases]
    content = pool_model(*cases)
    builtin, xnnpack = (run_litert(content, inputs, k) for k in ("builtin", "xnnpack"))
    diffs = [np.abs(builtin[f"y{i}"].astype(int) - xnnpack[f"y{i}"].astype(int)) for i in range(len(cases))]
    assert max(d.max() for d in diffs) == 1 and sum(int(d.sum()) for d in diffs) > 0


def test_int16_mean_zero_points_must_be_zero():
    case = MeanCase((1, 3, 3, 2), (1, 2), True, "int16", Quant(0.01, 0), Quant(0.02, 5))
    content = pool_model(case)
    with pytest.raises(RuntimeError, match="zero_point"):  # LiteRT's Prepare refuses it
        run_litert(content, [np.zeros(case.input_shape, np.int16)], "builtin")
    with pytest.raises(tvm_pool.TvmPoolError) as info:
        tvm_pool.from_tflite(content)
    assert str(info.value) == ("node 'y0' (MEAN), attribute 'zero_point': must be 0 for int16 (input 0, output 5; "
                               "LiteRT's MEAN refuses others)")


def test_quantized_mean_needs_quantization():
    case = MeanCase((1, 3, 3, 2), (1, 2), False, "int8", Quant(0.01, 0), None)
    with pytest.raises(tvm_pool.TvmPoolError, match=r"^node 'y0' \(MEAN\): int8 MEAN needs per-tensor quantization"):
        tvm_pool.from_tflite(pool_model(case))


def test_other_means_stay_tvms():
    """MEAN over other axes (or of another rank) is TVM's converter's, unchanged; over H and W
    (in any spelling) it is one tvm_pool PrimFunc, in NHWC, without a transpose."""
    spatial = [MeanCase((2, 5, 3, 4), axes, keep, "float32") for axes, keep in (((1, 2), True), ((-2, 1, 2), False))]
    other = [MeanCase((2, 5, 3, 4), axes, keep, "float32")
             for axes, keep in (((3,), True), ((1,), False), ((0, 1, 2), True))]
    mod = tvm_pool.from_tflite(pool_model(*spatial, *other))
    names = sorted(gv.name_hint for gv, f in mod.functions.items() if gv.name_hint != "main")
    assert names == ["tvm_pool_tflite_mean_float", "tvm_pool_tflite_mean_float1"], names
    assert mod.script().count("R.mean(") == 3 and "permute_dims" not in mod.script()
    rng = np.random.default_rng(14)
    cases = spatial + other
    inputs = [random_input(rng, case) for case in cases]
    content = pool_model(*cases)
    got = run_vm(compile_model(content), inputs)
    want = run_litert(content, inputs, "builtin")
    for i, case in enumerate(cases):
        assert not mismatch(got[i], want[f"y{i}"], case, "builtin")


@pytest.mark.parametrize("shift", [3, 1, 0, -1, -4, -13, -31])
def test_fixed_point_multiply_tir_matches_transcriptions(shift):
    """mean.fixed_point_multiply (the TIR forms) against the C++ transcriptions in formulas.py,
    on exact halves and on random values over int32, both roundings."""
    from tvm import te
    import tvm
    from tvm_pool.tflite.mean import fixed_point_multiply

    rng = np.random.default_rng(15 + abs(shift))
    multipliers = [2**30, 2**31 - 1, int(rng.integers(2**30, 2**31))]
    bound = 2**31 >> max(shift, 0)
    values = np.concatenate([np.arange(-300, 300), rng.integers(-bound, bound, 3000),
                             [-(2**31), 2**31 - 1, -(2**30), 2**30]]).astype(np.int32)
    x = te.placeholder((len(values),), "int32", name="x")

    def stage(m, half_away):
        return te.compute(x.shape, lambda i: fixed_point_multiply(x[i], m, shift, half_away), name=f"y{half_away}")

    for m in multipliers:
        outs = [stage(m, True), stage(m, False)]
        lib = tvm.compile(te.create_prim_func([x, *outs]), target="llvm")
        got = [tvm.runtime.tensor(np.zeros(len(values), "int64")) for _ in outs]
        lib(tvm.runtime.tensor(values), *got)
        scalar = [formulas.multiply_by_quantized_multiplier(int(v), m, shift) for v in values]
        neon = [formulas.multiply_by_quantized_multiplier_4rows(int(v), m, shift) for v in values]
        np.testing.assert_array_equal(got[0].numpy(), scalar)
        np.testing.assert_array_equal(got[1].numpy(), neon)


def test_quantize_multiplier_transcription():
    """QuantizeMultiplier's corner cases: exact powers of two, rounding up to 2^31, flushing."""
    assert formulas.quantize_multiplier(1.0) == (2**30, 1)
    assert formulas.quantize_multiplier(0.125) == (2**30, -2)
    assert formulas.quantize_multiplier(1 - 2.0**-40) == (2**30, 1)  # q rounds to 2^31: halved
    assert formulas.quantize_multiplier(2.0**-40) == (0, 0)
    assert formulas.quantize_multiplier(0.0) == (0, 0)
    # and the folded 1/count: (2^30 << 3) / 8 at shift 1 - 3
    assert formulas.mean_reference_multiplier(0.5, 0.5, 8) == (2**30, -2)
