"""TFLite's MEAN over the spatial axes (a global average pool) on tvm_pool's average-pool compute.

MEAN over axes {1, 2} of a static 4-D NHWC tensor (keep_dims true or false; the axes in any
order, negative or repeated) in float32, int8, uint8 and int16 is converted here, exactly as
LiteRT's builtin kernels (kernels/reduce.cc, ``EvalMean<kGenericOptimized>``) compute it
(docs/conformance.md, TFLite, rows T11-T16). Every other MEAN (other axes or ranks, a
non-constant axis tensor, empty tensors, other types) goes to TVM's converter unchanged.

- float32: the plane's sum divided by the number of taps (``compute.global_pool(..., "avg",
  by_axis=False)``: one reduction over (h, w) in row-major order, LiteRT's order, so bit-exact
  with the builtin and reference kernels; XNNPACK sums in another order).
- int8/uint8 with keep_dims: the optimized kernel (``optimized_integer_ops::Mean`` /
  ``optimized_ops::Mean``): ``MultiplyByQuantizedMultiplier(sum, M, shift) + bias`` on the raw
  int32 sum, ``M``/``shift`` from ``in_scale / (count * out_scale)`` and ``bias`` from the zero
  points, in float32 (:func:`~tvm_pool.tflite.formulas.mean_optimized_parameters`). For int8
  the channels in whole blocks of 16 take the kernel's NEON path (NEON_2_SSE on x86), whose
  multiply rounds half up instead of half away from zero
  (:func:`~tvm_pool.tflite.formulas.multiply_by_quantized_multiplier_4rows`); uint8 sums are
  never negative, so both paths agree there.
- int8/uint8 without keep_dims, and int16: the reference kernel
  (``reference_ops::QuantizedMeanOrSum``): ``MultiplyByQuantizedMultiplier(int32(sum -
  in_zero_point * count), M', shift') + out_zero_point``, with ``in_scale / out_scale`` quantized
  in double and the 1/count folded into the multiplier
  (:func:`~tvm_pool.tflite.formulas.mean_reference_multiplier`). int16 needs both zero points 0
  (LiteRT's Prepare refuses others; so does tvm_pool).

The sum is the int32 sum stage of tvm_pool's global average pool compute in NHWC
(:func:`window_sum`); the requantization is an elementwise epilogue in the same PrimFunc, with
every constant computed here in Python. LiteRT sums in int32 too (wrapping past 2^31, which
takes more than 65536 int16 or 8 million int8 taps).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from tflite.BuiltinOptions import BuiltinOptions
from tflite.ReducerOptions import ReducerOptions
import tvm
from tvm import te, tirx

from .. import compute
from ..errors import InvalidModelError, OpContext
from . import formulas
from .pools import node_context, tensor_quantization

_TYPES = ("float32",) + formulas.QUANTIZED_TYPES
# LiteRT's optimized integer MEAN takes 16 channels at a time on its NEON path.
NEON_BLOCK = 16


@dataclass(frozen=True)
class MeanPlan:
    """What :func:`mean_te` computes: ``path`` is ``float``, ``optimized`` (int8/uint8 with
    keep_dims) or ``reference``; ``multiplier``/``shift`` the fixed-point rescale, ``offset``
    what is added after it (``bias`` or the output zero point), ``in_zero_point`` what the
    reference path takes off the sum (``count`` times), ``neon_channels`` how many leading
    channels take the NEON rounding."""

    path: str
    keep_dims: bool
    multiplier: int = 0
    shift: int = 0
    offset: int = 0
    in_zero_point: int = 0
    neon_channels: int = 0


def spatial_axes(axes, rank: int):
    """The axes as LiteRT resolves them (``ResolveAxisForShape``: negative ones counted from the
    end, repeats dropped), or None where one is out of range."""
    resolved = []
    for axis in axes:
        axis = int(axis) + rank if int(axis) < 0 else int(axis)
        if not 0 <= axis < rank:
            return None
        if axis not in resolved:
            resolved.append(axis)
    return resolved


def _keep_dims(op) -> bool:
    if not op.BuiltinOptionsType():
        return False  # LiteRT's and TVM's default
    if op.BuiltinOptionsType() != BuiltinOptions.ReducerOptions:
        return None
    options = ReducerOptions()
    table = op.BuiltinOptions()
    options.Init(table.Bytes, table.Pos)
    return bool(options.KeepDims())


def plan_mean(converter, op, ctx: OpContext):
    """(plan, data tensor, NHWC shape) for a MEAN tvm_pool converts, or None for one it leaves
    to TVM's converter."""
    inputs, outputs = converter.get_input_tensors(op), converter.get_output_tensors(op)
    if len(inputs) != 2 or len(outputs) != 1:
        return None
    data, axes_tensor, out = inputs[0], inputs[1], outputs[0]
    dtype = converter.get_tensor_type_str(data.tensor.Type())
    if dtype not in _TYPES or converter.get_tensor_type_str(out.tensor.Type()) != dtype:
        return None
    if (converter.has_expr(axes_tensor.tensor_idx) or not axes_tensor.buffer or not axes_tensor.buffer.DataLength()
            or converter.get_tensor_type_str(axes_tensor.tensor.Type()) != "int32"):
        return None  # axes computed at run time, or not int32 (LiteRT's kernel takes int32 only)
    axes = np.atleast_1d(converter.get_tensor_value(axes_tensor)).ravel()
    ty = converter.get_expr(data.tensor_idx).ty
    shape = tuple(ty.shape.values) if getattr(ty, "shape", None) is not None else None
    if shape is None or len(shape) != 4 or not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
        return None
    shape = tuple(int(d) for d in shape)
    if min(shape) < 1 or sorted(spatial_axes(axes, 4) or []) != [1, 2]:
        return None
    keep_dims = _keep_dims(op)
    if keep_dims is None:
        return None
    if dtype == "float32":
        return MeanPlan("float", keep_dims), data, shape
    q_in, q_out = tensor_quantization(data), tensor_quantization(out)
    if q_in is None or q_out is None or "per-axis" in (q_in, q_out):
        raise InvalidModelError(
            ctx, f"{dtype} MEAN needs per-tensor quantization (one scale, one zero point) on its input and output, "
            f"got {q_in} and {q_out}",
        )
    count = shape[1] * shape[2]
    if dtype == "int16" and (q_in[1], q_out[1]) != (0, 0):
        raise InvalidModelError(
            ctx, f"must be 0 for int16 (input {q_in[1]}, output {q_out[1]}; LiteRT's MEAN refuses others)",
            "zero_point",
        )
    if dtype != "int16" and keep_dims:
        multiplier, shift, bias = formulas.mean_optimized_parameters(*q_in, *q_out, count)
        neon = shape[3] // NEON_BLOCK * NEON_BLOCK if dtype == "int8" else 0
        return MeanPlan("optimized", True, multiplier, shift, bias, 0, neon), data, shape
    multiplier, shift = formulas.mean_reference_multiplier(q_in[0], q_out[0], count)
    return MeanPlan("reference", keep_dims, multiplier, shift, q_out[1], q_in[1]), data, shape


def convert_mean(converter, op, fallback):
    """The Relax call of tvm_pool's MEAN (one PrimFunc), or ``fallback(op)`` (TVM's converter)
    for a MEAN that is not over the spatial axes of a static 4-D tensor."""
    ctx = node_context(converter, op)
    planned = plan_mean(converter, op, ctx)
    if planned is None:
        return fallback(op)
    plan, data, shape = planned
    expr = converter.get_expr(data.tensor_idx)
    return converter.bb.call_te(mean_te, expr, **dataclasses.asdict(plan),
                                primfunc_name_hint=f"tvm_pool_tflite_mean_{plan.path}")


def mean_te(data: te.Tensor, **plan) -> te.Tensor:
    """The TE of a TFLite MEAN over H and W of NHWC ``data`` (see the module docstring);
    ``plan``: the fields of a :class:`MeanPlan`."""
    plan = MeanPlan(**plan)
    n, h, w, c = (int(d) for d in data.shape)
    if plan.path == "float":
        pooled = compute.global_pool(data, "avg", layout="NHWC", by_axis=False)
        return pooled if plan.keep_dims else _squeeze(pooled)
    total = window_sum(compute.global_pool(data, "avg", layout="NHWC", by_axis=False))
    dtype = str(data.dtype)
    info = np.iinfo(dtype)
    count = h * w

    def requantize(sum32, channel):
        if plan.path == "reference":
            x = (sum32.astype("int64") - tirx.const(plan.in_zero_point * count, "int64")).astype("int32")
            y = fixed_point_multiply(x, plan.multiplier, plan.shift)
        else:  # the channels of the NEON blocks round half up
            half_away = True if not plan.neon_channels else channel >= plan.neon_channels
            y = fixed_point_multiply(sum32, plan.multiplier, plan.shift, half_away)
        y = y + tirx.const(plan.offset, "int64")
        y = tirx.min(tirx.max(y, tirx.const(int(info.min), "int64")), tirx.const(int(info.max), "int64"))
        return y.astype(dtype)

    if plan.keep_dims:
        return te.compute((n, 1, 1, c), lambda b, i, j, k: requantize(total[b, i, j, k], k), name="mean_requantize")
    return te.compute((n, c), lambda b, k: requantize(total[b, 0, 0, k], k), name="mean_requantize")


def window_sum(pooled: te.Tensor) -> te.Tensor:
    """The int32 sum stage of tvm_pool's integer global average pool (``pooled`` divides it by
    the count and casts): what LiteRT's integer MEAN kernels requantize. Only the stages the
    result reads are built, so the division is dropped."""
    (total,) = pooled.op.input_tensors
    if str(total.dtype) != "int32" or [int(d) for d in total.shape] != [int(d) for d in pooled.shape]:
        raise AssertionError(
            f"the average pool's sum stage is {total.dtype} {list(total.shape)}, not int32 {list(pooled.shape)}"
        )
    return total


def _squeeze(pooled: te.Tensor) -> te.Tensor:
    n, _, _, c = pooled.shape
    return te.compute((n, c), lambda b, k: pooled[b, 0, 0, k], name="mean_squeeze")


# ---------------------------------------------------------------------------------------------
# LiteRT's fixed-point multiply in TIR (the transcriptions of the C++ are in formulas.py)
# ---------------------------------------------------------------------------------------------


def fixed_point_multiply(x, multiplier: int, shift: int, half_away=True):
    """``MultiplyByQuantizedMultiplier(x, multiplier, shift)`` on an int32 TIR value, as int64:
    :func:`tvm_pool.tflite.formulas.multiply_by_quantized_multiplier` where ``half_away`` is
    true (a PrimExpr: per element), else its NEON twin
    :func:`~tvm_pool.tflite.formulas.multiply_by_quantized_multiplier_4rows`. Both start with
    ``x * 2^left`` wrapped to int32 and ``SaturatingRoundingDoublingHighMul`` = ``vqrdmulh`` =
    ``(x * multiplier + 2^30) >> 31`` (the high half rounded half up; no saturation, the
    multiplier is below 2^31); the shift right by ``right`` then rounds ``(high + 2^(right-1)
    - (high < 0 and half_away)) >> right``: half away from zero (``RoundingDivideByPOT``) or
    half up (``vrshl``). tests/test_tflite_differential.py checks these forms against the
    transcriptions."""
    left, right = max(shift, 0), max(-shift, 0)
    if left:
        x = (x.astype("int64") * tirx.const(1 << left, "int64")).astype("int32")  # wraps, as in C++
    high = tirx.shift_right(x.astype("int64") * tirx.const(int(multiplier), "int64") + tirx.const(1 << 30, "int64"),
                            tirx.const(31, "int64"))
    if not right:
        return high
    one, zero = tirx.const(1, "int64"), tirx.const(0, "int64")
    rounded = high + tirx.const(1 << (right - 1), "int64")
    if half_away is not False:
        negative = high < zero if half_away is True else tirx.all(high < zero, half_away)
        rounded = rounded - tirx.Select(negative, one, zero)
    return tirx.shift_right(rounded, tirx.const(right, "int64"))
