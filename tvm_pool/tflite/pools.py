"""TFLite's MAX_POOL_2D, AVERAGE_POOL_2D and L2_POOL_2D on tvm_pool's computes (NHWC).

Exactly as LiteRT's builtin kernels compute them (docs/conformance.md, section "TFLite"):

- SAME puts the odd pad at the end and never pads below 0 (stride > filter: no padding);
  the average and L2 divisors count the taps in the data only.
- int8/uint8/int16 averages accumulate in int32 and round half away from zero
  (``acc > 0 ? (acc + n/2) / n : (acc - n/2) / n``). Where the input's and the output's
  quantization differ (TFLite's quantization spec wants them equal), the integers are pooled as
  they are, not requantized, as LiteRT's kernels do; only the clamp reads the output's.
- The fused activation clamps in the output's quantized domain with TFLite's own bounds
  (:func:`~tvm_pool.tflite.formulas.quantized_activation_bounds`: ``std::round``, not Python's
  ``round``), in the same PrimFunc as the pool, so it fuses.
- L2_POOL_2D is ``sqrt(sum of squares / count of data taps)``, float32 only (as in LiteRT).

Each converter takes the operator converter (for the model's tensors and its BlockBuilder)
and the TFLite operator, and returns the Relax call of one PrimFunc (integer averages), or, for
max, float average and L2 pools, Relax's own NHWC pool (L2: between a square and a square root)
and its activation, which ``tvm_pool.compile`` legalizes with the same compute in the form the
target measured best.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tflite.ActivationFunctionType import ActivationFunctionType
from tflite.BuiltinOptions import BuiltinOptions
from tflite.Padding import Padding
from tflite.Pool2DOptions import Pool2DOptions
import tvm
from tvm import te, tirx

from .. import compute
from ..errors import InvalidModelError, OpContext, UnsupportedError
from . import formulas

KINDS = {"MAX_POOL_2D": "max", "AVERAGE_POOL_2D": "avg", "L2_POOL_2D": "l2"}
_ACTIVATION_NAMES = {v: k for k, v in vars(ActivationFunctionType).items() if not k.startswith("_")}
_PADDING_NAMES = {v: k for k, v in vars(Padding).items() if not k.startswith("_")}
_FLOAT_TYPES = ("float32",)


@dataclass(frozen=True)
class PoolAttributes:
    filter_hw: tuple
    stride_hw: tuple
    padding: str
    activation: str


@dataclass(frozen=True)
class PoolTensors:
    data: object  # TensorWrapper of the input
    out: object  # TensorWrapper of the output
    dtype: str
    shape: tuple  # NHWC


def node_context(converter, op) -> OpContext:
    """The operator, named after its first output tensor (TFLite operators have no names)."""
    outputs = converter.get_output_tensors(op)
    name = converter.tensor_name(outputs[0]) if outputs else ""
    return OpContext(converter.get_op_code_str(op), name)


def read_attributes(op, ctx: OpContext) -> PoolAttributes:
    if op.BuiltinOptionsType() != BuiltinOptions.Pool2DOptions:
        raise InvalidModelError(ctx, f"has builtin options type {op.BuiltinOptionsType()}; a pool needs Pool2DOptions")
    table = op.BuiltinOptions()
    options = Pool2DOptions()
    options.Init(table.Bytes, table.Pos)
    attrs = PoolAttributes(
        (options.FilterHeight(), options.FilterWidth()), (options.StrideH(), options.StrideW()),
        _PADDING_NAMES.get(options.Padding(), str(options.Padding())),
        _ACTIVATION_NAMES.get(options.FusedActivationFunction(), str(options.FusedActivationFunction())),
    )
    for name, values in (("filter", attrs.filter_hw), ("stride", attrs.stride_hw)):
        if min(values) < 1:
            raise InvalidModelError(ctx, f"must be >= 1, got (h, w) = {values}", f"{name}_height/{name}_width")
    if attrs.padding not in formulas.PADDINGS:
        raise InvalidModelError(ctx, f"must be one of {', '.join(formulas.PADDINGS)}, got {attrs.padding}", "padding")
    if attrs.activation not in formulas.FUSED_ACTIVATIONS:
        raise UnsupportedError(
            ctx, f"fused_activation_function {attrs.activation} is not supported (allowed: "
            f"{', '.join(formulas.FUSED_ACTIVATIONS)}; LiteRT's pooling kernels ignore it, TVM's converter applies it)",
        )
    return attrs


def read_tensors(converter, op, ctx: OpContext, kind: str) -> PoolTensors:
    inputs, outputs = converter.get_input_tensors(op), converter.get_output_tensors(op)
    if len(inputs) != 1 or len(outputs) != 1:
        raise InvalidModelError(ctx, f"has {len(inputs)} inputs and {len(outputs)} outputs; a pool has 1 and 1")
    data, out = inputs[0], outputs[0]
    dtype = converter.get_tensor_type_str(data.tensor.Type())
    out_dtype = converter.get_tensor_type_str(out.tensor.Type())
    allowed = _FLOAT_TYPES if kind == "l2" else _FLOAT_TYPES + formulas.QUANTIZED_TYPES
    if dtype not in allowed:
        raise UnsupportedError(ctx, f"input type {dtype} is not supported (allowed: {', '.join(allowed)})")
    if out_dtype != dtype:
        raise InvalidModelError(ctx, f"output type {out_dtype} differs from the input type {dtype}")
    ty = converter.get_expr(data.tensor_idx).ty  # its shape: the model's, or the caller's shape_dict
    shape = tuple(ty.shape.values) if ty.shape is not None else None
    if shape is None or len(shape) != 4:
        raise InvalidModelError(ctx, f"input has shape {list(shape or [])}; a pool takes a 4-D NHWC tensor")
    if not all(isinstance(d, tvm.tirx.IntImm) for d in shape):
        raise UnsupportedError(ctx, f"input shape {list(shape)} is not static")
    return PoolTensors(data, out, dtype, tuple(int(d) for d in shape))


def _check_geometry(ctx, converter, tensors: PoolTensors, attrs: PoolAttributes):
    """The pads; the output shape must be the declared one where the input's is (a shape_dict
    that changes the input changes the output too)."""
    pads, out_hw = formulas.pool_geometry(attrs.padding, tensors.shape[1:3], attrs.filter_hw, attrs.stride_hw)
    if min(out_hw) < 1:
        raise InvalidModelError(
            ctx, f"gives output size {out_hw} < 1 (input (h, w) {tensors.shape[1:3]}, filter {attrs.filter_hw}, "
            f"stride {attrs.stride_hw}, {attrs.padding})",
        )
    want = (tensors.shape[0], *out_hw, tensors.shape[3])
    declared_in, declared = (_declared_shape(t) for t in (tensors.data, tensors.out))
    if declared_in == tensors.shape and declared and declared != want:
        raise InvalidModelError(ctx, f"output tensor has shape {list(declared)}; the pool gives {list(want)}")
    return pads


def _declared_shape(tensor) -> tuple:
    return tuple(int(d) for d in tensor.tensor.ShapeAsNumpy()) if tensor.tensor.ShapeLength() else ()


def tensor_quantization(tensor):
    """A tensor's (scale as float32, zero point), "per-axis" for more than one scale, None when
    it is not quantized."""
    params = tensor.qnn_params
    if params is None:
        return None
    scale = params["scale"].value.numpy()
    if scale.size != 1:
        return "per-axis"
    return float(np.float32(scale.item())), int(params["zero_point"].value.numpy().item())


def _quantized_bounds(ctx, tensors: PoolTensors, attrs: PoolAttributes):
    """(low, high) of the clamp in the integer domain, after checking the quantization."""
    q_in, q_out = tensor_quantization(tensors.data), tensor_quantization(tensors.out)
    if "per-axis" in (q_in, q_out):
        raise InvalidModelError(ctx, "input and output must be quantized per tensor (one scale, one zero point)")
    # Input and output quantization may differ (the quantization spec wants them equal, LiteRT's
    # kernels do not check): LiteRT pools the integers as they are and clamps with the output's
    # parameters, never requantizing; so does tvm_pool (docs/conformance.md, T4).
    if q_out is None:
        if attrs.activation != "NONE":
            raise InvalidModelError(
                ctx, f"fused activation {attrs.activation} on {tensors.dtype} needs the output's quantization"
            )
        return None
    try:
        low, high = formulas.quantized_activation_bounds(attrs.activation, *q_out, tensors.dtype)
    except ValueError as err:
        raise InvalidModelError(ctx, f"fused activation {attrs.activation}: {err}") from None
    info = np.iinfo(tensors.dtype)
    return None if (low, high) == (info.min, info.max) else (low, high)


def convert_pool(converter, op, kind: str):
    """The Relax call of one PrimFunc: the pool in NHWC and its fused activation."""
    ctx = node_context(converter, op)
    attrs = read_attributes(op, ctx)
    tensors = read_tensors(converter, op, ctx, kind)
    pads = _check_geometry(ctx, converter, tensors, attrs)
    if tensors.dtype in formulas.QUANTIZED_TYPES:
        bounds = _quantized_bounds(ctx, tensors, attrs)
    else:  # quantization parameters on float tensors are ignored, as LiteRT does
        bounds = formulas.float_activation_bounds(attrs.activation)
    data = converter.get_expr(tensors.data.tensor_idx)
    kernel, strides = list(attrs.filter_hw), list(attrs.stride_hw)
    if kind == "max" or tensors.dtype in _FLOAT_TYPES:  # L2 is float32 only (read_tensors)
        return _relax_pool(converter.bb, data, kind, kernel, strides, pads, bounds)
    return converter.bb.call_te(
        integer_average_te, data, kernel=kernel, strides=strides, pads=pads, bounds=bounds,
        primfunc_name_hint="tvm_pool_tflite_avg_pool",
    )


def _relax_pool(bb, data, kind: str, kernel, strides, pads, bounds):
    """A max pool, a float average or an L2 pool as Relax's own NHWC pool: ``tvm_pool.compile``
    legalizes it with tvm_pool's compute for the target it builds for
    (``lowering.legalize_map``), so the compute's form is the one the target's schedule measured
    best (on aarch64 the channel-last passes, on x86 the clamped taps or one expression of every
    tap), where a compute built here, at import, has no target. Pads in the same order as
    :func:`integer_average_te`'s, excluded from the average's count; L2 is the square before
    and the square root after the average; the fused activation follows, and Relax's fusion
    joins all of them to the pool."""
    from tvm import relax  # pylint: disable=import-outside-toplevel

    nn = relax.op.nn
    if kind == "max":
        pooled = bb.emit(nn.max_pool2d(data, kernel, strides, pads, layout="NHWC"))
    else:
        taps = bb.emit(relax.op.multiply(data, data)) if kind == "l2" else data
        pooled = bb.emit(nn.avg_pool2d(taps, kernel, strides, pads, layout="NHWC", count_include_pad=False))
        if kind == "l2":
            pooled = bb.emit(relax.op.sqrt(pooled))
    if bounds is None:
        return pooled
    return bb.call_te(clamp, pooled, bounds, primfunc_name_hint="tvm_pool_tflite_activation")


def integer_average_te(data: te.Tensor, *, kernel, strides, pads, bounds):
    """The TE of a TFLite integer AVERAGE_POOL_2D on NHWC ``data``, rounding half away from zero,
    with its fused activation (see the module docstring; max, float average and L2 pools are
    Relax's own pools, :func:`_relax_pool`)."""
    out = compute.avg_pool(data, kernel, strides, None, pads, layout="NHWC", int_rounding="half_away_from_zero")
    return clamp(out, bounds) if bounds is not None else out


def clamp(out: te.Tensor, bounds) -> te.Tensor:
    """The fused activation: ``min(max(x, low), high)`` (either side None: unbounded)."""
    low, high = bounds

    def fn(*i):
        x = out[i]
        if low is not None:
            x = tirx.max(x, tirx.const(low, out.dtype))
        if high is not None:
            x = tirx.min(x, tirx.const(high, out.dtype))
        return x

    return te.compute(out.shape, fn, name="fused_activation")
