"""LiteRT as the oracle of the TFLite road: its three kernels, seeded random pool cases and
random single- and two-operator models (pools and MEAN over H and W), and tvm_pool's outputs for
the same flatbuffer (built by :mod:`tvm_pool.tflite.models`).

LiteRT 2.3's interpreter picks its kernels by ``experimental_op_resolver_type``:

- ``xnnpack``: the default (``AUTO``): XNNPACK takes float32 MAX/AVERAGE_POOL_2D and int8/uint8
  MAX_POOL_2D; the rest falls back to the builtin kernels;
- ``builtin``: ``BUILTIN_WITHOUT_DEFAULT_DELEGATES``, the builtin (optimized) kernels;
- ``reference``: ``BUILTIN_REF``, the reference kernels.
"""

from __future__ import annotations

import warnings

import numpy as np
import tvm
from ai_edge_litert import interpreter as litert
from tvm import relax

import tvm_pool
from tvm_pool.tflite import formulas
from tvm_pool.tflite.models import MeanCase, PoolCase, Quant

KERNELS = {
    "xnnpack": litert.OpResolverType.AUTO,
    "builtin": litert.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    "reference": litert.OpResolverType.BUILTIN_REF,
}
ACTIVATIONS = formulas.FUSED_ACTIVATIONS
FLOAT_TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def run_litert(content: bytes, inputs: list, kernel: str, preserve: bool = False, threads: int | None = None) -> dict:
    """Outputs by tensor name (``preserve``: every tensor of the model, by name; ``threads``:
    the interpreter's ``num_threads``, by default LiteRT's, one)."""
    with warnings.catch_warnings():  # preserve_all_tensors "is intended for debugging purposes"
        warnings.simplefilter("ignore", UserWarning)
        it = litert.Interpreter(model_content=content, experimental_op_resolver_type=KERNELS[kernel],
                                experimental_preserve_all_tensors=preserve, num_threads=threads)
    it.allocate_tensors()
    for detail, x in zip(it.get_input_details(), inputs):
        it.set_tensor(detail["index"], x)
    it.invoke()
    details = it.get_tensor_details() if preserve else it.get_output_details()
    return {d["name"]: it.get_tensor(d["index"]) for d in details}


def xnnpack_takes(content: bytes) -> bool:
    """Whether XNNPACK (the default interpreter) takes the model's operators: LiteRT then lists
    a DELEGATE node (``_get_ops_details``, the interpreter's own listing)."""
    it = litert.Interpreter(model_content=content)
    it.allocate_tensors()
    return any(d["op_name"] == "DELEGATE" for d in it._get_ops_details())  # pylint: disable=protected-access


def compile_model(content: bytes, importer=None):
    """A VirtualMachine of ``content`` imported by ``importer`` (tvm_pool.from_tflite) and
    compiled by tvm_pool.compile for this CPU's generic llvm target."""
    mod = (importer or tvm_pool.from_tflite)(content)
    return relax.VirtualMachine(tvm_pool.compile(mod, target="llvm"), tvm.cpu())


def run_vm(vm, inputs: list) -> list:
    out = vm["main"](*[tvm.runtime.tensor(x) for x in inputs])
    return [out.numpy()] if hasattr(out, "numpy") else [o.numpy() for o in out]


# ---------------------------------------------------------------------------------------------
# Random cases
# ---------------------------------------------------------------------------------------------

OPS = {"float32": ("MAX_POOL_2D", "AVERAGE_POOL_2D", "L2_POOL_2D"), "int8": ("MAX_POOL_2D", "AVERAGE_POOL_2D"),
       "uint8": ("MAX_POOL_2D", "AVERAGE_POOL_2D"), "int16": ("MAX_POOL_2D", "AVERAGE_POOL_2D")}


def half_scale(rng, bound: float) -> float:
    """A float32 scale with ``float32(bound) / scale`` exactly ``k + 0.5`` (the activation's
    bound lands on a half: std::round and Python's round then may differ)."""
    while True:
        k = int(rng.integers(1, 120))
        scale = np.float32(bound / (k + 0.5))
        for candidate in (scale, np.nextafter(scale, np.float32(0)), np.nextafter(scale, np.float32(1))):
            if np.float32(bound) / candidate == np.float32(k + 0.5):
                return float(candidate)


def random_quant(rng, dtype: str, activation: str) -> Quant:
    """Scales at random, or on a half for the activation's bound; zero points over the type."""
    pick = rng.integers(3)
    if pick == 0 and activation in ("RELU6", "RELU_N1_TO_1"):
        scale = half_scale(rng, 6.0 if activation == "RELU6" else 1.0)
    else:
        scale = float(np.float32(rng.choice([rng.uniform(0.002, 0.2), 6 / 127.5, 1 / 64])))
    info = np.iinfo(dtype)
    zero = 0 if dtype == "int16" and rng.integers(2) else int(rng.integers(max(info.min, -300), min(info.max, 300) + 1))
    return Quant(scale, zero)


def _random_window(rng, shape: tuple) -> tuple:
    """(filter, strides, padding, fused activation) of a random pool over NHWC ``shape``:
    filters and strides 1-4 (a VALID filter no larger than the input)."""
    filter_hw = tuple(int(k) for k in rng.integers(1, 5, 2))
    stride_hw = tuple(int(s) for s in rng.integers(1, 5, 2))
    padding = str(rng.choice(["SAME", "VALID"]))
    if padding == "VALID":
        filter_hw = (min(filter_hw[0], shape[1]), min(filter_hw[1], shape[2]))
    activation = str(rng.choice(ACTIVATIONS))
    return filter_hw, stride_hw, padding, activation


def random_case(rng, dtype: str, op: str | None = None) -> PoolCase:
    """Filters 1-4, strides 1-4 (also above the filter), SAME/VALID, odd sizes, batch 1-3,
    channels 1-67, every fused activation."""
    op = op or str(rng.choice(OPS[dtype]))
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 12)), int(rng.integers(1, 12)), int(rng.integers(1, 68)))
    filter_hw, stride_hw, padding, activation = _random_window(rng, shape)
    quant = random_quant(rng, dtype, activation) if dtype != "float32" else None
    return PoolCase(op, shape, filter_hw, stride_hw, padding, activation, dtype, quant, quant)


# ---------------------------------------------------------------------------------------------
# Random models for the differential (tests/test_tflite_differential.py)
# ---------------------------------------------------------------------------------------------

DTYPES = ("float32", "int8", "uint8", "int16")
# MEAN over H and W as models write it (the axes in either order, negative, or repeated).
MEAN_AXES = ((1, 2), (2, 1), (-3, -2), (2, -2, 1))


def _quant(rng, dtype: str, activation: str = "NONE", zero_point_zero: bool = False):
    if dtype == "float32":
        return None
    quant = random_quant(rng, dtype, activation)
    return Quant(quant.scale, 0) if zero_point_zero else quant


def random_op(rng, kind: str, shape: tuple, dtype: str, in_quant, keep_dims=None, int16_zero=False):
    """One operator of ``kind`` (a pool name or ``"MEAN"``) reading ``shape`` with ``in_quant``;
    its output quantization is the input's or (half the time) another one. ``int16_zero``:
    output zero point 0 (what LiteRT's int16 MEAN needs on its input and output)."""
    same = rng.integers(2) == 0
    if kind == "MEAN":
        axes = MEAN_AXES[int(rng.integers(len(MEAN_AXES)))]
        keep = bool(rng.integers(2)) if keep_dims is None else keep_dims
        out_quant = in_quant if same else _quant(rng, dtype, zero_point_zero=int16_zero)
        return MeanCase(shape, axes, keep, dtype, in_quant, out_quant)
    filter_hw, stride_hw, padding, activation = _random_window(rng, shape)
    out_quant = in_quant if same else _quant(rng, dtype, activation, zero_point_zero=int16_zero)
    return PoolCase(kind, shape, filter_hw, stride_hw, padding, activation, dtype, in_quant, out_quant)


def random_model(rng, dtype: str | None = None) -> list:
    """A chain of one or two operators (:func:`tvm_pool.tflite.models.add_chain`): MAX, AVERAGE
    and (float32) L2 pools and MEAN over H and W with or without keep_dims (a MEAN feeding a
    second operator keeps them); float32, int8, uint8, int16; batch 1-3, H and W 1-11,
    channels 1-67 (int8 MEAN: below and above LiteRT's 16-channel blocks); input and output
    quantization equal or not. int16 models with a MEAN quantize with zero point 0 throughout
    (LiteRT's int16 MEAN refuses others)."""
    dtype = dtype or str(rng.choice(DTYPES))
    kinds = list(OPS[dtype]) + ["MEAN"] * 2
    chain_kinds = [str(rng.choice(kinds)) for _ in range(int(rng.integers(1, 3)))]
    int16_zero = dtype == "int16" and "MEAN" in chain_kinds
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 12)), int(rng.integers(1, 12)), int(rng.integers(1, 68)))
    quant = _quant(rng, dtype, zero_point_zero=int16_zero)
    chain = []
    for i, kind in enumerate(chain_kinds):
        last = i == len(chain_kinds) - 1
        case = random_op(rng, kind, shape, dtype, quant, keep_dims=None if last else True, int16_zero=int16_zero)
        chain.append(case)
        shape, quant = case.output_shape, case.out_quant
    return chain


def random_input(rng, case: PoolCase) -> np.ndarray:
    if case.dtype == "float32":
        return (rng.standard_normal(case.input_shape) * 3).astype(np.float32)
    info = np.iinfo(case.dtype)
    low, high = (info.min, info.max) if case.dtype != "int16" else (-3000, 3000)
    return rng.integers(low, high + 1, case.input_shape).astype(case.dtype)


# ---------------------------------------------------------------------------------------------
# What each kernel's clamp is
# ---------------------------------------------------------------------------------------------


def xnnpack_bounds(case: PoolCase) -> tuple[int, int]:
    """XNNPACK's quantized clamp (``xnn_qs8_quantize`` / ``xnn_qu8_quantize``): ``lrintf(bound /
    scale + zero_point)`` in float32, half to even, after adding the zero point."""
    info = np.iinfo(case.dtype)
    bounds = formulas.float_activation_bounds(case.activation) or (None, None)
    scale, zero = np.float32(case.out_quant.scale), np.float32(case.out_quant.zero_point)

    def quantize(value, default):
        if value is None:
            return default
        return int(np.clip(np.rint(np.float32(value) / scale + zero), info.min, info.max))

    return quantize(bounds[0], int(info.min)), quantize(bounds[1], int(info.max))


def tflite_bounds(case: PoolCase) -> tuple[int, int]:
    return formulas.quantized_activation_bounds(case.activation, case.out_quant.scale, case.out_quant.zero_point, case.dtype)


def mismatch(got: np.ndarray, want: np.ndarray, case, kernel: str) -> str:
    """Why tvm_pool's output differs from LiteRT ``kernel``'s; empty when it does not. Integers
    compare exactly, except that XNNPACK's own clamp bounds (where they differ from TFLite's,
    :func:`xnnpack_bounds`) may move values at a bound by one; floats within FLOAT_TOLERANCE."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{kernel}: shape/dtype {got.shape} {got.dtype}, LiteRT {want.shape} {want.dtype}"
    if case.dtype == "float32":
        if np.allclose(got, want, equal_nan=True, **FLOAT_TOLERANCE):
            return ""
        bad = ~np.isclose(got, want, equal_nan=True, **FLOAT_TOLERANCE)
    else:
        bad = got != want
        if kernel == "xnnpack" and case.op == "MAX_POOL_2D" and xnnpack_bounds(case) != tflite_bounds(case):
            bad &= ~(np.isin(got, tflite_bounds(case)) & np.isin(want, xnnpack_bounds(case)))
    if not bad.any():
        return ""
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{kernel}: {int(bad.sum())} of {bad.size} differ, first at {first}: tvm_pool {got[first]}, LiteRT {want[first]}"


# ---------------------------------------------------------------------------------------------
# LiteRT's integer MEAN over H and W, transcribed (tvm_pool/tflite/formulas.py)
# ---------------------------------------------------------------------------------------------


def litert_mean(case: MeanCase, x: np.ndarray, path: str) -> np.ndarray:
    """What LiteRT's ``path`` kernel computes for an integer MEAN over H and W of ``x``, in
    plain Python on the formulas: ``"reference"`` (``reference_ops::QuantizedMeanOrSum``),
    ``"optimized"`` (int8/uint8 ``Mean`` with keep_dims; int8 channels in whole blocks of 16 on
    its NEON path) or ``"scalar"`` (the optimized kernel without NEON). Shaped as ``case``'s
    output."""
    n, h, w, c = x.shape
    count = h * w
    sums = x.astype(np.int64).sum(axis=(1, 2))
    s_in, z_in = case.in_quant.scale, case.in_quant.zero_point
    s_out, z_out = case.out_quant.scale, case.out_quant.zero_point
    info = np.iinfo(case.dtype)
    out = np.empty((n, c), np.int64)
    if path == "reference":
        multiplier, shift = formulas.mean_reference_multiplier(s_in, s_out, count)
        for (b, k), total in np.ndenumerate(sums):
            x32 = formulas.wrap_int32(int(total) - z_in * count)
            out[b, k] = formulas.multiply_by_quantized_multiplier(x32, multiplier, shift) + z_out
    else:
        multiplier, shift, bias = formulas.mean_optimized_parameters(s_in, z_in, s_out, z_out, count)
        neon = c // 16 * 16 if path == "optimized" and case.dtype == "int8" else 0
        for (b, k), total in np.ndenumerate(sums):
            multiply = (formulas.multiply_by_quantized_multiplier_4rows if k < neon
                        else formulas.multiply_by_quantized_multiplier)
            out[b, k] = multiply(formulas.wrap_int32(int(total)), multiplier, shift) + bias
    return np.clip(out, info.min, info.max).astype(case.dtype).reshape(case.output_shape)
